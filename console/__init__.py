"""The web console (issue 31, docs/console.md): pages served at /ui by a node with
``[ui] enabled = true`` or by ``statekeeper console``; it reads and writes only through
the public API with the user's own token. views/ holds each page's data (no HTML)."""
