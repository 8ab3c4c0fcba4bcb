"""Do the replicas agree, and did anyone ever read a write that the cluster did not commit?

Two checks the runner adds to every scenario:

``replicas converge`` (``read_replicas`` + ``compare_replicas``)
    After the heal, the workload stopped and the final reads: poll every node's
    ``/v1/status`` until all report the same ``applied_index`` and ``revision`` (up to a
    timeout), then read the whole namespace from each node with
    ``consistency="serializable"`` (its own state, no leader involved) at one common
    revision, and compare key by key: value, version, create_revision, mod_revision. Any
    difference is a FAIL naming the keys; so are applied indexes that never became equal.
    A node that applied an entry the others did not (a deposed leader's uncommitted
    tail, a write applied twice on one replica) differs here for good.

``reads agree with the acknowledged writes`` (``revision_conflicts``)
    Store revisions are global and each belongs to exactly one write op (a txn's writes
    share one). So the history pins down, for every revision an acknowledged write
    reported, which keys it wrote and to what (``deleted > 0`` deletes: to nothing). Every
    kv anyone read (linearizable or serializable gets, failed cas answers, final reads,
    the convergence reads) names its ``mod_revision``: if that revision belongs to a known
    write, the kv must be one of that write's keys, with its value; and two reads of the
    same key at the same mod_revision must agree. A serializable read on a cut-off node
    that applied a write the cluster never committed (a dirty read) reports some
    revision number the committed history gave to another write, and is caught, as is a
    revision handed out twice. Reads at revisions nobody's write reported are only
    checked against each other (weak: an unknown-outcome write at that revision could be
    the committed one).

Everything but ``read_replicas`` is pure.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from statekeeper.chaos.history import Op

__all__ = [
    "Convergence",
    "KeyDiff",
    "ReplicaState",
    "compare_replicas",
    "idle_nodes",
    "judged_since",
    "read_replicas",
    "revision_conflicts",
    "served_by",
]

# Ops that read (the rest write): kv gets and event-stream reads.
_READ_FS = frozenset({"get", "read_stream"})

# (value, version, create_revision, mod_revision) of one key on one replica.
KV = tuple[Any, int, int, int]


@dataclass
class ReplicaState:
    """What one node holds: its raft/store positions and every key of the namespace."""

    node: str
    applied_index: int | None = None
    revision: int | None = None
    kvs: dict[str, KV] | None = None  # None: could not be read
    read_at: int | None = None  # the store revision the kvs were read at
    error: str = ""


@dataclass
class KeyDiff:
    key: str
    by_node: dict[str, KV | None]  # None: the key is absent on that node

    def describe(self) -> str:
        def one(kv: KV | None) -> str:
            return "absent" if kv is None else f"{kv[0]!r}@r{kv[3]} v{kv[1]}"

        return f"{self.key}: " + ", ".join(f"{n} {one(kv)}" for n, kv in self.by_node.items())


@dataclass
class Convergence:
    converged: bool
    positions: str  # "node-0 applied 120 rev 88, ..."
    problems: list[str] = field(default_factory=list)  # unreadable nodes, unequal indexes
    diffs: list[KeyDiff] = field(default_factory=list)
    keys: int = 0

    @property
    def ok(self) -> bool:
        return self.converged and not self.problems and not self.diffs


def compare_replicas(states: Sequence[ReplicaState]) -> Convergence:
    """Compare what every replica holds (see the module docstring)."""
    positions = ", ".join(
        f"{s.node} applied {s.applied_index} rev {s.revision}" for s in states
    )
    problems = [f"{s.node}: {s.error or 'not read'}" for s in states if s.kvs is None]
    applied = {s.applied_index for s in states}
    revisions = {s.revision for s in states}
    converged = len(applied) == 1 and len(revisions) == 1 and None not in applied | revisions
    if not converged:
        problems.append(f"positions never became equal: {positions}")
    read = [s for s in states if s.kvs is not None]
    at = {s.read_at for s in read}
    if len(at) > 1:
        problems.append("read at different revisions: " + ", ".join(f"{s.node} {s.read_at}" for s in read))
    diffs = []
    keys = sorted({k for s in read for k in s.kvs or {}})
    for key in keys:
        by_node = {s.node: (s.kvs or {}).get(key) for s in read}
        if len({by_node[n] for n in by_node}) > 1:
            diffs.append(KeyDiff(key, by_node))
    return Convergence(converged, positions, problems, diffs, len(keys))


# --------------------------------------------------------------------------- reading


def _read_one(url: str, node: str, ns: str, revision: int | None, timeout: float) -> ReplicaState:
    from statekeeper.client import Client, RetryPolicy, StatekeeperError

    st = ReplicaState(node)
    try:
        with Client(url, ns=ns, timeout=timeout, retry=RetryPolicy.disabled(), prefer_leader=False) as c:
            info = c.status()
            st.applied_index, st.revision = info.get("applied_index"), info.get("revision")
            kvs: dict[str, KV] = {}
            read_at = None
            for kv in c.scan(consistency="serializable", revision=revision, page_size=1000):
                kvs[kv.key] = (kv.text if _is_text(kv.value) else kv.value, kv.version,
                               kv.create_revision, kv.mod_revision)
                read_at = kv.revision or read_at
            st.kvs = kvs
            st.read_at = revision if revision is not None else read_at
    except (StatekeeperError, OSError) as e:
        st.error = f"{type(e).__name__}: {e}"
    return st


def _is_text(value: bytes) -> bool:
    try:
        value.decode()
    except UnicodeDecodeError:
        return False
    return True


def _statuses(urls: Mapping[str, str], timeout: float) -> dict[str, dict[str, Any] | None]:
    from statekeeper.client import Client, RetryPolicy, StatekeeperError

    out: dict[str, dict[str, Any] | None] = {}
    for node, url in urls.items():
        try:
            with Client(url, timeout=timeout, retry=RetryPolicy.disabled(), prefer_leader=False) as c:
                out[node] = c.status()
        except (StatekeeperError, OSError):
            out[node] = None
    return out


def read_replicas(
    urls: Mapping[str, str],
    ns: str,
    *,
    timeout: float = 20.0,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[list[ReplicaState], float]:
    """Wait (up to ``timeout``) until every node reports the same applied index and
    revision, then read each node's namespace serializably at the lowest revision any
    node reported (equal to all of them once they agree; history reads keep them
    comparable if they never do). A node that cannot be read (restarting after a
    failpoint crash, say) is waited for too. Returns the states and the seconds waited.
    """
    started = time.monotonic()
    deadline = started + timeout
    while True:
        sts = _statuses(urls, 2.0)
        positions = {
            (s.get("applied_index"), s.get("revision")) if s else None for s in sts.values()
        }
        equal = len(positions) == 1 and None not in positions
        if equal or time.monotonic() > deadline:
            revs = [
                s.get("revision") for s in sts.values() if s and isinstance(s.get("revision"), int)
            ]
            at = min(revs) if revs else None
            states = [_read_one(url, node, ns, at, 5.0) for node, url in urls.items()]
            if all(s.kvs is not None for s in states) or time.monotonic() > deadline:
                return states, time.monotonic() - started
        sleep(0.2)


# -------------------------------------------------------------------- revision check


def _write_set(op: Op) -> dict[str, Any] | None:
    """key -> value (None: deleted) written at ``op.output['revision']`` by an ok op, or
    None if the op wrote nothing at a revision of its own."""
    out, inp = op.output, op.input
    if op.outcome != "ok" or not isinstance(out.get("revision"), int):
        return None
    if op.f == "put" and op.key is not None:
        return {op.key: inp.get("value")}
    if op.f == "delete" and op.key is not None:
        return {op.key: None} if out.get("deleted") else None
    if op.f == "cas" and op.key is not None:
        return {op.key: inp.get("value")} if out.get("succeeded") else None
    if op.f == "txn":
        branch = inp.get("success" if out.get("succeeded") else "failure") or []
        writes: dict[str, Any] = {}
        for b in branch:
            f = b.get("f") or b.get("op")
            if f == "put":
                writes[b["key"]] = b.get("value")
            elif f == "delete":
                writes[b["key"]] = None  # a delete in a branch: absent after it (if it was there)
        return writes or None
    return None


def _reads(op: Op) -> Iterable[tuple[str, Any, int]]:
    """(key, value, mod_revision) of every present kv an ok op read."""
    out = op.output
    if op.outcome != "ok" or op.key is None:
        return ()
    if op.f == "get" or (op.f == "cas" and not out.get("succeeded")):
        if out.get("value") is not None and isinstance(out.get("mod_revision"), int):
            return ((op.key, out["value"], out["mod_revision"]),)
    return ()


def _label(op: Op | None, where: str | None = None) -> str:
    if op is None:
        return where or "?"
    node = op.output.get("node")
    how = op.input.get("consistency") or ("" if op.f != "get" else "linearizable")
    return f"#{op.id} {op.f}{' ' + how if how else ''}{' on ' + node if node else ''}"


def revision_conflicts(
    ops: Iterable[Op],
    extra_reads: Iterable[tuple[str, Any, int, str]] = (),
    *,
    limit: int = 50,
) -> list[str]:
    """Reads that contradict the acknowledged writes (see the module docstring).

    ``extra_reads``: (key, value, mod_revision, where) of reads outside the history (the
    convergence reads). Returns at most ``limit`` descriptions, each naming the ops.
    """
    ops = list(ops)
    writer: dict[int, tuple[Op, dict[str, Any]]] = {}
    found: list[str] = []
    for op in ops:
        ws = _write_set(op)
        if ws is None:
            continue
        rev = op.output["revision"]
        prev = writer.get(rev)
        if prev is None:
            writer[rev] = (op, ws)
        elif prev[0].input.get("idempotency_key") != op.input.get("idempotency_key") or (
            prev[1] != ws
        ):
            found.append(
                f"revision {rev} acknowledged to two different writes: {_label(prev[0])} "
                f"{prev[1]} and {_label(op)} {ws}"
            )
    reads: list[tuple[str, Any, int, Op | None, str | None]] = [
        (k, v, m, op, None) for op in ops for k, v, m in _reads(op)
    ]
    reads += [(k, v, m, None, where) for k, v, m, where in extra_reads if v is not None]
    by_key_rev: dict[tuple[str, int], tuple[Any, Op | None, str | None]] = {}
    for key, value, mod_rev, op, where in reads:
        w = writer.get(mod_rev)
        if w is not None:
            wop, ws = w
            if key not in ws:
                found.append(
                    f"{_label(op, where)} read {key}={value!r} at mod_revision {mod_rev}, "
                    f"but revision {mod_rev} is {_label(wop)}, which wrote only "
                    f"{', '.join(sorted(ws))}: a write the cluster never committed was served"
                )
            elif ws[key] != value:
                found.append(
                    f"{_label(op, where)} read {key}={value!r} at mod_revision {mod_rev}, "
                    f"but revision {mod_rev} is {_label(wop)}, which wrote {key}={ws[key]!r}"
                )
        first = by_key_rev.setdefault((key, mod_rev), (value, op, where))
        if first[0] != value:
            found.append(
                f"{key} at mod_revision {mod_rev} read as {first[0]!r} by "
                f"{_label(first[1], first[2])} and as {value!r} by {_label(op, where)}"
            )
        if len(found) >= limit:
            break
    return _dedupe(found)[:limit]


def _dedupe(items: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for x in items:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


def judged_since(
    nodes: Sequence[str],
    since_ns: int,
    end_ns: int,
    restarts: Mapping[str, Sequence[int]],
    restart_grace_ns: int,
    min_window_ns: int,
) -> tuple[dict[str, int], dict[str, int]]:
    """When each node must be serving for idle_nodes(): from ``since_ns``, or
    ``restart_grace_ns`` after its last restart before ``end_ns`` if that is later (a
    node armed with failpoints at the heal may crash once more after it). A node left
    with less than ``min_window_ns`` before ``end_ns`` is not judged. Returns (node ->
    since, node not judged -> its last restart)."""
    judged: dict[str, int] = {}
    unjudged: dict[str, int] = {}
    for n in nodes:
        late = [t for t in restarts.get(n, ()) if since_ns - restart_grace_ns <= t <= end_ns]
        start = max(since_ns, max(late) + restart_grace_ns) if late else since_ns
        if end_ns - start >= min_window_ns:
            judged[n] = start
        else:
            unjudged[n] = max(late)
    return judged, unjudged


def idle_nodes(
    ops: Iterable[Op],
    nodes: Sequence[str],
    since_ns: int | Mapping[str, int],
    exclude_processes: Iterable[int] = (),
) -> dict[str, list[str]]:
    """node -> what it never answered ("write", "linearizable read") among ops invoked at
    or after ``since_ns`` (one time, or one per node: judged_since()); nodes that answered
    both are left out. With every client spreading its ops over all nodes, a node that
    answers nothing while the others do is stuck (a wedged proposer, a node that never
    caught up)."""
    skip = set(exclude_processes)
    since = since_ns if isinstance(since_ns, Mapping) else {n: since_ns for n in nodes}
    got: dict[str, set[str]] = {n: set() for n in nodes}
    for op in ops:
        node = op.output.get("node")
        if op.outcome != "ok" or node not in got or op.process in skip or op.invoke_time < since[node]:
            continue
        if op.f in _READ_FS:
            if op.input.get("consistency") != "serializable":
                got[node].add("linearizable read")
        else:
            got[node].add("write")
    return {
        n: [k for k in ("write", "linearizable read") if k not in have]
        for n, have in got.items()
        if len(have) < 2
    }


def served_by(ops: Iterable[Op], exclude_processes: Iterable[int] = ()) -> dict[str, dict[str, int]]:
    """node -> {"reads": n, "writes": n, "serializable": n} of ops answered (ok) per node."""
    skip = set(exclude_processes)
    out: dict[str, dict[str, int]] = defaultdict(lambda: {"reads": 0, "writes": 0, "serializable": 0})
    for op in ops:
        node = op.output.get("node")
        if op.outcome != "ok" or node is None or op.process in skip:
            continue
        if op.f in _READ_FS:
            out[node]["serializable" if op.input.get("consistency") == "serializable" else "reads"] += 1
        else:
            out[node]["writes"] += 1
    return dict(sorted(out.items()))
