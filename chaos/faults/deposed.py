"""A deposed leader with an uncommitted tail receives a snapshot (5 nodes)."""

from __future__ import annotations

import os
import threading
import time
from typing import ClassVar

from statekeeper.chaos.faults.base import (
    RESTORED,
    Fault,
    FaultContext,
    FaultError,
    log_since,
    log_size,
    snapshot_last_index,
)
from statekeeper.chaos.faults.failpoints import TINY_SNAPSHOTS
from statekeeper.chaos.report import FAIL, PASS, UNKNOWN, Verdict

__all__ = ["DeposedLeaderSnapshot"]


class DeposedLeaderSnapshot(Fault):
    name = "deposed-leader-snapshot"
    watch_target = "leader"
    kind = "partition"
    topology = "links"
    min_nodes = 5
    raft_settings = TINY_SNAPSHOTS
    # Packing a snapshot takes 1.5 s more (a large DB): while the leader packs, pysyncobj
    # answers a follower that needs a snapshot with install messages carrying no data,
    # which is when a follower that trusts them commits its own stale tail. Then the
    # restore waits 0.2 s more once the snapshot is on disk. Both widen the window in
    # which a deposed leader that applied its uncommitted tail would serve it.
    failpoints = {"snapshot-pack": "sleep(1.5)", "snapshot-install": "sleep(0.2)"}
    # Every node has a pinned reader; most of their reads are serializable, the reads a
    # cut-off node still answers from its own state.
    workload_settings = {"serializable_share": 0.6}
    description = (
        "5 nodes: cut the leader's raft links while clients (and 8 probe writes of the "
        "fault's own, each to a key of its own) keep writing to it, so its log ends in "
        "entries that can never commit; the majority elects a leader and compacts past the "
        "old leader's log; heal while the new leader packs a snapshot: the old leader must "
        "be caught up by a snapshot and never serve a write the cluster did not commit "
        "(its serializable view of the probe keys is polled every 10 ms)"
    )
    PROBES: ClassVar[int] = 8
    PROBE_PREFIX: ClassVar[str] = "deposed-probe-"

    def __init__(self) -> None:
        self.old: str | None = None
        self.heal_offset = 0
        self.precondition = ""
        self.probe_errors: dict[str, str] = {}
        # (key, value, mod_revision) -> (store revision, seconds after the heal) of each
        # probe kv the old leader served (first sighting)
        self.sightings: dict[tuple[str, str, int], tuple[int, float]] = {}
        self.polls = 0
        self.healed_while_packing: bool | None = None
        self._probe_threads: list[threading.Thread] = []
        self._stop_polling = threading.Event()
        self._poller: threading.Thread | None = None
        self._heal_ns = 0

    def _probe(self, url: str, i: int) -> None:
        from statekeeper.client import Client, RetryPolicy, StatekeeperError

        key = f"{self.PROBE_PREFIX}{i}"
        try:
            with Client(url, ns="chaos", timeout=4.0, retry=RetryPolicy.disabled(),
                        prefer_leader=False) as c:
                c.put(key, f"uncommitted-{i}", idempotency_key=f"deposed-probe-{i}-{os.getpid()}")
            self.probe_errors[key] = "ok"
        except StatekeeperError as e:
            self.probe_errors[key] = e.code or type(e).__name__
        except Exception as e:  # noqa: BLE001 - recorded, the fault goes on
            self.probe_errors[key] = type(e).__name__

    def start(self, ctx: FaultContext) -> str:
        if ctx.partitioner is None:
            raise FaultError("partitions need the cluster built with per-link addresses")
        lc = ctx.cluster
        self.old = ctx.leader()
        before = lc.status(self.old) or {}
        ctx.partitioner.isolate(self.old)
        ctx.mark()
        ctx.notes["deposed"] = self.old
        # Writes the old leader appends now can never commit: nobody else sees them.
        url = lc.url(self.old)
        self._probe_threads = [
            threading.Thread(target=self._probe, args=(url, i), daemon=True)
            for i in range(self.PROBES)
        ]
        for t in self._probe_threads:
            t.start()
        deadline = time.monotonic() + max(1.0, ctx.window - 1.0)
        new = None
        while new is None and time.monotonic() < deadline:
            for nid in ctx.node_ids:
                st = lc.status(nid) if nid != self.old else None
                if st and st.get("role") == "leader":
                    new = nid
            time.sleep(0.1)
        ctx.notes["new_leader"] = new
        # The old leader's log ends at most a few entries past its commit index (it steps
        # down within an election timeout); wait until every majority node has a snapshot
        # well past that, so none of them can catch it up with entries.
        old_st = lc.status(self.old) or before
        target = int(old_st.get("commit_index") or before.get("commit_index") or 0) + 200
        majority = [n for n in ctx.node_ids if n != self.old]
        snaps: dict[str, int | None] = {}
        while time.monotonic() < deadline:
            snaps = {n: snapshot_last_index(lc.data_dir(n)) for n in majority}
            if all(v is not None and v > target for v in snaps.values()):
                break
            time.sleep(0.2)
        for t in self._probe_threads:
            t.join(5.0)
        met = bool(snaps) and all(v is not None and v > target for v in snaps.values())
        self.precondition = (
            f"majority snapshots at {min((v or 0) for v in snaps.values()) if snaps else '?'} "
            f"{'>' if met else 'NOT >'} old leader's commit index + 200 = {target}"
        )
        probes = ", ".join(f"{k[len(self.PROBE_PREFIX):]}:{v}" for k, v in self.probe_errors.items())
        return (
            f"isolated {self.old} (leader); new leader {new or 'none yet'}; {self.precondition}; "
            f"probe writes to {self.old}: {probes}"
        )

    def _poll(self, url: str) -> None:
        """The old leader's own view of the probe keys, every 10 ms from the heal on."""
        from statekeeper.client import Client, RetryPolicy, StatekeeperError

        with Client(url, ns="chaos", timeout=1.0, retry=RetryPolicy.disabled(),
                    prefer_leader=False) as c:
            while not self._stop_polling.is_set():
                try:
                    page = c.range(self.PROBE_PREFIX, consistency="serializable")
                    self.polls += 1
                    after = (time.monotonic_ns() - self._heal_ns) / 1e9
                    for kv in page.kvs:
                        self.sightings.setdefault(
                            (kv.key, kv.text, kv.mod_revision), (page.revision, after)
                        )
                except (StatekeeperError, OSError):
                    pass
                self._stop_polling.wait(0.01)

    def _committed_probes(self, ctx: FaultContext) -> tuple[dict[str, tuple[str, int]], str]:
        """key -> (value, mod_revision) of the probe keys the cluster committed (one
        linearizable read through a majority node), and an error message if unreadable.
        Each probe key is written once, by its probe: committed, it stays as it is."""
        from statekeeper.client import Client, StatekeeperError

        urls = [ctx.cluster.url(n) for n in ctx.node_ids if n != self.old]
        try:
            with Client(urls, ns="chaos", timeout=5.0) as c:
                page = c.range(self.PROBE_PREFIX)
        except StatekeeperError as e:
            return {}, f"reading the committed probe keys failed: {e}"
        return {kv.key: (kv.text, kv.mod_revision) for kv in page.kvs}, ""

    def _packing(self, ctx: FaultContext, node: str | None) -> bool:
        # A RocksDB checkpoint directory exists exactly while a snapshot is being packed.
        return node is not None and any(ctx.cluster.data_dir(node).glob("**/*.ckpt-*"))

    def stop(self, ctx: FaultContext) -> None:
        if self.old is not None and self._poller is None:
            self.heal_offset = log_size(ctx.cluster, self.old)
            # Heal while the new leader packs a snapshot (within 4 s, else anyway): the
            # old leader then gets install messages before any snapshot data.
            new = ctx.notes.get("new_leader")
            until = time.monotonic() + 4.0
            while time.monotonic() < until and not self._packing(ctx, new):
                time.sleep(0.02)
            self.healed_while_packing = self._packing(ctx, new)
            self._heal_ns = time.monotonic_ns()
            self._poller = threading.Thread(
                target=self._poll, args=(ctx.cluster.url(self.old),), daemon=True
            )
            self._poller.start()
        if ctx.partitioner is not None:
            ctx.partitioner.heal()

    def verify(self, ctx: FaultContext) -> list[Verdict]:
        if self.old is None:
            return []
        self._stop_polling.set()
        if self._poller is not None:
            self._poller.join(5.0)
        text = log_since(ctx.cluster, self.old, self.heal_offset)
        restored = RESTORED.findall(text)
        pending = [k for k, v in self.probe_errors.items() if v != "unavailable"]
        committed, why = self._committed_probes(ctx)
        dirty = [
            f"{self.old} served {k}={v!r} (mod_revision {m}, store revision {rev}) "
            f"{after:.2f} s after the heal, but the cluster committed "
            + (f"{k}={committed[k][0]!r} at mod_revision {committed[k][1]}" if k in committed
               else f"no {k} at all")
            + ": an uncommitted write was served"
            for (k, v, m), (rev, after) in sorted(self.sightings.items(), key=lambda x: x[1][1])
            if committed.get(k) != (v, m)
        ]
        late = sorted(k for k in committed)
        answers = ", ".join(sorted(set(self.probe_errors.values())))
        if why:
            status, value, detail = UNKNOWN, "committed state unreadable", why
        elif dirty:
            status, value = FAIL, f"served {len(dirty)} uncommitted write(s)"
            detail = "; ".join(dirty[:3])
        elif not pending:
            status, value = UNKNOWN, "no uncommitted tail"
            detail = "every probe write was refused (unavailable): nothing to leak"
        else:
            status = PASS
            value = f"{len(self.sightings)} probe kvs seen in {self.polls} polls, all committed"
            detail = (
                f"probe answers: {answers}; committed later (allowed for an unknown "
                f"outcome): {', '.join(late) or 'none'}"
            )
        packing = {True: "healed while the new leader packed a snapshot",
                   False: "the new leader was not packing at the heal", None: ""}
        return [
            Verdict(
                "deposed leader caught up by a snapshot",
                PASS if restored else UNKNOWN,
                f"{len(restored)} restore(s)" + (f" at index {restored[0]}" if restored else ""),
                f"{self.old}; {self.precondition}; {packing[self.healed_while_packing]}"
                + ("" if restored else "; it never needed one (nothing tested)"),
            ),
            Verdict("deposed leader served no uncommitted write", status, value, detail),
        ]
