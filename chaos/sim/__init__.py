"""Deterministic simulation: whole clusters in one process on virtual time (docs/simulation.md)."""
