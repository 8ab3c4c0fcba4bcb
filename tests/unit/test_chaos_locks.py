"""chaos.checker.locks on hand-written histories: a clean run with a stale holder whose
late write was refused passes; each rule catches its violation; and the "locks" verdict."""

from __future__ import annotations

from typing import Any

import pytest

from statekeeper.chaos.checker.locks import LOSS_RULES, RULES, check_locks
from statekeeper.chaos.checker.watch import WatchTruth
from statekeeper.chaos.history import parse_events
from statekeeper.chaos.lock_workload import LockRun
from statekeeper.chaos.report import RunResult
from statekeeper.chaos.run_checks import lock_verdict

KEY = "lockdata"
A, B = 17, 18  # the lockers' processes


class H:
    """Builds a history: ops with explicit invoke / completion times."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.n = 0

    def op(self, p: int, f: str, t0: int, t1: int | None, outcome: str, inp: dict, out: dict):
        self.n += 1
        self.events.append({"type": "invoke", "process": p, "id": self.n, "time": t0, "f": f, **inp})
        if t1 is not None:
            self.events.append({"type": outcome, "process": p, "id": self.n, "time": t1, "f": f, **out})
        return self.n

    def acquire(self, p: int, t0: int, t1: int, fence: int, outcome: str = "ok") -> int:
        out = {"fence": fence, "revision": fence} if outcome == "ok" else {"error": "lock_timeout"}
        return self.op(p, "lock_acquire", t0, t1, outcome, {"name": "chaos-lock"}, out)

    def write(self, p: int, t0: int, t1: int | None, fence: int, value: str, outcome: str = "ok",
              revision: int | None = None, paused: bool = False) -> int:  # fmt: skip
        out: dict[str, Any] = {}
        if outcome == "ok":
            out = {"revision": revision}
        elif outcome == "fail":
            out = {"error": "fence_mismatch", "holder_fence": 99}
        else:
            out = {"error": "timeout"}
        inp = {"key": KEY, "value": value, "fence": fence, **({"paused": True} if paused else {})}
        return self.op(p, "fenced_put", t0, t1, outcome, inp, out)

    def release(self, p: int, t0: int, t1: int, fence: int) -> int:
        return self.op(p, "lock_release", t0, t1, "ok", {"name": "chaos-lock", "fence": fence}, {})

    def ops(self):
        return parse_events(self.events)


def truth(changes: dict[int, str], start: int = 1, final: int = 100) -> WatchTruth:
    return WatchTruth(KEY, start, final, changes={r: [(KEY, "put", v)] for r, v in changes.items()})


def clean() -> tuple[H, dict[int, str]]:
    """A holds fence 10 and writes at 11; pauses; B acquires fence 20 (A's lease expired)
    and writes at 21, 22; A wakes, writes with fence 10: refused. Then A, fence 30."""
    h = H()
    h.acquire(A, 0, 10, 10)
    h.write(A, 11, 12, 10, "L0-f10-c0", revision=11)
    h.acquire(B, 5, 50, 20)
    h.write(B, 51, 52, 20, "L1-f20-c0", revision=21)
    h.write(A, 60, 61, 10, "L0-f10-c1", "fail", paused=True)  # the stale holder, refused
    h.release(A, 62, 63, 10)
    h.write(B, 64, 65, 20, "L1-f20-c1", revision=22)
    h.release(B, 66, 67, 20)
    h.acquire(A, 70, 80, 30)
    h.write(A, 81, None, 30, "L0-f30-c0", "info")  # unknown, landed at 31
    h.write(A, 82, 83, 30, "L0-f30-c1", "info")  # unknown, did not land
    return h, {11: "L0-f10-c0", 21: "L1-f20-c0", 22: "L1-f20-c1", 31: "L0-f30-c0"}


def rules(h: H, changes: dict[int, str], **kw: Any) -> set[str]:
    return {v.rule for v in check_locks(h.ops(), truth(changes, **kw), KEY).violations}


def test_a_clean_history_with_a_refused_stale_holder_passes() -> None:
    h, changes = clean()
    res = check_locks(h.ops(), truth(changes), KEY)
    assert res.ok, [v.describe() for v in res.violations]
    st = res.stats
    assert st["acquisitions"] == 3 and st["lockers"] == 2
    assert (st["writes_ok"], st["writes_refused"], st["writes_unknown"]) == (3, 1, 2)
    assert st["unknown_landed"] == 1 and st["landed"] == 4
    assert st["handovers"] == 2  # 10 -> 20 -> 30 along the commit order
    assert st["stale_holders"] == 1 and st["stale_refused"] == 1 and st["stale_ok"] == 0
    assert st["max_holders"] == 2  # A still believed it held fence 10 while B held 20
    assert st["stale_paused"] == 1
    assert "1 stale holders (1 after a pause of the locker's own)" in res.summary()


def test_order_interleaved_landed_writes_are_caught() -> None:
    h, changes = clean()
    # A's unknown write with fence 10, invoked before B acquired, lands after B's write.
    h.write(A, 20, None, 10, "L0-f10-late", "info")
    assert rules(h, {**changes, 23: "L0-f10-late"}) == {"order"}
    assert rules(h, changes) == set()  # the same write, not landed: fine


def test_fences_that_go_back_or_repeat_are_caught() -> None:
    h, changes = clean()
    h.acquire(B, 90, 91, 25)  # invoked after fence 30 was acquired
    assert rules(h, changes) == {"fences"}
    h2, changes = clean()
    h2.acquire(B, 1, 3, 10)  # fence 10 again, concurrently
    assert "fences" in rules(h2, changes)


def test_an_acknowledged_write_missing_from_the_key_history_is_caught() -> None:
    h, changes = clean()
    assert rules(h, {k: v for k, v in changes.items() if k != 21}) == {"acknowledged"}
    assert rules(h, {**changes, 21: "something else"}) >= {"acknowledged"}
    # outside the truth's coverage (compacted): not checked
    assert "acknowledged" not in rules(h, {k: v for k, v in changes.items() if k != 11}, start=15)


def test_a_refused_write_that_appears_is_caught() -> None:
    h, changes = clean()
    assert rules(h, {**changes, 40: "L0-f10-c1"}) >= {"refused"}


def test_writes_without_an_acquired_fence_and_phantoms_are_caught() -> None:
    h, changes = clean()
    h.write(B, 90, 91, 30, "L1-f30-x", revision=95)  # fence 30 was A's, not B's
    assert rules(h, {**changes, 95: "L1-f30-x"}) == {"unfenced"}
    h, changes = clean()
    assert rules(h, {**changes, 96: "nobody wrote this"}) == {"unfenced"}
    h, changes = clean()
    h.write(A, 84, 85, 30, "L0-f30-low", revision=29)  # at or below its fence's revision
    assert rules(h, {**changes, 29: "L0-f30-low"}) >= {"unfenced"}


def test_a_stale_holders_acknowledged_write_is_caught() -> None:
    h = H()
    h.acquire(A, 0, 10, 10)
    h.write(A, 11, 12, 10, "L0-f10-c0", revision=11)
    h.acquire(B, 5, 50, 20)  # B holds from t=50 but never writes
    h.write(A, 60, 61, 10, "L0-f10-c1", revision=21)  # ... and A's late write lands
    res = check_locks(h.ops(), truth({11: "L0-f10-c0", 21: "L0-f10-c1"}), KEY)
    assert {v.rule for v in res.violations} == {"stale"}
    assert res.stats["stale_ok"] == 1 and "after a newer holder" in res.violations[0].message
    assert res.stats["stale_paused"] == 0  # a stale holder the fault made, not a pause


def test_an_unread_truth_still_runs_the_history_rules() -> None:
    h, _ = clean()
    res = check_locks(h.ops(), WatchTruth(KEY, 1, 0, error="no leader"), KEY)
    assert res.unread and not res.ok and not res.violations
    h.acquire(B, 90, 91, 25)
    assert {v.rule for v in check_locks(h.ops(), None, KEY).violations} == {"fences"}


def test_the_rules_and_loss_rules_are_named() -> None:
    assert set(RULES) == {"order", "fences", "acknowledged", "refused", "unfenced", "stale"}
    assert LOSS_RULES < set(RULES) and "refused" not in LOSS_RULES


@pytest.mark.parametrize("allowed", [False, True])
def test_the_locks_verdict(allowed: bool) -> None:
    h, changes = clean()
    result = RunResult(fault="x")
    v = lock_verdict(h.ops(), LockRun(KEY, truth(changes)), result, allowed)
    assert v.name == "locks" and v.status == "PASS", v
    assert v.value.startswith("0 violations; 3 acquisitions, 3 ok / 1 refused / 2 unknown")
    assert result.lock_stats["stale_holders"] == 1 and not result.locks
    h.write(A, 20, None, 10, "L0-f10-late", "info")
    bad = lock_verdict(h.ops(), LockRun(KEY, truth({**changes, 23: "L0-f10-late"})), result, allowed)
    assert bad.status == ("ALLOWED" if allowed else "FAIL") and "1 order" in bad.value
    assert result.locks[0].startswith("[order] #")
    unread = lock_verdict(h.ops(), LockRun(KEY, None), result, allowed)
    assert unread.status == "FAIL" and result.locks[0].startswith("the lock key's history")
