"""Deterministic simulation: whole clusters in one process on virtual time (issue 32)."""
