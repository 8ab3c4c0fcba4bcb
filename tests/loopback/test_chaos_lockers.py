"""How the chaos lockers (chaos.lock_workload) record their acquisitions, fenced writes
and releases, against a fake node on loopback: a fence_mismatch is a definite failure (and
the locker stops writing), a timeout is unknown, every write carries its fence (none
under the --debug-lock-unfenced mutation); and the run option / CLI flags."""

from __future__ import annotations

import io
import json
import threading
import time
from collections import Counter

import pytest

from statekeeper.chaos.cli import build_parser, run_options
from statekeeper.chaos.history import HistoryWriter, parse_events
from statekeeper.chaos.lock_workload import Lockers
from statekeeper.chaos.runner import RunOptions
from statekeeper.chaos.workload_config import WorkloadConfig
from tests.loopback.test_chaos_workload import FakeNode

REFUSED, UNKNOWN = 2, 3  # the 2nd acquisition's writes are refused, the 3rd's time out


def fence_of(put: dict) -> int:
    """The fence named in a put's value ``L{locker}-f{fence}-c{n}`` (bytes on the wire)."""
    return int(put["value"].decode().split("-f")[1].split("-")[0])


class LockNode:
    """A fake node: every acquire gets the lock with fence 10 * n (n-th acquire); puts
    with the n = REFUSED fence answer fence_mismatch, the n = UNKNOWN fence time out."""

    def __init__(self) -> None:
        self.acquires = 0
        self.puts: list[dict] = []
        self.lock = threading.Lock()

    def __call__(self, path: str, body: dict) -> tuple[int, dict]:
        with self.lock:
            if path == "/v1/leases/grant":
                return 200, {"revision": 1, "lease": 7, "ttl_ms": 2000, "expires_ms": 0}
            if path == "/v1/leases/keepalive":
                return 200, {"revision": 1, "leases": [{"lease": 7, "ttl_ms": 2000, "expires_ms": 0}]}
            if path == "/v1/leases/revoke":
                return 200, {"revision": 1, "deleted": 1}
            if path == "/v1/locks/acquire":
                self.acquires += 1
                f = 10 * self.acquires
                return 200, {"revision": f, "name": body["name"], "key": f"__lock/x/{f:020d}",
                             "fence": f, "holder_fence": f, "acquired": True, "ahead": None}  # fmt: skip
            if path == "/v1/locks/release":
                return 200, {"revision": 2, "name": body["name"], "fence": body["fence"], "held": True}
            if path == "/v1/kv/range":
                return 200, {"revision": 5, "kvs": [], "more": False}
            assert path == "/v1/kv/put", path
            self.puts.append(body)
            fence = fence_of(body)
            if fence == 10 * REFUSED:
                err = {"code": "fence_mismatch", "message": "moved on", "name": "chaos-lock",
                       "token": fence, "holder_fence": fence + 10}  # fmt: skip
                return 409, {"error": err}
            if fence == 10 * UNKNOWN:
                return 504, {"error": {"code": "timeout", "message": "slow"}}
            return 200, {"revision": 100 + len(self.puts)}


def run_lockers(node: LockNode, acquires: int = 4, **kw) -> list:
    """The ops one locker recorded once it acquired the lock ``acquires`` times."""
    buf = io.StringIO()
    h = HistoryWriter(buf)
    cfg = WorkloadConfig(lockers=1, lock_pause_share=0.0, lock_op_deadline=0.3,
                         attempt_timeout=0.2, **kw)  # fmt: skip
    with FakeNode(200, {}, node) as fake:
        lockers = Lockers([fake.url], h, cfg, first_process=17)
        assert lockers.start() == 6  # the key's read revision + 1
        deadline = time.monotonic() + 20
        while node.acquires < acquires and time.monotonic() < deadline:
            time.sleep(0.05)
        lockers.stop()
    h.flush()
    return parse_events(json.loads(line) for line in buf.getvalue().splitlines())


def test_lockers_record_acquisitions_fenced_writes_and_releases() -> None:
    node = LockNode()
    ops = run_lockers(node)
    assert {o.process for o in ops} == {17}
    acq = [o for o in ops if o.f == "lock_acquire"]
    assert len(acq) >= 4 and [o.output["fence"] for o in acq[:4]] == [10, 20, 30, 40]
    by_fence: dict[int, list] = {}
    for o in ops:
        if o.f == "fenced_put":
            assert o.key == "lockdata" and o.input["value"].startswith(f"L0-f{o.input['fence']}-c")
            by_fence.setdefault(o.input["fence"], []).append(o)
    assert {o.outcome for o in by_fence[10]} == {"ok"} and 2 <= len(by_fence[10]) <= 4
    assert all(isinstance(o.output["revision"], int) for o in by_fence[10])
    # refused: a definite failure with the server's holder fence; the locker stops writing
    (refused,) = by_fence[20]
    assert refused.outcome == "fail" and refused.output["error"] == "fence_mismatch"
    assert refused.output["holder_fence"] == 30
    # timed out: unknown, and the locker goes on (it may still hold the lock)
    assert {o.outcome for o in by_fence[30]} == {"info"} and len(by_fence[30]) >= 2
    releases = Counter(o.input["fence"] for o in ops if o.f == "lock_release" and o.outcome == "ok")
    assert releases[10] == releases[20] == releases[30] == 1
    # every put carried its fence, and its own idempotency key
    assert all(b["fence"]["name"] == "chaos-lock" for b in node.puts)
    assert all(b["fence"]["token"] == fence_of(b) for b in node.puts)
    keys = [o.input["idempotency_key"] for o in ops if o.f == "fenced_put"]
    assert len(keys) == len(set(keys))


def test_the_unfenced_mutation_sends_no_fence_but_records_it() -> None:
    node = LockNode()
    ops = run_lockers(node, acquires=2, lock_unfenced=True)
    assert node.puts and all("fence" not in b for b in node.puts)
    writes = [o for o in ops if o.f == "fenced_put"]
    assert writes and all(o.input["unfenced"] and o.input["fence"] for o in writes)


def test_lockers_are_a_run_option_and_cli_flags() -> None:
    args = build_parser().parse_args(["run", "--fault", "none", "--lockers", "2", "--debug-lock-unfenced"])
    opts = run_options(args, "none")
    assert opts.lockers == 2 and opts.debug_lock_unfenced
    assert RunOptions().lockers == 3 and WorkloadConfig().lockers == 3
    with pytest.raises(ValueError, match="lockers"):
        RunOptions(lockers=1, debug_lock_unfenced=True).validate()
    with pytest.raises(ValueError, match="no lockers"):
        Lockers(["http://127.0.0.1:1"], HistoryWriter(io.StringIO()), WorkloadConfig(lockers=0), 1)
