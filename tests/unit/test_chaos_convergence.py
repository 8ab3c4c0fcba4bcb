"""chaos.convergence: replica comparison, reads checked against the acknowledged writes'
revisions, and which nodes answered what (pure functions over small hand-made histories)."""

from __future__ import annotations

import io
import json

from statekeeper.chaos.convergence import (
    ReplicaState,
    compare_replicas,
    idle_nodes,
    judged_since,
    revision_conflicts,
    served_by,
)
from statekeeper.chaos.history import HistoryWriter, parse_events


class H:
    """A tiny history builder: each call is one op, invoked at t and completed at t+1."""

    def __init__(self) -> None:
        self.buf = io.StringIO()
        self.w = HistoryWriter(self.buf)
        self.t = 0

    def op(self, p: int, f: str, key=None, *, out: str = "ok", keys=None, result=None, **inp):
        self.t += 10
        i = self.w.invoke(p, f, key, keys=keys, time=self.t, **inp)
        getattr(self.w, out)(i, time=self.t + 1, **(result or {}))
        return i

    def ops(self):
        self.w.flush()
        return parse_events(json.loads(line) for line in self.buf.getvalue().splitlines())


def _history() -> H:
    h = H()
    h.op(0, "put", "a", value="0-1", idempotency_key="i1", result={"revision": 1, "node": "n0"})
    h.op(1, "put", "b", value="1-1", idempotency_key="i2", result={"revision": 2, "node": "n1"})
    h.op(
        2,
        "txn",
        keys=["a", "b"],
        compare=[{"key": "a", "value": "0-1"}],
        success=[{"f": "put", "key": "a", "value": "2-1"}, {"f": "put", "key": "b", "value": "2-1b"}],
        failure=[{"f": "get", "key": "a"}, {"f": "get", "key": "b"}],
        idempotency_key="i3",
        result={"succeeded": True, "revision": 3, "results": [None, None], "node": "n2"},
    )
    h.op(0, "delete", "a", idempotency_key="i4", result={"revision": 4, "deleted": 1, "node": "n0"})
    h.op(1, "delete", "a", idempotency_key="i5", result={"revision": 4, "deleted": 0, "node": "n1"})
    h.op(2, "cas", "b", value="2-2", expect="x", idempotency_key="i6",
         result={"succeeded": False, "value": "2-1b", "mod_revision": 3, "revision": 4})
    return h


def test_a_consistent_history_has_no_conflicts() -> None:
    h = _history()
    h.op(3, "get", "b", result={"value": "2-1b", "mod_revision": 3, "revision": 4, "node": "n1"})
    h.op(3, "get", "b", consistency="serializable",
         result={"value": "1-1", "mod_revision": 2, "revision": 2, "node": "n2"})  # stale, fine
    # A replayed re-send: same idempotency key, same answer as the first application.
    h.op(0, "put", "a", value="0-1", idempotency_key="i1", resend_of=0,
         result={"revision": 1, "replayed": True})
    assert revision_conflicts(h.ops(), [("b", "2-1b", 3, "convergence read on n0")]) == []


def test_a_dirty_read_names_the_write_that_owns_its_revision() -> None:
    h = _history()
    # A cut-off node applied an uncommitted write to b at revision 4 (the delete's).
    h.op(3, "get", "b", consistency="serializable",
         result={"value": "9-9", "mod_revision": 4, "revision": 4, "node": "n2"})
    (found,) = revision_conflicts(h.ops())
    assert "read b='9-9' at mod_revision 4" in found and "wrote only a" in found
    assert "serializable on n2" in found and "never committed" in found


def test_a_wrong_value_at_a_known_revision_is_a_conflict() -> None:
    h = _history()
    h.op(3, "get", "a", result={"value": "7-7", "mod_revision": 1, "revision": 2})
    (found,) = revision_conflicts(h.ops())
    assert "read a='7-7' at mod_revision 1" in found and "wrote a='0-1'" in found


def test_one_revision_acknowledged_to_two_writes() -> None:
    h = _history()
    h.op(4, "put", "c", value="4-1", idempotency_key="i9", result={"revision": 2})
    (found,) = revision_conflicts(h.ops())
    assert found.startswith("revision 2 acknowledged to two different writes")


def test_reads_at_an_unknown_revision_must_agree_with_each_other_and_extra_reads() -> None:
    h = H()
    h.op(0, "get", "a", result={"value": "x", "mod_revision": 7, "revision": 7})
    h.op(1, "get", "a", consistency="serializable", result={"value": "x", "mod_revision": 7})
    assert revision_conflicts(h.ops()) == []
    found = revision_conflicts(h.ops(), [("a", "y", 7, "convergence read on n2")])
    assert len(found) == 1 and "convergence read on n2" in found[0]


def _state(node, applied=10, rev=5, **kvs) -> ReplicaState:
    return ReplicaState(node, applied, rev, {k: (v, 1, m, m) for k, (v, m) in kvs.items()}, rev)


def test_identical_replicas_converge() -> None:
    conv = compare_replicas([_state(f"n{i}", a=("x", 3), b=("y", 5)) for i in range(3)])
    assert conv.ok and conv.keys == 2 and conv.converged


def test_replica_differences_name_the_keys_and_nodes() -> None:
    conv = compare_replicas(
        [
            _state("n0", a=("x", 3), b=("y", 5)),
            _state("n1", a=("x", 3), b=("y", 5)),
            _state("n2", a=("x", 3), b=("dirty", 5), c=("z", 4)),
        ]
    )
    assert not conv.ok and [d.key for d in conv.diffs] == ["b", "c"]
    described = conv.diffs[1].describe()
    assert described.startswith("c: ") and "n0 absent" in described and "n2 'z'@r4" in described


def test_unequal_positions_or_an_unreadable_node_do_not_converge() -> None:
    conv = compare_replicas([_state("n0"), _state("n1", applied=9)])
    assert not conv.ok and not conv.converged and "never became equal" in conv.problems[0]
    down = ReplicaState("n2", error="connection refused")
    conv = compare_replicas([_state("n0"), _state("n1"), down])
    assert not conv.ok and any("n2: connection refused" in p for p in conv.problems)
    assert not conv.diffs  # the readable nodes agree


def test_served_by_and_idle_nodes() -> None:
    h = H()
    h.op(0, "put", "a", value="1", idempotency_key="k", result={"revision": 1, "node": "n0"})
    h.op(0, "get", "a", result={"value": "1", "mod_revision": 1, "node": "n1"})
    h.op(0, "get", "a", consistency="serializable", result={"value": "1", "node": "n2"})
    h.op(0, "put", "a", value="2", idempotency_key="k2", out="info", result={"node": "n2"})
    h.op(9, "get", "a", result={"value": "1", "node": "n2"})  # excluded process
    ops = h.ops()
    assert served_by(ops, exclude_processes=[9]) == {
        "n0": {"reads": 0, "writes": 1, "serializable": 0},
        "n1": {"reads": 1, "writes": 0, "serializable": 0},
        "n2": {"reads": 0, "writes": 0, "serializable": 1},
    }
    idle = idle_nodes(ops, ["n0", "n1", "n2"], since_ns=0, exclude_processes=[9])
    assert idle == {
        "n0": ["linearizable read"],
        "n1": ["write"],
        "n2": ["write", "linearizable read"],  # an unknown write or a serializable read is not serving
    }
    assert idle_nodes(ops, ["n0"], since_ns=10**12) == {"n0": ["write", "linearizable read"]}


def test_judged_since_moves_past_a_restart_after_the_heal() -> None:
    """A node still armed with failpoints at the heal may crash once more after it: it is
    judged only from `restart_grace` after its last restart, and not at all when that
    leaves less than the minimum window (CI: a node crashing every ~1 s after the heal
    failed "every node serves after the heal" though nothing was wrong)."""
    since, unjudged = judged_since(
        ["n0", "n1", "n2"], since_ns=100, end_ns=200,
        restarts={"n0": [10, 60, 250], "n1": [50, 90, 120], "n2": [170]},
        restart_grace_ns=30, min_window_ns=40,
    )
    # n0: its restarts are before since - grace = 70 or after the end: judged from since;
    # n1: its last restart (120) + grace = 150; n2: 170 + 30 = 200 leaves no window
    assert since == {"n0": 100, "n1": 150}
    assert unjudged == {"n2": 170}


def test_idle_nodes_per_node_since() -> None:
    h = H()
    h.op(0, "put", "a", value="1", idempotency_key="k", result={"revision": 1, "node": "n0"})
    h.op(0, "get", "a", result={"value": "1", "mod_revision": 1, "node": "n0"})  # t=20
    ops = h.ops()
    assert idle_nodes(ops, ["n0"], {"n0": 0}) == {}
    assert idle_nodes(ops, ["n0"], {"n0": 15}) == {"n0": ["write"]}


def test_every_node_verdict_ends_its_window_at_the_last_invoked_op() -> None:
    """The workload's `end` comes after it drained the ops in flight: a short run whose
    clients stopped invoking 3 s after the heal has no window to judge (CI: a control run
    got 'every node serves after the heal: FAIL 0/3' from an empty window)."""
    from statekeeper.chaos.run_checks import every_node_verdict

    s = 1_000_000_000
    h = H()
    for node in ("n0", "n1", "n2"):
        for t in (1, 8):  # seconds: before the heal, and just before the clients stopped
            h.t = t * s - 10
            h.op(0, "put", "a", value="1", idempotency_key=f"{node}{t}", result={"revision": 1, "node": node})
            h.op(0, "get", "a", result={"value": "1", "mod_revision": 1, "node": node})
    ops = h.ops()
    assert every_node_verdict(ops, ["n0", "n1", "n2"], heal=5 * s, end=int(9.6 * s), skip=[], restarts={}) is None
    # A long enough window: judged, and every node served in it.
    v = every_node_verdict(ops, ["n0", "n1", "n2"], heal=3 * s, end=int(9.6 * s), skip=[], restarts={})
    assert v is not None and v.status == "PASS" and v.value == "3/3 nodes"
    # The same window with n2's ops in it gone: n2 is idle.
    idle = [o for o in ops if not (o.output.get("node") == "n2" and o.invoke_time > 5 * s)]
    v = every_node_verdict(idle, ["n0", "n1", "n2"], heal=3 * s, end=int(9.6 * s), skip=[], restarts={})
    assert v.status == "FAIL" and "n2 answered no ok write or linearizable read" in v.detail
