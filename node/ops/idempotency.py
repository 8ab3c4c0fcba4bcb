"""The idempotency ops' declaration: idempotency_status (docs/protocol.md, "Idempotency
status"; read by node/store/idempotency.py from the records apply keeps, node/store/keys.py
b"i").

An agent whose write timed out (outcome unknown) asks whether the write it sent with an
idempotency key was applied, without sending it again. Like every op it is declared once
(`SPECS`, joined into node.ops.core.OPS).

Normalized shape:

    idempotency_status  {op, ns, idempotency_key}

No error codes of its own: an unknown key is an answer (`applied: false`), not an error.
"""

from __future__ import annotations

from statekeeper.node.ops.fields import IdempotencyKey
from statekeeper.node.ops.shared import NS
from statekeeper.node.ops.spec import OpSpec

SPECS: tuple[OpSpec, ...] = (
    OpSpec(
        "idempotency_status",
        (
            NS,
            IdempotencyKey(
                "idempotency_key",
                "The idempotency_key the write was sent with (in `ns`: keys are scoped to "
                "the write's namespace).",
                required=True,
            ),
        ),
        "idempotency_status op: was the write sent with this idempotency_key applied? "
        "Answers from the idempotency record apply keeps for it; `applied: false` also "
        "says since when records are kept (`remembered_after_ms`).",
        write=False,
        path="/v1/idempotency/status",
    ),
)
