"""The full disk (issue 16 item 8): every node's data on one small tmpfs (the ``smallfs``
topology, chaos/smallfs.py; needs root), filled under the workload.

``start`` writes incompressible 1 MiB values (namespace ``diskfull``, not the workload's)
until the first 507 ``insufficient_storage``: the nodes' NOSPACE alarm (node/quota/alarm.py) is
then raised, and for the fault window the workload's puts, cas and txns with puts get 507
(a definite "not applied": chaos/workload.py records them as failures), while its gets,
deletes and the leader's own work go on. ``stop`` reads every acknowledged 1 MiB value
back, deletes them, compacts, and waits until no node's alarm is raised.

``verify`` says: the refusal came before any node died, every acknowledged 1 MiB value
was intact, reads were served on every node under the alarm, and the alarm cleared. The
runner's own checks cover the workload (no acknowledged write lost, linearizable).
"""

from __future__ import annotations

import os
import time
from typing import ClassVar

from statekeeper.chaos.faults.base import Fault, FaultContext, FaultError
from statekeeper.chaos.report import FAIL, PASS, Verdict

__all__ = ["SMALLFS_BYTES", "DiskFull", "storage_alarms", "wait_alarms_cleared"]

MIB = 1 << 20
# Three nodes' data, the workload's journal growth for a minute and the reserve (a
# quarter of it, node/quota/alarm.py default_reserve) fit; a few dozen 1 MiB values fill it.
SMALLFS_BYTES = 160 * MIB
NS = "diskfull"


def storage_alarms(ctx: FaultContext) -> dict[str, object]:
    """Node id -> its NOSPACE alarm ("nospace" or None) as its status says."""
    return {
        n: ((ctx.cluster.status(n) or {}).get("storage") or {}).get("alarm")
        for n in ctx.node_ids
    }


def wait_alarms_cleared(ctx: FaultContext, timeout: float = 60.0) -> float | None:
    """Seconds until no node's alarm is raised (after a delete + compact), None if one
    still is after `timeout` (logged)."""
    began = time.monotonic()
    while any(storage_alarms(ctx).values()):
        if time.monotonic() - began > timeout:
            ctx.log(f"alarm still raised {timeout:.0f} s after delete + compact: "
                    f"{storage_alarms(ctx)}")
            return None
        time.sleep(0.5)
    cleared = time.monotonic() - began
    ctx.log(f"NOSPACE alarm cleared on every node {cleared:.1f} s after compact")
    return cleared


class DiskFull(Fault):
    name = "disk-full"
    kind = "disk"
    topology = "smallfs"
    description = (
        "every node's data on one small tmpfs, filled with 1 MiB values until the NOSPACE "
        "alarm refuses writes (507); freed by delete + compact"
    )
    fs_bytes: ClassVar[int] = SMALLFS_BYTES

    def __init__(self) -> None:
        self.acked: dict[str, bytes] = {}
        self.refused: str | None = None
        self.died: list[str] = []
        self.intact: int | None = None
        self.read_nodes: list[str] = []
        self.read_errors: list[str] = []
        self.cleared_after: float | None = None

    @classmethod
    def available(cls) -> tuple[bool, str]:
        from statekeeper.chaos.smallfs import available

        return available()

    def _client(self, ctx: FaultContext, urls: list[str] | None = None):
        from statekeeper.client import Client

        return Client(urls or [ctx.cluster.url(n) for n in ctx.node_ids], ns=NS)

    def start(self, ctx: FaultContext) -> str:
        from statekeeper.client import InsufficientStorage

        with self._client(ctx) as c:
            for i in range(self.fs_bytes // MIB):
                value = os.urandom(MIB)
                try:
                    c.put(f"fill{i:03d}", value)
                except InsufficientStorage as e:
                    self.refused = e.message
                    break
                self.acked[f"fill{i:03d}"] = value
        ctx.mark()
        self.died = [n for n in ctx.node_ids if not ctx.cluster.is_running(n)]
        if self.refused is None:
            raise FaultError(f"{len(self.acked)} MiB written and no 507: the disk never filled")
        return f"{len(self.acked)} x 1 MiB acknowledged, then 507: {self.refused}"


    def stop(self, ctx: FaultContext) -> None:
        for n in ctx.node_ids:  # reads under the alarm, linearizable, on every node
            try:
                with self._client(ctx, [ctx.cluster.url(n)]) as one:
                    one.get(next(iter(self.acked)), default=None)
                self.read_nodes.append(n)
            except Exception as e:  # noqa: BLE001 - recorded as the verdict's detail
                self.read_errors.append(f"{n}: {e}")
        with self._client(ctx) as c:
            found = {k: c.get(k, default=None) for k in self.acked}
            self.intact = sum(
                1 for k, v in self.acked.items() if getattr(found[k], "value", 0) == v
            )
            for k in self.acked:
                c.delete(k)
            c.compact(c.status()["revision"])
        self.cleared_after = wait_alarms_cleared(ctx)

    def verify(self, ctx: FaultContext) -> list[Verdict]:
        n = len(self.acked)
        return [
            Verdict(
                "507 before any node died",
                PASS if self.refused and not self.died else FAIL,
                f"{n} MiB acknowledged",
                f"died: {', '.join(self.died) or 'none'}; {self.refused or 'never refused'}",
            ),
            Verdict(
                "acknowledged 1 MiB values intact under the alarm",
                PASS if self.intact == n else FAIL,
                f"{self.intact}/{n}",
            ),
            Verdict(
                "reads served under the alarm",
                PASS if len(self.read_nodes) == len(ctx.node_ids) else FAIL,
                f"{len(self.read_nodes)}/{len(ctx.node_ids)} nodes",
                "; ".join(self.read_errors),
            ),
            Verdict(
                "alarm cleared after delete + compact",
                PASS if self.cleared_after is not None else FAIL,
                "-" if self.cleared_after is None else f"{self.cleared_after:.1f} s",
            ),
        ]
