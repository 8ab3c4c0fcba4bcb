"""Retention on both clients: the operations (commands.py)."""
