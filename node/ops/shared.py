"""The fields most op families share, declared once: every family module (node/ops/<fam>.py)
imports them for its `SPECS`, so one declaration yields one request schema component and one
check for all of them. They live apart from node/ops/core.py (the registry) because the
registry imports every family module."""

from __future__ import annotations

from statekeeper.node.ops.fields import IdempotencyKey, Key, Namespace

NS = Namespace("ns")
KEY = Key("key", required=True, component="Key")
IDEMPOTENCY_KEY = IdempotencyKey(
    "idempotency_key",
    "Client-chosen unique id of this write (the client uses a uuid4). A write retried with "
    "the same key within the retention window returns the stored result with "
    "`replayed: true` and applies nothing.",
    txn_error="ops inside a txn take no idempotency_key (give it to the txn)",
)
