"""One simulated run: a world, its clients and a fault schedule, from a seed.

    verdict = run(seed, steps)            # the schedule drawn from the seed
    verdict = run(seed, steps, faults)    # a given schedule (shrinking, replaying a trace)

The run: three nodes start; the clients (workload.py) run for `steps` steps while the
faults fire at their steps and the invariants (invariants.py) are checked after every
step; then every fault is undone (partitions healed, paused processes resumed, dead
nodes restarted) and the cluster gets SETTLE_SECONDS of virtual time to agree; a write
must then commit (liveness after the faults heal), and the end checks run: the clients'
history (linearizable, nothing acknowledged lost, nothing applied twice, stream and lock
rules, replicas equal) and the member sets. The verdict carries the trace: one line per
event, the same lines for the same seed and schedule, run after run (PYTHONHASHSEED
fixed: cli.py re-executes itself with it).
"""

from __future__ import annotations

import asyncio
import logging
import random
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from statekeeper.chaos.lazyfs import available as lazyfs_available
from statekeeper.chaos.sim import faults as faults_mod
from statekeeper.chaos.sim.faults import STEP, Fault
from statekeeper.chaos.sim.invariants import Invariants
from statekeeper.chaos.sim.network import WORLD
from statekeeper.chaos.sim.spin_watch import CallbackSpin
from statekeeper.chaos.sim.world import World
from statekeeper.node import failpoints
from statekeeper.node.errors import OpError
from statekeeper.node.raft.data_dir import EmptyStart

log = logging.getLogger("statekeeper.sim")

SETTLE_SECONDS = 20.0
LIVENESS_SECONDS = 15.0
RESTART_AFTER_CRASH = 1.0
QUIESCE_SECONDS = 30.0  # the longest the end checks wait for the clients and the followers
REPLACE_SECONDS = 30.0  # the longest the heal waits for a member replacement to finish
FAILURES_IN_TRACE = 30  # the first failures say what broke; the rest follow from them


@dataclass
class Verdict:
    seed: int
    steps: int
    faults: list[Fault]
    failures: list[str] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    sim_seconds: float = 0.0
    cpu_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures


class Run:
    """Drives one world through its schedule (the module docstring)."""

    def __init__(self, world: World, schedule: list[Fault], steps: int, workload_factory):
        self.w = world
        self.schedule = sorted(schedule, key=lambda f: f.step)
        self.steps = steps
        self.inv = Invariants()
        self.cut: Counter = Counter()
        self.failures: list[str] = []
        self.members = {n.id for n in world.cfg.nodes}
        self.start_failures: Counter = Counter()
        self._leaders: tuple = ()
        self.replacing = False
        self.stuck: list[str] = []
        self.lost_disks: set[str] = set()  # wiped, not a voter again yet
        self.joining: set[str] = set()  # started to be added; no member until the add commits
        self.unsure: list[tuple[str, str]] = []  # member changes given up on: maybe applied
        self.workload = workload_factory(world) if workload_factory else None
        self.clients: list[asyncio.Task] = []

    # -- undoing a fault later ------------------------------------------------------
    def later(self, seconds: float, fn, *args) -> None:
        self.w.loop.call_later(seconds, fn, *args, context=WORLD)

    def restart(self, node_id: str) -> None:
        if node_id in self.w.nodes or node_id in self.w.net.down:
            return
        if node_id not in self.members | self.joining:
            return
        if not self._start(node_id, EmptyStart.LOST_DISK):
            self.later(RESTART_AFTER_CRASH, self.restart, node_id)

    def _start(self, node_id: str, empty_start: EmptyStart) -> bool:
        try:
            self.w.start(node_id, empty_start)
        except (KeyboardInterrupt, SystemExit):  # ^C or SIGTERM (cli.py) ends the run
            raise
        except BaseException as e:  # a node that cannot start: tried again, reported at the end
            self.start_failures[node_id] += 1
            self.w.note(f"start {node_id} failed: {type(e).__name__}: {str(e)[:200]}")
            self.w.discard_failed_start(node_id)
            return False
        return True

    def on_crash(self, node_id: str) -> None:
        self.later(RESTART_AFTER_CRASH, self.restart, node_id)

    # -- faults ---------------------------------------------------------------------
    def apply(self, f: Fault) -> None:
        w = self.w
        self.w.note(f"fault {f.describe()}")
        node = w.nodes.get(f.node)
        if f.kind == "kill" and node:
            w.kill(f.node)
            self.later(f.hold, self.restart, f.node)
        elif f.kind == "power" and node:
            w.kill(f.node, power_off=True)
            w.net.down.add(f.node)
            self.later(f.hold, self._power_on, f.node)
        elif f.kind == "disk" and node and self._may_lose_disk(f.node):
            w.kill(f.node)
            w.disks.wipe(f.node)
            self.lost_disks.add(f.node)
            self.later(f.hold, self.restart, f.node)
        elif f.kind == "partition":
            self._cut([(f.node, f.other)], f.hold)
        elif f.kind == "isolate":
            self._cut([(f.node, o) for o in sorted(self.members) if o != f.node], f.hold)
        elif f.kind == "pause" and node and not node.process.paused:
            node.process.paused = True
            self.later(f.hold, self._resume, node.process)
        elif f.kind == "clock" and node:
            node.process.wall_skew += f.amount
        elif f.kind == "reset" and node:
            w.net.reset_node(f.node)
        elif f.kind == "snapshot" and node and node.raft.is_leader():
            node.raft.compact_journal()
        elif f.kind == "crashpoint":
            failpoints.enable(f.node, f"{f.amount:g}%exit")
            self.later(f.hold, failpoints.enable, f.node, "off")
        elif f.kind == "replace" and node and self._may_lose_disk(f.node):
            target = f.node
            if node.raft.is_leader():  # a leader cannot remove itself: replace a follower
                target = next((i for i in sorted(w.nodes) if i != f.node), f.node)
            w.loop.create_task(self._replace(target), context=WORLD)

    def _may_lose_disk(self, node_id: str) -> bool:
        """A lost disk only while no other member is without its data: two lost disks of
        three lose acknowledged writes by design (docs/protocol.md, 'A lost disk'), which
        is no defect to find. A member is without its data from its wipe until it is a
        voter again (caught up, node/raft/catchup.py; `lost_disks`, cleared by observe()).
        Another member merely down is fine: it comes back with its data (the chaos suite's
        lost-disk scenario loses a disk just then). Nor in a configuration of fewer than
        three members, or while a member is being added: the one other member cannot
        elect without the lost disk's vote, which waits for a leader to catch it up, so
        a restart of that member leaves no leader until an operator acts (by design,
        docs/protocol.md, 'A lost disk')."""
        if self.replacing or (self.lost_disks - {node_id}):
            self.w.note(
                f"(disk of {node_id} kept: {sorted(self.lost_disks) or 'a replace'} not caught up)"
            )
            return False
        if self.joining or len(self.members) < 3:
            self.w.note(f"(disk of {node_id} kept: members {sorted(self.members)})")
            return False
        return True

    def _cut(self, pairs, hold: float) -> None:
        for a, b in pairs:
            self.cut[frozenset((a, b))] += 1
            self.w.net.partition(a, b)
        self.later(hold, self._uncut, pairs)

    def _uncut(self, pairs) -> None:
        for a, b in pairs:
            key = frozenset((a, b))
            self.cut[key] -= 1
            if self.cut[key] <= 0:
                del self.cut[key]
                self.w.net.cut.discard(key)

    def _resume(self, process) -> None:
        if process.alive and process.paused:
            self.w.loop.resume(process)

    def _power_on(self, node_id: str) -> None:
        self.w.net.down.discard(node_id)
        self.restart(node_id)

    async def _replace(self, node_id: str) -> None:
        """Remove node_id through the log, then give it a new disk and add it back."""
        member = next((m for m in self.w.any_members() if m.id == node_id), None)
        if member is None:
            return
        self.replacing = True
        try:
            await self._replace_member(node_id, member)
        finally:
            self.replacing = False

    async def _replace_member(self, node_id: str, member) -> None:
        if not await self.w.change_member("rem", member):
            self.unsure.append(("rem", node_id))
            return
        self.members.discard(node_id)
        if node_id in self.w.nodes:
            self.w.kill(node_id)
        self.w.disks.wipe(node_id)
        self.lost_disks.add(node_id)
        await asyncio.sleep(0.5)
        # As `cluster add-node` does: the new member runs, started with --join, before the
        # leader appends the add (the add counts it in the quorum from its append on; a
        # new member that waited to be started after the commit, or did not vote until
        # caught up, left a one-member cluster without a leader for good: seed 810258).
        if node_id in self.w.net.down or not self._start(node_id, EmptyStart.JOIN):
            self.w.note(f"re-adding {node_id}: it did not start; it stays out")
            return
        self.joining.add(node_id)  # restarted after a crash like a member (a supervisor)
        if await self.w.change_member("add", member):
            self.members.add(node_id)
            self.joining.discard(node_id)
        else:  # left running, as add-node leaves it: the add may have taken effect
            self.w.note(f"re-adding {node_id} failed: it stays out unless the add took effect")
            self.unsure.append(("add", node_id))

    # -- the run ----------------------------------------------------------------------
    def observe(self, step: int) -> None:
        live = list(self.w.nodes.values())
        for n in live:
            if n.node_id in self.lost_disks and n.raft.status().voter:
                self.lost_disks.discard(n.node_id)
        self.inv.check(step, live)
        leaders = tuple(
            sorted((n.node_id, n.raft.status().term) for n in live if n.raft.is_leader())
        )
        if leaders != self._leaders:
            self._leaders = leaders
            self.w.note("leaders " + (" ".join(f"{i}@{t}" for i, t in leaders) or "none"))

    async def main(self, w: World) -> None:
        for node_id in sorted(self.members):
            self.restart(node_id)
        end = self.steps * STEP
        if self.workload is not None:
            self.clients = [
                w.loop.create_task(
                    self.workload.run_client(i, until=w.clock.now + end), context=WORLD
                )
                for i in range(self.workload.clients)
            ]
        pending = list(self.schedule)
        for step in range(self.steps):
            while pending and pending[0].step <= step:
                self.apply(pending.pop(0))
            await asyncio.sleep(STEP)
            self.observe(step)
        await self.heal()
        await self.settle()

    async def heal(self) -> None:
        w = self.w
        w.note("heal")
        # A member replacement under way finishes first: a node added back after the
        # settle was judged empty (seed 100057: the add committed 0.3 s before the checks).
        deadline = w.clock.now + REPLACE_SECONDS
        while self.replacing and w.clock.now < deadline:
            await asyncio.sleep(0.2)
        self.cut.clear()
        w.net.heal()
        w.net.down.clear()
        for name in faults_mod.CRASHPOINTS:
            failpoints.enable(name, "off")
        for node in list(w.nodes.values()):
            if node.process.paused:
                w.loop.resume(node.process)
            node.process.wall_skew = 0.0
        for node_id in sorted(self.members | self.joining):
            self.restart(node_id)

    async def settle(self) -> None:
        w = self.w
        deadline = w.clock.now + SETTLE_SECONDS
        while w.clock.now < deadline:
            await asyncio.sleep(0.1)
            self.observe(-1)
            self._learn_unsure_changes()
            for node_id in sorted((self.members | self.joining) - set(w.nodes)):
                self.restart(node_id)
            if self._settled():
                break
        committed = await self.liveness()
        if not committed:
            self.failures.append(
                f"no progress: a write through {', '.join(self.stuck)} did not commit within "
                f"{LIVENESS_SECONDS:g} s after every fault healed "
                f"(leaders: {self._leaders or 'none'}; nodes up: {sorted(w.nodes)})"
            )
        for node_id in sorted(self.members - set(w.nodes)):
            self.failures.append(
                f"{node_id} never started again ({self.start_failures[node_id]} failed starts)"
            )
        await self.quiesce()
        self.observe(-1)
        if self.workload is not None:
            self.failures.extend(self.workload.check(w))
        self.inv.check_members(list(w.nodes.values()), self.members)
        more = [f"... and {self.inv.more} more invariant violations"] if self.inv.more else []
        self.failures[:0] = self.inv.violations + more

    def _learn_unsure_changes(self) -> None:
        """A member change the harness gave up on (no leader for 10 s, say) stays in the
        log it was appended to and may commit later (seed 200063: an add committed 11 s
        after it was given up, and the member was never started). Once one leader with no
        change pending is there, its configuration says how each ended; only those outcomes
        are accepted (anything else stays a violation of check_members)."""
        if not self.unsure:
            return
        leaders = [n for n in self.w.nodes.values() if n.raft.is_leader()]
        if len(leaders) != 1 or leaders[0].raft.member_change_pending():
            return
        have = {m.id for m in leaders[0].raft.members()}
        possible = [set(self.members)]
        for kind, node_id in self.unsure:
            possible += [p | {node_id} if kind == "add" else p - {node_id} for p in possible]
        if have in possible and have != self.members:
            self.w.note(f"member changes given up on took effect: members {sorted(have)}")
            self.members = have
        self.unsure.clear()
        self.joining.clear()
        for node_id in sorted(set(self.w.nodes) - self.members):  # as add-node stops it
            self.w.note(f"{node_id} is no member: stopped")
            self.w.kill(node_id)

    async def quiesce(self) -> None:
        """Before the end checks read the stores: the clients' last ops answered (an op may
        end after the run's last step: it waits up to its timeout, a lease revoke retries)
        and every live node applied what the leader committed. Checked after a fixed 1 s,
        a client's last entry committed on the leader just before it was still on its way
        to the followers (seed 400015: "positions never became equal", applied 1638 on the
        leader, 1637 on the others)."""
        w = self.w
        deadline = w.clock.now + QUIESCE_SECONDS
        while w.clock.now < deadline and not all(t.done() for t in self.clients):
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # followers apply the last commit
        while w.clock.now < deadline and not self._settled():
            await asyncio.sleep(0.1)

    def _settled(self) -> bool:
        live = list(self.w.nodes.values())
        if set(self.w.nodes) != self.members:
            return False
        leaders = [n for n in live if n.raft.is_leader()]
        if len(leaders) != 1:
            return False
        top = leaders[0].raft.status().commit_index
        return all(n.raft.status().applied_index >= top for n in live)

    async def liveness(self) -> bool:
        """After the heal, a write through EVERY node commits within LIVENESS_SECONDS (a
        node that cannot start, a leader that never settles, or one wedged proposer each
        fail this; the failure names the nodes)."""
        w = self.w
        deadline = w.clock.now + LIVENESS_SECONDS
        waiting = set(self.members)
        while w.clock.now < deadline and waiting:
            for node_id in sorted(waiting):
                node = w.nodes.get(node_id)
                if node is None:
                    continue
                task = node.start_request(
                    {"op": "put", "ns": "sim", "key": f"liveness/{node_id}", "value": b"x"}
                )
                try:
                    await asyncio.wait_for(asyncio.shield(task), 5.0)
                    w.note(f"liveness write committed through {node_id}")
                    waiting.discard(node_id)
                except (TimeoutError, OpError):
                    pass
            await asyncio.sleep(0.2)
        self.stuck = sorted(waiting)
        return not waiting


def run(
    seed: int,
    steps: int,
    schedule: list[Fault] | None = None,
    workload_factory="default",
    root: Path | None = None,
    disk_mode: str = "auto",
) -> Verdict:
    """Run one world (the module docstring); `schedule` None: drawn from the seed."""
    rng = random.Random(seed)
    nodes = ["n0", "n1", "n2"]
    if schedule is None:
        schedule = faults_mod.schedule(random.Random(rng.random()), steps, nodes)
    if workload_factory == "default":
        workload_factory = _default_workload(random.Random(rng.random()))
    if disk_mode == "auto":  # LazyFS only where a power cut needs it: ~40x slower disks
        disk_mode = (
            "lazyfs"
            if any(f.kind == "power" for f in schedule) and lazyfs_available()[0]
            else "plain"
        )
    if root is None and Path("/dev/shm").is_dir():
        root = Path("/dev/shm")
    verdict = Verdict(seed, steps, list(schedule))
    started = time.process_time()
    with tempfile.TemporaryDirectory(prefix="sim-", dir=root) as tmp:
        world = World(seed, Path(tmp), disk_mode=disk_mode)
        r = Run(world, schedule, steps, workload_factory)
        world.on_crash = r.on_crash
        world.note(f"seed {seed} steps {steps} faults {len(schedule)} disks {world.disks.mode}")
        try:
            world.run(r.main)
        except CallbackSpin as e:  # a node's callback that never returns (spin_watch.py)
            r.failures.append(f"spin: {e}")
        except Exception as e:  # the simulator itself failed: a failure of the run, with its cause
            log.exception("the simulated run failed")
            r.failures.append(f"the run raised {type(e).__name__}: {e}")
        verdict.failures = r.failures
        summary = r.workload.summary() if r.workload is not None else {}
        world.note(f"verdict {'PASS' if verdict.ok else 'FAIL'} {summary}")
        for line in verdict.failures[:FAILURES_IN_TRACE]:
            world.note(f"failure: {line}")
        if len(verdict.failures) > FAILURES_IN_TRACE:
            world.note(f"failure: ... and {len(verdict.failures) - FAILURES_IN_TRACE} more")
        verdict.trace = world.trace
        verdict.sim_seconds = world.clock.elapsed()
    verdict.cpu_seconds = time.process_time() - started
    return verdict


def _default_workload(rng: random.Random):
    try:
        from statekeeper.chaos.sim.workload import Workload
    except ImportError:  # the clients are optional while the simulator is built up
        return None
    return lambda world: Workload(world, rng)
