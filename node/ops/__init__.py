"""Protocol ops: the validation core (core.py, spec.py, fields.py, schemas.py) and one declaration
file per op family (streams.py, leases.py, locks.py, ...), each with its error codes.
"""
