"""The web console (docs/console.md): server-rendered pages over the public API.

Layout (one stem per page in each folder):
    app.py          ConsoleApp: router, login/logout, sessions, CSRF, security headers
    session.py      the bounded session table (session id -> the user's token and client)
    context.py      PageContext: what a page handler gets
    pages/          each page's ROUTES (pages/__init__.py's PAGES lists them: the nav too)
    views/          each page's data: async functions over an AsyncClient -> dataclasses
    templates/      Jinja2 (autoescape), one per page, extending base.html
    static/         htmx.min.js (built by `make console-assets`), app.css

Nothing here reads the store: every read and action is a call of the user's own
AsyncClient, so the API's authorization and audit log apply to it as to any client.
"""
