"""Streams on both clients: the operations (commands.py) and their read requests (requests.py)."""
