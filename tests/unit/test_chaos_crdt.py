"""chaos.checker.crdt on hand-written histories: a clean run with unknown syncs passes;
each rule catches its violation; the "crdt" verdict; and the CRDT clients are run options
and CLI flags."""

from __future__ import annotations

from typing import Any

from statekeeper.chaos.checker.crdt import LOSS_RULES, RULES, check_crdt
from statekeeper.chaos.crdt_workload import CrdtRun
from statekeeper.chaos.history import parse_events
from statekeeper.chaos.report import ALLOWED, FAIL, PASS, RunResult
from statekeeper.chaos.run_checks import crdt_verdict

KEY = "crdt/visits"
A, B = 20, 21  # the CRDT clients' processes


class H:
    """Builds a history: ops with explicit invoke / completion times."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.n = 0
        self.t = 0

    def op(self, p: int, f: str, outcome: str | None, inp: dict, out: dict, dt: int = 10) -> int:
        self.n += 1
        self.t += 10
        ev = {"process": p, "id": self.n, "f": f, "key": KEY}
        self.events.append({"type": "invoke", "time": self.t, **ev, **inp})
        self.t += dt
        if outcome is not None:
            self.events.append({"type": outcome, "time": self.t, **ev, **out})
        return self.n

    def add(self, p: int, rid: str, n: int, total: int) -> int:
        return self.op(p, "crdt_add", "ok", {"replica": rid, "n": n}, {"total": total}, 0)

    def sync(self, p: int, rid: str, total: int, outcome: str = "ok", final: int | None = None,
             value: int | None = None, changed: bool = True) -> int:  # fmt: skip
        inp = {"replica": rid, "total": total, "pending": True, "full": final in (1, 3)}
        if final is not None:
            inp["final"] = final
        out: dict[str, Any] = {"error": "timeout"}
        if outcome == "ok":
            out = {"sent": True, "changed": changed, "revision": 5, "value": value, "pulled": True}
        elif outcome == "fail":
            out = {"error": "invalid_argument"}
        return self.op(p, "crdt_sync", outcome, inp, out)

    def read(self, final: str, value: int, counts: dict[str, int]) -> int:
        out = {"value": value, "revision": 9, "counts": counts, "negative": {}}
        return self.op(A, "crdt_read", "ok", {"final": final}, out)

    def finals(self, totals: dict[str, int], total: int, after: int | None = None) -> None:
        procs = {"a": A, "b": B}
        for rnd in (1, 2, 3):
            for rid, t in totals.items():
                self.sync(procs[rid], rid, t, final=rnd, value=total, changed=rnd == 1)
        self.read("after", total if after is None else after, totals)

    def ops(self):
        return parse_events(self.events)


def clean() -> H:
    """a adds 3+2 (synced ok, then 4 more, synced unknown), b adds 10 (synced ok)."""
    h = H()
    h.add(A, "a", 3, 3)
    h.add(A, "a", 2, 5)
    h.sync(A, "a", 5, value=5)
    h.add(B, "b", 10, 10)
    h.sync(B, "b", 10, value=15)
    h.add(A, "a", 4, 9)
    h.sync(A, "a", 9, outcome="info")
    return h


def test_a_clean_run_with_an_unknown_sync_passes_either_way() -> None:
    for landed in (False, True):
        h = clean()
        a = 9 if landed else 5
        h.read("before", a + 10, {"a": a, "b": 10})
        h.finals({"a": 9, "b": 10}, 19)
        res = check_crdt(h.ops(), KEY)
        assert res.ok, res.violations
        st = res.stats
        assert (st["adds"], st["total"], st["replicas"]) == (4, 19, 2)
        assert (st["syncs_ok"], st["syncs_unknown"], st["lower"], st["upper"]) == (2, 1, 15, 19)
        assert st["before"] == a + 10 and st["after"] == 19


def test_each_rule_catches_its_violation() -> None:
    def run(mutate) -> set[str]:
        h = clean()
        mutate(h)
        return {v.rule for v in check_crdt(h.ops(), KEY).violations}

    # An acknowledged sync missing from the store (a lost merge).
    assert run(lambda h: (h.read("before", 12, {"a": 2, "b": 10}),
                          h.finals({"a": 9, "b": 10}, 19))) == {"bounds"}  # fmt: skip
    # More than was ever shipped: counted twice.
    assert run(lambda h: (h.read("before", 25, {"a": 15, "b": 10}),
                          h.finals({"a": 9, "b": 10}, 19))) == {"bounds"}  # fmt: skip
    # A replica nobody ran.
    assert run(lambda h: (h.read("before", 16, {"a": 5, "b": 10, "zz": 1}),
                          h.finals({"a": 9, "b": 10}, 19))) == {"bounds"}  # fmt: skip
    # The final store is off (a lost increment).
    assert run(lambda h: (h.read("before", 15, {"a": 5, "b": 10}),
                          h.finals({"a": 9, "b": 10}, 19, after=18))) == {"exact"}  # fmt: skip

    def diverged(h: H) -> None:
        h.read("before", 15, {"a": 5, "b": 10})
        h.sync(A, "a", 9, final=1, value=19)
        h.sync(B, "b", 10, final=1, value=19)
        h.sync(A, "a", 9, final=2, value=9)  # never pulled b's
        h.sync(B, "b", 10, final=2, value=19)
        h.sync(A, "a", 9, final=3, value=19, changed=False)
        h.sync(B, "b", 10, final=3, value=19, changed=True)  # a repeat changed the store
        h.read("after", 19, {"a": 9, "b": 10})

    assert run(diverged) == {"converged", "idempotent"}

    def refused_and_unfinished(h: H) -> None:
        h.sync(B, "b", 10, outcome="fail")
        h.sync(A, "a", 9, final=1, outcome="info")

    assert run(refused_and_unfinished) == {"refused", "final"}
    assert set(RULES) >= {"bounds", "exact", "converged", "idempotent", "refused", "final"}
    assert LOSS_RULES == {"bounds"}


def test_the_crdt_verdict() -> None:
    h = clean()
    h.read("before", 15, {"a": 5, "b": 10})
    h.finals({"a": 9, "b": 10}, 19)
    run = CrdtRun(KEY, 2, (A, B))
    result = RunResult(fault="none")
    v = crdt_verdict(h.ops(), run, result, allowed=False)
    assert (v.name, v.status) == ("crdt", PASS), v
    assert v.value.startswith("0 violations; 4 adds (total 19) on 2 replicas")
    assert "[15, 19] before the final syncs, 19 after" in v.value
    assert result.crdt == [] and result.crdt_stats["total"] == 19
    lost = clean()
    lost.read("before", 12, {"a": 2, "b": 10})
    lost.finals({"a": 9, "b": 10}, 19)
    assert crdt_verdict(lost.ops(), run, RunResult(fault="x"), allowed=False).status == FAIL
    bad = RunResult(fault="x")
    assert crdt_verdict(lost.ops(), run, bad, allowed=True).status == ALLOWED
    assert bad.crdt and bad.crdt[0].startswith("[bounds]")


def test_crdt_clients_are_a_run_option_and_cli_flags() -> None:
    from statekeeper.chaos.cli import build_parser, run_options
    from statekeeper.chaos.runner import RunOptions

    assert RunOptions().crdt_clients == 2
    args = build_parser().parse_args(
        ["run", "--fault", "none", "--crdt-clients", "3", "--debug-crdt-reuse-id"]
    )
    opts = run_options(args, "none")
    assert (opts.crdt_clients, opts.debug_crdt_reuse_id) == (3, True)
    bad = RunOptions(crdt_clients=0, debug_crdt_reuse_id=True)
    try:
        bad.validate()
    except ValueError as e:
        assert "--crdt-clients" in str(e)
    else:
        raise AssertionError("a mutation with no CRDT client was accepted")
