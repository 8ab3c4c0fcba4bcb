"""Watch on both clients: the sans-IO core (core.py) and the operation (commands.py)."""
