"""The OpenAPI 3.1 document (document.py) and one file per op family (its results, routes, examples)."""
