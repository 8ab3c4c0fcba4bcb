"""Auth on both clients: the token operations (commands.py) and the bearer token format (tokens.py),
which the node shares.
"""
