"""Idempotency status on both clients: the operation and its result (commands.py)."""
