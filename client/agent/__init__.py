"""The agent-state layer of the client: typed state envelopes (envelope.py)."""
