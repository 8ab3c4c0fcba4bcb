"""A nemesis for long soaks: random faults, one after another, on one cluster (as Jepsen's).

``statekeeper chaos soak --minutes 30`` runs the ordinary runner (``chaos.runner``) once,
with the fault ``nemesis``: a ``Fault`` whose ``start()`` launches a thread that loops::

    pick the next fault (seeded) -> start it -> hold it for a random window (3-15 s)
    -> stop (heal) it -> every node running? every node ready? -> quiet time (2-10 s)

until the runner's fault window is over; ``stop()`` stops the thread and heals the fault in
effect. The workload, the final reads and every check (linearizability, lost acknowledged
writes, duplicate applications, revision regressions, crashed nodes, recovery) are the
runner's, over the whole soak's history. ``write_soak_report`` then adds the nemesis'
schedule (each fault with its start / stop time, what it did, how long the cluster took to
be ready again, per-fault availability) to the run's report.md, with its own timeline PNG.

Schedule. The order of faults, their windows and quiet times and the seed each fault gets
for its own choices (which follower, which minority) come from ``--seed`` alone
(``schedule()``), so two soaks with one seed inject the same sequence; the wall-clock times
and who leads when a fault starts still vary. Faults are dealt like a shuffled deck: every
eligible fault once, in random order, then a new shuffle, so even a short soak covers many.

Which faults. The runner builds the cluster once, for one ``topology`` (``chaos.faults``),
before the workload starts; a fault that needs another build cannot run in that cluster.
So the nemesis takes the faults of one topology plus every ``plain`` (process) fault:

- ``links`` (iptables partitions; chosen by ``auto`` where root and iptables work):
  process faults + partition-leader / -follower / -majority-minority / -bridge,
  one-way-loss, packet-loss. Proxy faults are excluded: raft then runs over per-link
  loopback addresses, not through Toxiproxy, and clients talk to the nodes directly.
- ``proxy`` (``auto`` where iptables does not work but toxiproxy-python is installed):
  process faults + every proxy-* fault. Partition faults are excluded (no per-link
  addresses).
- ``lazyfs`` (only on request): process faults + power-loss; every node's data on one
  LazyFS mount (slower I/O throughout). With ``--fsync never`` a power loss may lose
  acknowledged writes by contract: the loss verdicts then say ALLOWED for the whole soak.
- ``plain``: process faults only.

Always excluded:

- ``none``: the control run does nothing.
- faults that shape the cluster before it starts (``chaos.faults``: ``failpoints``,
  ``raft_settings``, ``retention_settings``, an own ``node_env()`` or ``configure()``):
  the crash-* failpoint faults (failpoints armed in every node's environment for the
  whole run, tiny snapshot thresholds, the runner's CrashWatcher), clock-jump (every node
  started under libfaketime, 1 h idempotency window) and deposed-leader-snapshot (5 nodes,
  failpoints, tiny snapshots). One soak has one setup; arming one fault's failpoints or
  clock shim for the whole soak would turn it from a windowed fault into the background
  of every other one (and the runner would not start its CrashWatcher for the nemesis).
  Each of them still runs alone in ``chaos run`` / ``chaos suite``.

Excluded per run: faults whose ``available()`` says no on this machine, and faults whose
cluster size does not fit (``min_nodes`` above ``--nodes``; ``max_nodes`` if a fault has
it). A fault whose injection fails (say, no leader within 15 s) is logged, healed anyway
and counted; the soak goes on.

Between faults the nemesis checks that every node is still running (one that is not
crashed by itself: that is recorded, shown as a FAIL verdict, and the node is restarted so
the soak can go on) and waits until every node is ready (at most ``recover_timeout``; not
ready by then is also a FAIL) before the quiet time's rest: the next fault always starts on
a whole cluster, so faults follow each other but do not pile up.

Registration. ``nemesis`` is not in ``chaos.faults.FAULTS``: ``registered()`` adds the
configured class for the duration of one soak only, so ``chaos suite`` / ``chaos list`` /
``chaos run`` never see it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from statekeeper.chaos import faults as _faults
from statekeeper.chaos.faults import Fault, FaultContext, FaultError, get_fault

__all__ = [
    "NEVER",
    "TOPOLOGIES",
    "Nemesis",
    "NemesisConfig",
    "Step",
    "StepRecord",
    "auto_topology",
    "eligible_faults",
    "make_nemesis",
    "registered",
    "schedule",
    "soak_phases",
]

NS = 1_000_000_000
NAME = "nemesis"
TOPOLOGIES = ("plain", "links", "proxy", "lazyfs")

# Faults the nemesis never injects, whatever the topology, and why.
NEVER: dict[str, str] = {
    "none": "the control run: injects nothing",
    # It rewrites cluster.toml and its nodes come and go: not one to overlap with others.
    "membership": "changes the member set (and cluster.toml): runs alone",
    # It restarts its node twice, moves leadership and heals every cut when it wants to.
    "membership-uncommitted": "restarts, transfers leadership and heals itself: runs alone",
    # A second lost disk or a kill of the leader it waits for would be a loss it may not cause.
    "lost-disk": "stops every node and wipes one, on a schedule of its own: runs alone",
}


# ------------------------------------------------------------------------ fault choice


def auto_topology(only: Sequence[str] | None = None) -> str:
    """The topology the faults in ``only`` need, if they need exactly one besides plain;
    else links (iptables) if it works here, else proxy (Toxiproxy) if installed, else plain."""
    from statekeeper.chaos.faults import FAULTS

    wanted = {FAULTS[n].topology for n in only or () if n in FAULTS} - {"plain"}
    if len(wanted) == 1:
        return wanted.pop()
    by_topology = {cls.topology: cls for cls in FAULTS.values()}
    for topology in ("links", "proxy"):
        cls = by_topology.get(topology)
        if cls is not None and cls.available()[0]:
            return topology
    return "plain"


def _setup(cls: type[Fault]) -> str:
    """What a fault needs from the cluster's setup beyond its topology ("" = nothing):
    failpoints armed in every node's environment, raft / retention overrides, its own
    per-node environment or config (``chaos.faults``: failpoints, raft_settings,
    retention_settings, node_env, configure)."""
    needs = []
    if getattr(cls, "failpoints", None):
        needs.append("failpoints " + ", ".join(cls.failpoints))  # type: ignore[attr-defined]
    if getattr(cls, "raft_settings", None):
        needs.append("raft settings")
    if getattr(cls, "retention_settings", None):
        needs.append("retention settings")
    if getattr(cls, "lazyfs_namespace", "strict") != "strict":
        needs.append(f"LazyFS namespace {cls.lazyfs_namespace!r}")  # type: ignore[attr-defined]
    for hook in ("node_env", "configure"):
        mine, base = getattr(cls, hook, None), getattr(Fault, hook, None)
        if mine is not None and mine is not base:
            needs.append(f"its own {hook}()")
    return "; ".join(needs)


def eligible_faults(
    topology: str,
    nodes: int = 3,
    *,
    only: Sequence[str] | None = None,
    exclude: Sequence[str] = (),
) -> tuple[list[str], dict[str, str]]:
    """(fault names the nemesis may inject, {excluded name: why}), in registry order.

    ``only``: restrict to these names (each still has to be eligible); ``exclude``: drop
    these. Unknown names raise ``KeyError``.
    """
    from statekeeper.chaos.faults import FAULTS

    if topology not in TOPOLOGIES:
        raise ValueError(f"topology must be one of {TOPOLOGIES}, not {topology!r}")
    for name in [*(only or ()), *exclude]:
        if name not in FAULTS or name == NAME:
            raise KeyError(f"unknown fault {name!r}")
    allowed: list[str] = []
    skipped: dict[str, str] = {}
    for name, cls in FAULTS.items():
        if name == NAME:
            continue
        if name in NEVER:
            skipped[name] = NEVER[name]
        elif only is not None and name not in only:
            skipped[name] = "not in --only"
        elif name in exclude:
            skipped[name] = "in --exclude"
        elif _setup(cls):
            skipped[name] = (
                f"needs its own cluster setup ({_setup(cls)}), made once before the nodes "
                "start; the nemesis shares one plain setup between all its faults"
            )
        elif cls.topology not in ("plain", topology):
            skipped[name] = (
                f"needs the {cls.topology!r} cluster build; this soak's cluster is "
                f"built for {topology!r}"
            )
        elif (getattr(cls, "min_nodes", None) or 0) > nodes:
            skipped[name] = f"needs at least {cls.min_nodes} nodes"  # type: ignore[attr-defined]
        elif getattr(cls, "max_nodes", None) is not None and cls.max_nodes < nodes:  # type: ignore[attr-defined]
            skipped[name] = f"needs at most {cls.max_nodes} nodes"  # type: ignore[attr-defined]
        else:
            ok, why = cls.available()
            if ok:
                allowed.append(name)
            else:
                skipped[name] = f"not available here: {why}"
    return allowed, skipped


# ------------------------------------------------------------------------------ schedule


@dataclass(frozen=True)
class Step:
    """One planned fault: which, how long it is held, the quiet time after its heal."""

    index: int  # 1, 2, ...
    fault: str
    window: float  # seconds the fault is held (from when it took effect)
    quiet: float  # seconds from its heal to the next fault (at least until all are ready)
    seed: int  # seeds the fault's own choices (ctx.rng)


def schedule(
    faults: Sequence[str],
    seed: int,
    fault_time: tuple[float, float] = (3.0, 15.0),
    quiet_time: tuple[float, float] = (2.0, 10.0),
) -> Iterator[Step]:
    """The endless, seeded sequence of steps: a shuffled deck of ``faults``, reshuffled
    when used up (never the same fault twice in a row when there are two or more)."""
    if not faults:
        raise ValueError("no fault to schedule")
    for lo, hi in (fault_time, quiet_time):
        if not 0 <= lo <= hi:
            raise ValueError(f"bad time range {lo}..{hi}")
    rng = random.Random(f"statekeeper-nemesis:{seed}")
    deck: list[str] = []
    last: str | None = None
    index = 0
    while True:
        if not deck:
            deck = list(faults)
            rng.shuffle(deck)
            if len(deck) > 1 and deck[0] == last:
                deck[0], deck[-1] = deck[-1], deck[0]
        name = deck.pop(0)
        last = name
        index += 1
        yield Step(
            index=index,
            fault=name,
            window=round(rng.uniform(*fault_time), 2),
            quiet=round(rng.uniform(*quiet_time), 2),
            seed=rng.getrandbits(32),
        )


# -------------------------------------------------------------------------------- config


@dataclass(frozen=True)
class NemesisConfig:
    faults: tuple[str, ...]
    seed: int = 7
    topology: str = "plain"
    fault_time: tuple[float, float] = (3.0, 15.0)
    quiet_time: tuple[float, float] = (2.0, 10.0)
    # After a heal: how long every node may take to be ready before that counts as a failure.
    recover_timeout: float = 60.0
    # How long stop() waits for the thread (a rolling restart in progress takes a while).
    join_timeout: float = 240.0
    # No fault is started that could not be healed this long before the window ends.
    end_margin: float = 1.0
    excluded: dict[str, str] = field(default_factory=dict)  # for the report

    def describe(self) -> str:
        return (
            f"{len(self.faults)} faults ({', '.join(self.faults)}), held "
            f"{self.fault_time[0]:g}-{self.fault_time[1]:g} s, quiet "
            f"{self.quiet_time[0]:g}-{self.quiet_time[1]:g} s, seed {self.seed}, "
            f"{self.topology} topology"
        )


@dataclass
class StepRecord:
    """What happened to one step (times: time.monotonic_ns(), the history's clock)."""

    step: Step
    window: float  # as held: the planned one, cut short at the end of the soak
    begin_ns: int = 0  # start() called
    start_ns: int | None = None  # the fault took effect (its ctx.mark()), else begin_ns
    heal_ns: int | None = None  # heal begun (the window is over)
    stop_ns: int | None = None  # heal done
    description: str = ""
    start_error: str = ""
    heal_error: str = ""
    ready_s: float | None = None  # heal -> every node ready
    not_ready: str = ""  # why the cluster was not ready within recover_timeout
    crashed: list[str] = field(default_factory=list)  # nodes found not running

    @property
    def name(self) -> str:
        return self.step.fault


# ------------------------------------------------------------------------------- nemesis


class Nemesis(Fault):
    """Random faults in sequence for the fault window; see the module docstring.

    Use ``make_nemesis(config)`` for a class the runner can instantiate (``get_fault``
    calls it without arguments), or ``Nemesis(config)`` directly.
    """

    name = NAME
    kind = "nemesis"
    topology = "plain"
    description = "random faults one after another (a Jepsen-style nemesis) for the soak"
    config: ClassVar[NemesisConfig | None] = None
    last_instance: ClassVar[Nemesis | None] = None

    def __init__(self, config: NemesisConfig | None = None) -> None:
        cfg = config or type(self).config
        if cfg is None:
            raise FaultError("the nemesis needs a NemesisConfig (see make_nemesis)")
        self.cfg = cfg
        self.records: list[StepRecord] = []
        self.crashes: list[str] = []  # nodes found not running while no fault was in effect
        self.error: BaseException | None = None
        self.injected_ns: int | None = None
        self.end_ns: int | None = None
        self.phase = "idle"  # for progress lines: what the nemesis is doing now
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._current: tuple[Fault, FaultContext, StepRecord] | None = None
        self._ctx: FaultContext | None = None
        self._stopped = False
        type(self).last_instance = self

    # -- Fault interface ---------------------------------------------------------------

    @classmethod
    def available(cls) -> tuple[bool, str]:
        ok, why = super().available()
        if not ok:
            return ok, why
        if cls.config is not None and not cls.config.faults:
            return False, "no fault is eligible for the nemesis here"
        return True, ""

    def allows_loss(self, fsync: str) -> bool:
        return any(get_fault(r.name).allows_loss(fsync) for r in self.records)

    def start(self, ctx: FaultContext) -> str:
        if self._thread is not None:
            raise FaultError("the nemesis was already started")
        self._ctx = ctx
        ctx.mark()
        self.injected_ns = ctx.injected_ns
        assert self.injected_ns is not None
        self.end_ns = self.injected_ns + int(ctx.window * NS)
        self._thread = threading.Thread(target=self._loop, name="chaos-nemesis", daemon=True)
        self._thread.start()
        return f"nemesis for {ctx.window:.0f} s: {self.cfg.describe()}"

    def stop(self, ctx: FaultContext) -> None:
        """Stop the thread, heal the fault in effect (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        self._stop_event.set()
        thread = self._thread
        if thread is not None:
            thread.join(self.cfg.join_timeout)
            if thread.is_alive():
                ctx.log(
                    f"nemesis: thread still busy after {self.cfg.join_timeout:.0f} s; "
                    "healing its fault from here"
                )
        self._heal_current(ctx.log)  # normally done by the thread already
        # Safety net: whatever a fault left in the network goes too.
        for net in (ctx.partitioner, ctx.proxies):
            if net is not None:
                with contextlib.suppress(Exception):
                    net.heal()
        self.phase = "stopped"
        if self.error is not None:
            raise FaultError(f"the nemesis thread failed: {self.error!r}") from self.error

    # -- the thread --------------------------------------------------------------------

    @property
    def current(self) -> StepRecord | None:
        cur = self._current
        return cur[2] if cur else None

    def label(self) -> str:
        """One short line for progress output: the fault in effect, or what is going on."""
        rec = self.current
        if rec is not None and rec.start_ns is not None:
            held = (time.monotonic_ns() - rec.start_ns) / NS
            return f"#{rec.step.index} {rec.name} {held:.0f}/{rec.window:.0f}s"
        if rec is not None:
            return f"#{rec.step.index} {rec.name} (starting)"
        return self.phase

    def _loop(self) -> None:
        ctx = self._ctx
        assert ctx is not None and self.end_ns is not None
        log = ctx.log
        min_window = self.cfg.fault_time[0]
        try:
            for step in schedule(
                self.cfg.faults, self.cfg.seed, self.cfg.fault_time, self.cfg.quiet_time
            ):
                if self._stop_event.is_set():
                    break
                left = (self.end_ns - time.monotonic_ns()) / NS - self.cfg.end_margin
                if left < max(min_window, 0.05):
                    self.phase = "done (no time left for another fault)"
                    break
                self._check_running(ctx, None, f"before #{step.index}")
                self._run_step(ctx, step, window=min(step.window, left))
                if self._stop_event.is_set() or not self.records:
                    break
                rec = self.records[-1]
                self._after_heal(ctx, rec)
                self.phase = f"quiet after #{rec.step.index} {rec.name}"
                assert rec.stop_ns is not None
                self._wait_until(rec.stop_ns + int(step.quiet * NS))
        except BaseException as e:  # noqa: BLE001 - surfaced by stop()
            self.error = e
            with contextlib.suppress(Exception):
                log(f"nemesis: thread failed: {e!r}")
        finally:
            self._heal_current(log)

    def _wait_until(self, deadline_ns: int) -> None:
        left = (deadline_ns - time.monotonic_ns()) / NS
        if left > 0:
            self._stop_event.wait(left)

    def _run_step(self, ctx: FaultContext, step: Step, window: float) -> None:
        fault = get_fault(step.fault)
        sub = dataclasses.replace(
            ctx, rng=random.Random(step.seed), window=window, injected_ns=None, notes={}
        )
        rec = StepRecord(step=step, window=window)
        with self._lock:
            if self._stop_event.is_set():
                return
            self._current = (fault, sub, rec)
            self.records.append(rec)
        rec.begin_ns = time.monotonic_ns()
        try:
            rec.description = fault.start(sub)
            ctx.log(f"nemesis #{step.index} start {step.fault}: {rec.description}")
        except Exception as e:  # noqa: BLE001 - logged, healed, counted; the soak goes on
            rec.start_error = f"{type(e).__name__}: {e}"
            ctx.log(f"nemesis #{step.index} {step.fault}: injection failed: {rec.start_error}")
        rec.start_ns = sub.injected_ns or rec.begin_ns
        self._wait_until(rec.start_ns + int(window * NS))
        self._heal_current(ctx.log)

    def _heal_current(self, log: Callable[[str], None]) -> None:
        with self._lock:
            cur, self._current = self._current, None
        if cur is None:
            return
        fault, sub, rec = cur
        self.phase = f"healing #{rec.step.index} {rec.name}"
        rec.heal_ns = time.monotonic_ns()
        try:
            fault.stop(sub)
            rec.stop_ns = time.monotonic_ns()
            held = (rec.heal_ns - (rec.start_ns or rec.begin_ns)) / NS
            log(
                f"nemesis #{rec.step.index} healed {rec.name} (held {held:.1f} s, healing "
                f"took {(rec.stop_ns - rec.heal_ns) / NS:.1f} s)"
            )
        except Exception as e:  # noqa: BLE001 - recorded (a FAIL verdict); go on
            rec.stop_ns = time.monotonic_ns()
            rec.heal_error = f"{type(e).__name__}: {e}"
            log(f"nemesis #{rec.step.index} healing {rec.name} failed: {rec.heal_error}")

    def _check_running(self, ctx: FaultContext, rec: StepRecord | None, when: str) -> None:
        """Nodes that are not running though no fault is in effect crashed by themselves:
        record that, and start them again so the soak goes on."""
        lc = ctx.cluster
        for nid in ctx.node_ids:
            if lc.is_running(nid):
                continue
            code = getattr(lc, "exit_codes", {}).get(nid)
            tail = ""
            with contextlib.suppress(Exception):
                tail = lc.log_tail(nid, 8)
            what = f"{nid} (exit code {code})" if code is not None else nid
            self.crashes.append(f"{what} {when}")
            target = rec or (self.records[-1] if self.records else None)
            if target is not None:
                target.crashed.append(f"{what} {when}")
            ctx.log(
                f"nemesis: {what} is not running {when} (crashed by itself); restarting it"
                + (f"; log tail:\n{tail}" if tail else "")
            )
            try:
                ctx.restart(nid)
            except Exception as e:  # noqa: BLE001
                ctx.log(f"nemesis: could not restart {nid}: {e!r}")

    def _after_heal(self, ctx: FaultContext, rec: StepRecord) -> None:
        self._check_running(ctx, rec, f"after healing #{rec.step.index} {rec.name}")
        self.phase = f"recovering after #{rec.step.index} {rec.name}"
        assert rec.stop_ns is not None
        deadline = rec.stop_ns + int(self.cfg.recover_timeout * NS)
        pending = list(ctx.node_ids)
        while pending and not self._stop_event.is_set():
            pending = [nid for nid in pending if not ctx.cluster.is_ready(nid)]
            if not pending:
                rec.ready_s = (time.monotonic_ns() - rec.stop_ns) / NS
                return
            if time.monotonic_ns() >= deadline:
                rec.not_ready = (
                    f"{', '.join(pending)} not ready {self.cfg.recover_timeout:.0f} s after "
                    "the heal"
                )
                ctx.log(f"nemesis #{rec.step.index}: {rec.not_ready}")
                return
            self._stop_event.wait(0.25)


def make_nemesis(config: NemesisConfig) -> type[Nemesis]:
    """A Nemesis class bound to ``config`` (and its topology), for ``get_fault``."""
    return type("ConfiguredNemesis", (Nemesis,), {"config": config, "topology": config.topology})


@contextlib.contextmanager
def registered(cls: type[Fault]) -> Iterator[None]:
    """``cls`` in ``chaos.faults.FAULTS`` for the duration of the block only."""
    registry = _faults.FAULTS
    had, previous = cls.name in registry, registry.get(cls.name)
    registry[cls.name] = cls
    try:
        yield
    finally:
        if had:
            registry[cls.name] = previous  # type: ignore[assignment]
        else:
            registry.pop(cls.name, None)


# --------------------------------------------------------------------------- soak phases


def soak_phases(
    minutes: float, fault_time: tuple[float, float] = (3.0, 15.0)
) -> tuple[float, float, float]:
    """(duration, warmup, fault window) in seconds for a soak of ``minutes``: a short warmup
    (5%, 3-15 s) and recovery (10%, 8-30 s) around one long nemesis window."""
    if not math.isfinite(minutes) or minutes <= 0:
        raise ValueError("--minutes must be > 0")
    duration = minutes * 60.0
    warmup = min(15.0, max(3.0, 0.05 * duration))
    recovery = min(30.0, max(8.0, 0.10 * duration))
    window = duration - warmup - recovery
    if window < fault_time[0] + 2.0:
        need = (warmup + recovery + fault_time[0] + 2.0) / 60.0
        raise ValueError(
            f"--minutes {minutes:g} leaves {window:.0f} s for faults; use at least {need:.2f}"
        )
    return duration, warmup, window
