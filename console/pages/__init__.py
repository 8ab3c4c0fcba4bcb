"""The console's pages, in nav order: each module has TITLE, PATH (its nav link) and ROUTES
[(method, path, handler)] (console/app.py routes them; tests/unit/test_console_layout.py
checks every page has its view and template). Adding a page = its three files + one
entry here."""

from statekeeper.console.pages import agents, cluster, coordination, keys, langgraph, operations

PAGES = (cluster, keys, agents, langgraph, coordination, operations)
