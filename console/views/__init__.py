"""The data of each console page, no HTML: async functions taking the user's AsyncClient
and the page's query parameters, returning frozen dataclasses (one module per page)."""
