"""Seeded clients for a simulated world, and the chaos suite's checks at the end of a run.

    wl = Workload(world, rng, clients=4)
    for i in range(4):
        world.loop.create_task(wl.run_client(i, until=T))  # virtual time
    ...  # all nodes up, faults healed, settled
    failures = wl.check(world)  # [] = pass; else one line per violation
    wl.summary()  # {"put": {"ok": 12, "info": 1}, ...}

Each client, from its own random.Random drawn from `rng`, loops until the virtual clock
reaches T: it re-sends a pending unknown write first (on another node), else draws an op
kind (KIND_WEIGHTS) and a node from world.nodes (the live ones, sorted, so the draw is
the same on a replay). The ops (chaos/sim/client_ops.py): idempotent puts and their
re-sends, replays of puts acknowledged earlier (an agent re-sending after a crash), txns (compare + put), linearizable and serializable gets, stream appends and
their re-sends, whole-stream reads, and lock holds (lease grant, lock_acquire, fenced
puts with keepalives, release, lease revoke). Everything goes into one chaos history.

check() reads the final state straight from every live node's store (node.sm: what a
serializable read would answer, without a request) and runs the chaos suite's checkers,
called as chaos/run_checks.py calls them:
- replicas converge: chaos.convergence.compare_replicas over each node's namespace;
- linearizability: chaos.checker.check, bounded by MAX_CONFIGURATIONS per partition
  (its time_limit reads time.monotonic, which is virtual while the world's seams are
  installed: a configuration bound is the one that holds there, and it keeps the
  verdict the same on a replay); "unknown" (bound hit) is not a failure;
- lost and duplicated writes: chaos.checker.lost_writes / duplicate_applications;
- the store revision never went back: chaos.report.revision_regressions;
- reads agree with the acknowledged writes: chaos.convergence.revision_conflicts;
- event streams: chaos.checker.check_streams against the streams read whole from the
  reference node's store, and every node's copy;
- locks: chaos.checker.locks.check_locks against LOCK_KEY's change history read from
  the reference node's change log (node/store/changes.py, what a watch serves).
The reference node is the leader (else the first live node).

Cost, measured on this 2-core shared machine: 3 nodes elected, then 4 clients for 10
virtual seconds, fault-free, time.process_time around the clients' run (seeds 1-5):
5.14 / 5.36 / 5.40 / 5.41 / 5.75 s, median 0.54 CPU s per simulated second (about 230
ops per simulated second; the cluster alone costs about 0.1 s per simulated second:
.sim_example.py, 0.26 s for 2.5 s with the start-up); check() on those ~2,300 ops: 0.13 s (0.126-0.144).
A client's last op may end after `until`: it waits for its answer (at most `timeout`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from typing import Any

from statekeeper.chaos import checker
from statekeeper.chaos.checker.locks import check_locks
from statekeeper.chaos.checker.watch import WatchTruth
from statekeeper.chaos.convergence import ReplicaState, compare_replicas, revision_conflicts
from statekeeper.chaos.report import revision_regressions
from statekeeper.chaos.sim.client_ops import (
    LOCK_KEY,
    NS,
    STREAMS,
    ClientOps,
    ClientState,
    Recorder,
    stream_rows,
    text,
)
from statekeeper.node.errors import OpError
from statekeeper.node.ops.core import validate_op
from statekeeper.node.store.changes import read_changes, selection

KIND_WEIGHTS = {
    "put": 30,
    "replay": 4,
    "txn": 12,
    "get": 20,
    "get_serializable": 8,
    "append": 12,
    "read_stream": 6,
    "lock": 4,
}
MAX_CONFIGURATIONS = 200_000  # per partition; see the module docstring
SHOWN = 20  # failure lines per check


class Workload(ClientOps):
    def __init__(self, world, rng: random.Random, clients: int = 4):
        self.world = world
        self.rec = Recorder(world.clock)
        self.timeout = world.cfg.raft.request_timeout + 1.0
        self.clients = clients
        self._rngs = [random.Random(rng.random()) for _ in range(clients)]
        self._kinds = list(KIND_WEIGHTS)
        self._weights = list(KIND_WEIGHTS.values())
        self.lin_result: Any = None  # the last check's linearizability Result

    def pick(self, rng: random.Random, avoid: str | None = None):
        """A live node drawn with `rng` (another than `avoid` when there is one)."""
        ids = sorted(self.world.nodes)
        if avoid is not None and len(ids) > 1 and avoid in ids:
            ids.remove(avoid)
        return self.world.nodes[rng.choice(ids)] if ids else None

    async def run_client(self, i: int, until: float) -> None:
        rng, st = self._rngs[i], ClientState(i)
        clock = self.world.clock
        while clock.now < until:
            await self._turn(st, rng)
            await asyncio.sleep(rng.uniform(0.0, 0.02))

    async def _turn(self, st: ClientState, rng: random.Random) -> None:
        if st.retries:
            kind, args, last = st.retries.pop(0)
            node = self.pick(rng, avoid=last)
            if node is None:
                st.retries.insert(0, (kind, args, last))
                return
            op = self.op_put if kind == "put" else self.op_append
            await op(st, node, rng, retry=args)
            return
        kind = rng.choices(self._kinds, self._weights)[0]
        node = self.pick(rng)
        if node is None:
            return
        if kind == "get_serializable":
            await self.op_get(st, node, rng, serializable=True)
        else:
            await getattr(self, f"op_{kind}")(st, node, rng)

    def summary(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for (kind, outcome), n in sorted(self.rec.counts.items()):
            out.setdefault(kind, {})[outcome] = n
        return out

    # -- the end of a run ---------------------------------------------------------------
    def check(self, world) -> list[str]:
        """Every check of the module docstring; one line per failure ([] = pass)."""
        nodes = [world.nodes[i] for i in sorted(world.nodes)]
        if not nodes:
            return ["no live node to read the final state from"]
        ops = self.rec.ops()
        leaders = [n for n in nodes if n.raft.is_leader()]
        ref = (leaders or nodes)[0]
        states = [replica_state(n) for n in nodes]
        failures = convergence_failures(states)
        kvs = next(s.kvs for s in states if s.node == ref.node_id) or {}
        written = {k for o in ops if o.f in ("put", "txn") for k in o.keys}
        final = {k: kvs[k][0] if k in kvs else None for k in written}
        final_revs = {k: kvs[k][3] for k in written if k in kvs}
        failures += self._kv_failures(ops, final, final_revs, states)
        failures += stream_failures(ops, ref, nodes)
        failures += lock_failures(ops, ref)
        return failures

    def _kv_failures(self, ops, final, final_revs, states) -> list[str]:
        out: list[str] = []
        folded = fold_replayed_resends(ops)
        lin = checker.check(folded, time_limit=2.0, max_configurations=MAX_CONFIGURATIONS)
        self.lin_result = lin
        if lin.valid is False:
            for part in lin.partitions:
                if part.valid is False:
                    ids = ", ".join(f"#{o.id}" for o in part.counterexample or [])
                    out.append(f"not linearizable on {', '.join(part.keys)}: ops {ids}")
        for w in checker.lost_writes(folded, final, final_revisions=final_revs)[:SHOWN]:
            out.append(f"lost write on {w.key}: {w.reason}")
        for d in checker.duplicate_applications(ops, final, final_revisions=final_revs)[:SHOWN]:
            out.append(f"duplicate application on {d.key}: {d.reason}")
        for g in revision_regressions(ops)[:SHOWN]:
            out.append(
                f"revision went back: #{g.op.id} {g.op.f} answered at revision {g.revision}, "
                f"#{g.floor_op.id} had completed at {g.floor} before it started"
            )
        reads = [(k, kv[0], kv[3], f"final read on {s.node}")
                 for s in states for k, kv in (s.kvs or {}).items()]  # fmt: skip
        out += [f"read disagrees with the writes: {c}" for c in revision_conflicts(ops, reads)]
        return out


# -- reading the final state from the stores ---------------------------------------------
def fold_replayed_resends(ops: list) -> list:
    """The history with each re-send answered `replayed` folded into the attempt it
    re-sent: that attempt (unknown until then) is now known applied, with the re-send's
    answer, completing when the re-send did; the re-send itself wrote nothing.

    As a write of its own, at its own time, a replayed re-send made the checkers see an
    old value written again after later writes: a false "not linearizable" (seed 2) and a
    false "lost write" (seed 44, a re-send answered 2 s after the first attempt's unknown
    outcome). The duplicate check keeps every attempt (it is what compares their answers).
    """
    by_id = {o.id: o for o in ops}
    replaced: dict = {}
    dropped: set = set()
    for o in ops:
        first = o.input.get("resend_of")
        if o.f != "put" or first is None or not o.output.get("replayed") or first not in by_id:
            continue
        dropped.add(o.id)
        original = replaced.get(first, by_id[first])
        if original.outcome != "ok" or o.complete_time < original.complete_time:
            replaced[first] = dataclasses.replace(
                original,
                outcome="ok",
                complete_time=o.complete_time,
                end_time=o.end_time,
                output=dict(o.output),
            )
    return [replaced.get(o.id, o) for o in ops if o.id not in dropped]


def replica_state(node) -> ReplicaState:
    """One node's namespace, read from its own store (a serializable read)."""
    sm = node.sm
    st = ReplicaState(node.node_id, applied_index=sm.applied_index, revision=sm.revision)
    try:
        kvs: dict = {}
        page = sm.range(NS)
        st.read_at = page["revision"]
        while True:
            for kv in page["kvs"]:
                kvs[kv["key"]] = (text(kv["value"]), kv["version"], kv["create_revision"],
                                  kv["mod_revision"])  # fmt: skip
            if not page.get("more"):
                break
            page = sm.range(NS, continuation=page["continuation"])
        st.kvs = kvs
    except OpError as e:
        st.error = f"{e.code}: {e}"
    return st


def convergence_failures(states: list[ReplicaState]) -> list[str]:
    conv = compare_replicas(states)
    out = [f"replicas: {p}" for p in conv.problems]
    return out + [f"replicas differ: {d.describe()}" for d in conv.diffs[:SHOWN]]


def read_stream_whole(node, stream: str) -> list[tuple]:
    op: dict = {"op": "read_stream", "ns": NS, "stream": stream, "start": 1, "direction": "forward",
                "limit": 1000, "revision": None, "continuation": None, "wait_ms": None}  # fmt: skip
    rows: list[tuple] = []
    while True:
        page = node.sm.read(
            validate_op({k: v for k, v in op.items() if v is not None}, node.cfg.limits)
        )
        rows += [tuple(r) for r in stream_rows(page["events"])]
        if not page.get("more"):
            return rows
        op = {"op": "read_stream", "ns": NS, "stream": stream, "continuation": page["continuation"]}


def stream_failures(ops, ref, nodes) -> list[str]:
    final = {s: read_stream_whole(ref, s) for s in STREAMS}
    replicas = {n.node_id: {s: read_stream_whole(n, s) for s in STREAMS} for n in nodes}
    res = checker.check_streams(ops, final, replicas=replicas)
    out = [f"stream: {v.describe()}" for v in res.violations[:SHOWN]]
    return out + [f"stream {s} not read at the end" for s in res.unread]


def lock_truth(node, key: str) -> WatchTruth:
    """LOCK_KEY's change history from the node's change log (what a watch serves),
    from revision 1 (or the compact revision + 1) to the store's revision."""
    sm = node.sm
    lo, hi = selection(NS, key, None, None, None)
    with sm.read_view() as view:
        first = max(1, view.compact_revision + 1)
        last = view.revision
        truth = WatchTruth(key, first, last, changes={})
        while first <= last:
            page = read_changes(view, lo, hi, first)
            for frame in page.frames:
                truth.changes[frame["revision"]] = [
                    (e["kv"]["key"], e["type"], text(e["kv"].get("value"))) for e in frame["events"]
                ]
            if not page.more:
                break
            first = page.scanned_to + 1
    truth.initial = {}
    if truth.start_revision > 1:
        kv = sm.get(NS, key, truth.start_revision - 1)["kv"]
        truth.initial = {key: text(kv["value"])} if kv else {}
    kv = sm.get(NS, key)["kv"]
    truth.final = {key: text(kv["value"])} if kv else {}
    return truth


def lock_failures(ops, ref) -> list[str]:
    res = check_locks(ops, lock_truth(ref, LOCK_KEY), LOCK_KEY)
    out = [f"lock: {v.describe()}" for v in res.violations[:SHOWN]]
    return out + (["lock: the lock key's history was not read"] if res.unread else [])
