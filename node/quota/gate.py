"""The NOSPACE alarm's gate for writes: a 507 that tells the truth (issue 26, defect 3).

node/quota/alarm.py decides whether a write may grow the store. Before this gate the refusal
came before anything looked at the write's idempotency record, so the retry of a put
whose first answer was lost got 507 "nothing was applied" while the put was in the store
(probe_507_server.py). A write that carries an idempotency key and is refused is now
answered as a retry normally is, when its key already has a record:

1. quota.check refuses (507) a write that would grow the store. A write without an
   idempotency key (or a batch with one such write) gets the 507 as is: "this attempt
   was not proposed" is all the node can say, and it is true.
2. Otherwise the node waits for a linearizable read point (node/reads.py: ReadIndex on
   the leader, a barrier entry on a follower; an empty entry, a few bytes under the
   alarm) and looks each write's record up in its local store
   (StateMachine.recorded_result: the key scoped to the op's namespace and bound to the
   op, as apply reads it, without going through apply).
3. Every write has a live record: the node answers the recorded results, marked
   `replayed`, as apply would have (a record bound to another request answers
   idempotency_key_reused, as apply would). Nothing is proposed.
4. Some write has none: 507, saying this attempt was not proposed and no earlier one is
   applied yet (one still in flight may be). If the read point cannot be reached (no
   quorum, timeout), 507, saying whether an earlier attempt was applied is not known to
   this node.

Why this is linearizable: apply writes an op's record in the same RocksDB write batch as
the op's effect, so "the record is in a state" is "the op is applied in it". The read
point covers every entry committed before the retry arrived, so a first attempt applied
before then (on any node: it was committed) is found, also by a follower that had not
applied it yet. A first attempt committed later was still in flight; the 507 does not
deny it, and the client (client/retry.py) turns a refusal that follows an attempt of
unknown outcome into `outcome_unknown`.

Why not propose the retry and let apply replay it: every retry would put the write's
bytes (up to a 1 MiB value) into every node's raft journal while the disks are full.
The lookup costs a read point and one point read, only for refused keyed writes (the
client library gives every write a key, so about every refusal: under the alarm a leader
answers them after a ReadIndex round shared by all that arrived together, a follower
after one empty entry).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from statekeeper.node.errors import OpError
from statekeeper.node.quota.alarm import StorageQuota
from statekeeper.node.reads import ReadPolicy
from statekeeper.node.store import StateMachine


@dataclass(frozen=True, slots=True)
class Admission:
    """What the gate let through: `admitted` bytes to hand back to StorageQuota.release
    once the write is answered, or `replays`, the recorded answers (nothing to propose)."""

    admitted: int
    replays: list[dict] | None = None


class QuotaGate:
    """quota.check, then the idempotency lookup for refused keyed writes."""

    def __init__(
        self,
        node_id: str,
        quota: StorageQuota,
        disk_free: Callable[[], int | None],
        sm: StateMachine,
        reads: ReadPolicy,
    ) -> None:
        self.node_id = node_id
        self.quota = quota
        self._disk_free = disk_free
        self._sm = sm
        self._reads = reads

    async def admit(self, ops: list[dict], size: int) -> Admission:
        """Admit validated write `ops` (`size` request bytes), answer them from their
        records, or raise the 507 (see the module docstring)."""
        try:
            return Admission(self.quota.check(self.node_id, ops, size, self._disk_free))
        except OpError as refusal:
            if refusal.code != "insufficient_storage" or not all(
                op.get("idempotency_key") is not None for op in ops
            ):
                raise
            return Admission(0, await self._replays(ops, refusal))

    async def _replays(self, ops: list[dict], refusal: OpError) -> list[dict]:
        keys = ", ".join(repr(op["idempotency_key"]) for op in ops)
        try:
            await self._reads.wait("linearizable", None)
        except OpError as e:
            raise _refused(
                refusal,
                f"whether an earlier attempt with idempotency_key {keys} was applied is not "
                f"known to this node (no linearizable read point: {e.message})",
            ) from None
        results = []
        for op in ops:
            try:
                result = self._sm.recorded_result(op)
            except OpError as e:  # the key is bound to another request: apply's answer
                result = {"error": e.to_dict()}
            if result is None:
                raise _refused(
                    refusal,
                    f"no earlier attempt with idempotency_key {keys} is applied "
                    "(one still in flight may yet be)",
                )
            results.append(result)
        return results


def _refused(refusal: OpError, about_earlier: str) -> OpError:
    """The 507 with what this node knows of earlier attempts appended."""
    said = f"{about_earlier[0].upper()}{about_earlier[1:]}"
    return OpError(refusal.code, f"{refusal.message}. {said}.", **refusal.extra)
