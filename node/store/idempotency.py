"""The read idempotency_status (docs/protocol.md, "Idempotency status"): was the write sent
with this idempotency key applied? Served from the records apply keeps per (ns, key)
(node/store/apply.py; layout b"i" in node/store/keys.py: [expires_ms, revision, result,
op_digest]); this family writes nothing and has no records of its own.

What the answer can promise:

- A record exists: the write was applied, at `revision` (the revision after it: its own
  when it changed keys, the then-current one when it took none, e.g. a lease_grant). This
  holds also once the record has expired (`expires_ms` <= the clock) but is not pruned yet:
  it is still the proof; a write re-sent with the key from then on would apply again. The
  stored result is not answered (it can be a whole range; a retry replays it).
- No record: nothing with this key in `ns` was applied as of `revision`, OR it was applied
  so long ago that its record expired and was pruned. A record is stored with expires_ms =
  clock + idempotency_seconds and pruned (node/store/compaction.py) only once the clock
  passes that, so every write applied after `remembered_after_ms` = clock -
  idempotency_seconds still has its record; the answer carries that bound, so
  `applied: false` is never a bare "not applied". With idempotency_seconds 0 no record is
  kept and the bound is the clock itself. The bound uses the node's current setting: a
  window raised since an old write applied does not lengthen that write's record.

A write still in flight (proposed, not yet committed when its request timed out) may apply
after a `false`; only a re-send with the same key settles it (it replays if applied).
"""

from __future__ import annotations

from statekeeper.node.config import Limits
from statekeeper.node.store.apply import read_op
from statekeeper.node.store.keys import IDEM, idem_record_id, unpack
from statekeeper.node.store.reads import Source


@read_op("idempotency_status")
def idempotency_status(src: Source, limits: Limits, op: dict) -> dict:
    """{applied: true, revision, expires_ms} or {applied: false, revision,
    remembered_after_ms} (the module docstring says what each promises)."""
    stored = src.point(IDEM + idem_record_id(op["ns"], op["idempotency_key"]))
    if stored is not None:
        expires_ms, revision = unpack(stored)[:2]
        return {"applied": True, "revision": revision, "expires_ms": expires_ms}
    clock = src.clock  # type: ignore[attr-defined]  # ReadView and EntryTx have it
    window_ms = src.retention.idempotency_seconds * 1000  # type: ignore[attr-defined]
    return {
        "applied": False,
        "revision": src.revision,
        "remembered_after_ms": max(0, clock - window_ms),
    }
