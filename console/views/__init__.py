"""The console's page models: one module per page, async functions taking the user's
AsyncClient and the page's query parameters, returning frozen dataclasses (no HTML)."""
