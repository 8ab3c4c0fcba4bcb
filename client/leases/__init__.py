"""Leases on both clients: the operations, self-renewing leases (keeper.py) and their results."""
