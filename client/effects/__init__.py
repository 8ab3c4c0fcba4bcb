"""The effect ledger: exactly-once recording of irreversible actions (ledger.py) over its sans-IO
core (plan.py).
"""
