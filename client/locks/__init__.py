"""Locks on both clients: the operations, locks held on leases (lock.py) and their results."""
