"""The simulated clients and their end-of-run checks (chaos/sim/workload.py): a fault-free
world passes every check with every op kind run; a stale read (the read-barrier-skip
failpoint on a partitioned leader) and a write missing from the final state fail them."""

from __future__ import annotations

import asyncio
import dataclasses
import random

import pytest

from statekeeper.chaos.sim.client_ops import KEYS
from statekeeper.chaos.sim.workload import Workload
from statekeeper.chaos.sim.world import World
from statekeeper.node import failpoints
from tests.unit.sim.worlds import elect

KINDS = ("put", "put_replay", "txn", "get", "get_serializable", "append", "read_stream", "lease_grant",
         "lease_keepalive", "lease_revoke", "lock_acquire", "fenced_put", "lock_release")  # fmt: skip


async def _run_clients(w: World, seconds: float) -> Workload:
    """Elect, run 4 clients for `seconds`, let the followers apply: ready for check()."""
    await elect(w)
    wl, tasks = _clients(w, seconds)
    await asyncio.gather(*tasks)
    await w.sleep(1.0)
    return wl


def _clients(w: World, seconds: float) -> tuple[Workload, list[asyncio.Task]]:
    """4 clients for `seconds` of virtual time, from the world's seed."""
    wl = Workload(w, random.Random(w.seed), clients=4)
    until = w.clock.now + seconds
    return wl, [w.loop.create_task(wl.run_client(i, until)) for i in range(4)]


@pytest.fixture(scope="module")
def fault_free(tmp_path_factory):
    out: dict = {}

    async def main(w: World) -> None:
        wl = await _run_clients(w, 3.0)
        out["failures"] = wl.check(w)
        out["summary"] = wl.summary()
        # An acknowledged put the stores never saw: a lost write the check must name.
        h = wl.rec.history
        op = h.invoke(99, "put", KEYS[0], value="never-applied", idempotency_key="ik-x")
        h.ok(op, revision=10**6, node="n0")
        out["tampered"] = wl.check(w)
        out["op"] = op

    World(7, tmp_path_factory.mktemp("sim")).run(main)
    return out


def test_fault_free_run_passes_every_check_and_runs_every_op_kind(fault_free):
    assert fault_free["failures"] == []
    summary = fault_free["summary"]
    for kind in KINDS:
        assert summary.get(kind, {}).get("ok", 0) > 0, (kind, summary)


def test_an_acknowledged_write_missing_from_the_final_state_fails(fault_free):
    lines = fault_free["tampered"]
    op = fault_free["op"]
    assert any(line.startswith(f"lost write on {KEYS[0]}") and f"#{op}" in line for line in lines)


def test_stale_reads_of_a_cut_off_leader_fail_the_checks(tmp_path):
    out: dict = {}

    async def main(w: World) -> None:
        await elect(w)
        wl, tasks = _clients(w, 3.0)
        await w.sleep(0.5)
        old = w.leaders()[0]
        failpoints.enable("read-barrier-skip")  # linearizable reads without a barrier
        for other in list(w.nodes):
            if other != old:
                w.net.partition(old, other)
        await w.sleep(2.0)
        w.net.heal()
        failpoints.configure("")
        await asyncio.gather(*tasks)
        await w.sleep(1.0)
        out["failures"] = wl.check(w)

    try:
        World(1, tmp_path).run(main)
    finally:
        failpoints.configure("")
    lines = out["failures"]
    assert any(line.startswith("not linearizable on") for line in lines), lines
    assert any(line.startswith("revision went back") for line in lines), lines


def test_a_replay_applied_again_once_its_record_expired_fails_the_checks(tmp_path):
    """A window of 1 s instead of 24 h: puts replayed more than 1 s after they applied
    apply again, which is what a store that forgets its idempotency records too early (a
    clock jumped ahead: chaos/sim/defects/idem-clock.patch) does within the 24 h."""
    out: dict = {}

    async def main(w: World) -> None:
        w.cfg = dataclasses.replace(
            w.cfg, retention=dataclasses.replace(w.cfg.retention, idempotency_seconds=1)
        )
        wl = await _run_clients(w, 5.0)
        out["failures"] = wl.check(w)
        out["summary"] = wl.summary()

    World(7, tmp_path).run(main)
    lines = out["failures"]
    assert any(
        line.startswith("duplicate application") and "a retry was applied" in line for line in lines
    ), (lines, out["summary"])


def test_one_seed_gives_the_same_history_twice(tmp_path):
    """The clients draw everything from the seed (ops, keys, nodes): a replay replays."""

    def history(root) -> list[dict]:
        out: list[dict] = []

        async def main(w: World) -> None:
            await elect(w)
            wl, tasks = _clients(w, 1.5)
            await asyncio.gather(*tasks)
            out.extend(wl.rec.events())

        World(3, root).run(main)
        return out

    first = history(tmp_path / "a")
    assert len(first) > 100
    assert history(tmp_path / "b") == first
