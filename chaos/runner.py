"""Run one chaos scenario (or a suite of them) against a fresh local cluster.

One run::

    fresh cluster (temp dir; per-link addresses / proxies / LazyFS as the fault needs)
    -> workload starts (history.jsonl in the report dir)
    -> warmup -> fault start ... fault window ... heal -> recovery
    -> workload stops -> every node running and ready -> final linearizable read of
       every key (recorded in the history too) -> replicas converge: once every node
       reports the same applied index, each node's serializable read of the whole
       namespace must be identical (chaos.convergence) -> the fault's own checks
    -> cluster torn down -> checks (linearizability, lost acknowledged writes, duplicate
       applications, reads that contradict the acknowledged writes), metrics (RTO,
       throughput, errors, latency, ops per node) -> report.md + PNG

A fault may ask for more nodes, other raft / retention settings (tiny snapshot
thresholds), failpoints or per-node environment (chaos.faults); with failpoints, a
CrashWatcher restarts nodes that exit at one for the whole run and the report counts
the crashes per failpoint.

Everything that changes the machine (iptables rules, proxies, paused or running nodes,
the LazyFS mount) is undone in ``finally`` blocks, also on Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos import checker
from chaos.convergence import (
    compare_replicas,
    idle_nodes,
    read_replicas,
    revision_conflicts,
    served_by,
)
from chaos.faults import (
    SMOKE,
    CrashWatcher,
    Fault,
    FaultContext,
    ProxyNet,
    exit_failpoints,
    failpoint_spec,
    fault_names,
    get_fault,
)
from chaos.history import HistoryWriter, read_history
from chaos.report import (
    ALLOWED,
    FAIL,
    INFO,
    PASS,
    UNKNOWN,
    RunResult,
    Verdict,
    compute_metrics,
    format_verdicts,
    render_summary,
    revision_regressions,
    write_run_report,
    write_summary,
)
from chaos.workload import Workload, WorkloadConfig, final_reads
from cluster.ports import free_ports
from cluster.supervisor import LocalCluster, SupervisorError
from node import config as node_config
from node.config import FSYNC_MODES, ClusterConfig, NodeConfig

__all__ = ["RunOptions", "default_report_dir", "run_scenario", "run_suite"]

Say = Callable[[str], None]
NS = 1_000_000_000
# A node must answer writes and linearizable reads again for ops invoked this long after
# the heal (restarts, elections and catch-up by snapshot take less).
EVERY_NODE_GRACE_S = 3.0
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def _say(msg: str) -> None:
    print(msg, flush=True)


@dataclass
class RunOptions:
    """Options of one run (the CLI flags)."""

    fault: str = "none"
    duration: float = 30.0  # seconds of workload, at least
    clients: int = 16
    seed: int = 7
    fsync: str = "always"
    nodes: int = 3
    keys: int = 8
    warmup: float | None = None  # default: 20% of duration, at least 2 s
    fault_window: float | None = None  # default: 35% of duration, at least 3 s
    report_dir: Path | None = None
    debug_unsafe_reads: bool = False
    check_time_limit: float = 120.0
    # Seconds one op may keep retrying (same idempotency key) before its outcome is
    # recorded; 0: one attempt per op, so the error rate shows every failed attempt.
    op_deadline: float = 8.0
    keep_data: bool = False
    verbose: bool = False
    progress_interval: float = 1.0
    # "subprocess": our Toxiproxy server in its own process (clean timings, no GIL
    # sharing with the workload); "in-process": in a thread of this one. $TOXIPROXY_URL
    # (a real Toxiproxy) wins over both.
    toxiproxy: str = "subprocess"

    def phases(self) -> tuple[float, float, float]:
        """(warmup, fault window, recovery) in seconds."""
        warmup = self.warmup if self.warmup is not None else max(2.0, 0.2 * self.duration)
        window = (
            self.fault_window if self.fault_window is not None else max(3.0, 0.35 * self.duration)
        )
        recovery = self.duration - warmup - window
        if recovery < 2.0:
            raise ValueError(
                f"--duration {self.duration:g} leaves {recovery:.1f} s after warmup "
                f"{warmup:g} s and fault window {window:g} s; need at least 2 s"
            )
        return warmup, window, recovery

    def validate(self) -> None:
        if self.fsync not in FSYNC_MODES:
            raise ValueError(f"fsync must be one of {FSYNC_MODES}")
        if self.clients < 1:
            raise ValueError("--clients must be >= 1")
        if self.nodes < 3:
            raise ValueError("--nodes must be >= 3 (faults need a majority to survive)")
        if self.op_deadline < 0:
            raise ValueError("--op-deadline must be >= 0")
        if self.keys < 2 or self.keys % 2:
            raise ValueError("--keys must be an even number >= 2")
        self.phases()


def default_report_dir(fault: str, root: Path = Path("chaos-reports")) -> Path:
    return root / f"{time.strftime('%Y%m%d-%H%M%S')}-{fault}"


# ------------------------------------------------------------------------ cluster setup


def _base_config(opts: RunOptions, data_dir: Path) -> ClusterConfig:
    ports = free_ports(2 * opts.nodes)
    nodes = tuple(
        NodeConfig(
            id=f"node-{i}", host="127.0.0.1", http_port=ports[2 * i], raft_port=ports[2 * i + 1]
        )
        for i in range(opts.nodes)
    )
    base = node_config.local_cluster(size=opts.nodes, fsync=opts.fsync)
    # Writes answer "timeout" after 2 s (not 5): ops retry sooner, runs stay short.
    raft = dataclasses.replace(base.raft, request_timeout=2.0)
    return dataclasses.replace(base, nodes=nodes, data_dir=str(data_dir), raft=raft, name="chaos")


@contextlib.contextmanager
def _toxiproxy(mode: str, say: Say) -> Iterator[str]:
    """The URL of the Toxiproxy API to use for this run."""
    external = os.environ.get("TOXIPROXY_URL")
    if external:
        say(f"using the Toxiproxy at {external} (TOXIPROXY_URL)")
        yield external.rstrip("/")
        return
    if mode == "in-process":
        from chaos.toxiproxy import ToxiproxyServer

        with ToxiproxyServer() as server:
            yield server.url
        return
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if p
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "chaos.toxiproxy", "--port", "0", "--log-level", "WARNING"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env=env,
        text=True,
        start_new_session=True,  # a Ctrl-C is handled by us, then we stop it
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if "http://" not in line:
            raise RuntimeError(f"the Toxiproxy server did not start: {line!r}")
        yield line.strip().rsplit(" ", 1)[-1]
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class _Progress(threading.Thread):
    """Prints one line per interval: phase, op counts (total and in the last interval)."""

    def __init__(self, workload: Workload, t0: int, interval: float, say: Say) -> None:
        super().__init__(name="chaos-progress", daemon=True)
        self.workload, self.t0, self.interval, self.say = workload, t0, interval, say
        self.phase = "warmup"
        self._stop_event = threading.Event()

    def run(self) -> None:
        last = (0, 0, 0)
        while not self._stop_event.wait(self.interval):
            c = self.workload.counters
            now = (c.ok, c.fail, c.info)
            d = [a - b for a, b in zip(now, last, strict=True)]
            last = now
            t = (time.monotonic_ns() - self.t0) / NS
            self.say(
                f"  [{t:6.1f}s] {self.phase:<34.34} ok {now[0]:>6} fail {now[1]:>5} "
                f"unknown {now[2]:>5} | last {self.interval:g}s: +{d[0]} ok, +{d[1]} fail, "
                f"+{d[2]} unknown"
            )

    def stop(self) -> None:
        self._stop_event.set()


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt, so the same cleanup runs as for Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _sleep_until(deadline_ns: int) -> None:
    while True:
        left = (deadline_ns - time.monotonic_ns()) / NS
        if left <= 0:
            return
        time.sleep(min(left, 0.2))


# ------------------------------------------------------------------------------ one run


def run_scenario(opts: RunOptions, say: Say = _say) -> RunResult:
    """Run one scenario end to end; returns its result (the report is written)."""
    fault: Fault = get_fault(opts.fault)
    if opts.nodes < fault.min_nodes:  # e.g. deposed-leader-snapshot needs 5
        opts = dataclasses.replace(opts, nodes=fault.min_nodes)
    opts.validate()
    report_dir = Path(opts.report_dir or default_report_dir(opts.fault)).resolve()
    warmup, window, recovery = opts.phases()
    result = RunResult(
        fault=opts.fault,
        description=type(fault).description,
        started_at=time.strftime("%Y-%m-%d %H:%M:%S"),
        options={
            "duration": opts.duration,
            "clients": opts.clients,
            "seed": opts.seed,
            "fsync": opts.fsync,
            "nodes": opts.nodes,
            "keys": opts.keys,
            "warmup": warmup,
            "fault_window": window,
            "op_deadline": opts.op_deadline,
            "debug_unsafe_reads": opts.debug_unsafe_reads,
            **({"failpoints": failpoint_spec(fault.failpoints)} if fault.failpoints else {}),
            **({"raft": fault.raft_settings} if fault.raft_settings else {}),
            **({"retention": fault.retention_settings} if fault.retention_settings else {}),
            **({"workload": fault.workload_settings} if fault.workload_settings else {}),
        },
    )
    ok, why = type(fault).available()
    if not ok:
        result.status, result.reason = "skipped", why
        say(f"SKIPPED {opts.fault}: {why}")
        write_run_report(result, report_dir)
        return result

    started = time.monotonic()
    say(
        f"== chaos run: {opts.fault} ({type(fault).description})\n"
        f"   duration {opts.duration:g} s (warmup {warmup:g}, fault {window:g}, recovery "
        f"{recovery:g}), {opts.clients} clients, seed {opts.seed}, fsync={opts.fsync}"
        + (", UNSAFE READS (mutation)" if opts.debug_unsafe_reads else "")
        + f"\n   report: {report_dir}"
    )
    report_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"sk-chaos-{opts.fault}-"))
    say(f"   cluster data: {work}")
    try:
        with _sigterm_as_interrupt():
            _run(opts, fault, result, report_dir, work, say)
    finally:
        if not opts.keep_data:
            shutil.rmtree(work, ignore_errors=True)
        else:
            say(f"   cluster data kept in {work}")
    result.elapsed_s = time.monotonic() - started
    result.settle()
    write_run_report(result, report_dir)
    say(format_verdicts(result))
    say(f"== {opts.fault}: {result.status.upper()}  (report: {report_dir / 'report.md'})")
    return result


def _run(
    opts: RunOptions, fault: Fault, result: RunResult, report_dir: Path, work: Path, say: Say
) -> None:
    rng = random.Random(opts.seed)
    run_id = uuid.uuid4().hex[:8]
    warmup, window, recovery = opts.phases()
    cluster_say: Say = (lambda m: say(f"     cluster: {m}")) if opts.verbose else (lambda m: None)
    history_path = report_dir / "history.jsonl"
    history_path.unlink(missing_ok=True)
    result.files["history"] = "history.jsonl"
    t0 = time.monotonic_ns()  # reset when the workload starts

    def event(msg: str) -> None:
        t = (time.monotonic_ns() - t0) / NS
        result.events.append((round(t, 3), msg))
        say(f"  [{t:6.1f}s] >> {msg}")

    with ExitStack() as stack:
        # -- the cluster, built the way the fault needs it
        topology = type(fault).topology
        data_dir = work / "data"
        lazyfs = partitioner = proxies = None
        if topology == "lazyfs":
            from chaos.lazyfs import LazyFS

            backing, mount = work / "backing", work / "mnt"
            backing.mkdir()
            mount.mkdir()
            lazyfs = stack.enter_context(LazyFS(backing, mount, log_path=work / "lazyfs.log"))
            data_dir = mount / "data"
        cfg = fault.configure(_base_config(opts, data_dir))
        endpoints = cfg.http_urls()
        if topology == "links":
            from chaos.partition import Partitioner, with_link_addresses

            cfg = with_link_addresses(cfg)
            partitioner = stack.enter_context(Partitioner(cfg))
        elif topology == "proxy":
            url = stack.enter_context(_toxiproxy(opts.toxiproxy, say))
            proxies = ProxyNet(url, prefix=f"sk-{run_id}")
            stack.callback(proxies.close)
            proxies.setup(
                [n.raft_address for n in cfg.nodes], [f"{n.host}:{n.http_port}" for n in cfg.nodes]
            )
            ids = [n.id for n in cfg.nodes]
            cfg = dataclasses.replace(
                cfg,
                nodes=tuple(
                    dataclasses.replace(n, raft_dial=proxies.raft_dial(i, ids))
                    for i, n in enumerate(cfg.nodes)
                ),
            )
            endpoints = proxies.client_urls()
        node_config.validate(cfg)
        cfg_path = work / "cluster.toml"
        node_config.write(cfg, cfg_path)
        cfg = node_config.load(cfg_path)
        command = [sys.executable, "-m", "node"]
        if opts.debug_unsafe_reads:
            command.append("--unsafe-reads")
        lc = LocalCluster(
            cfg,
            cfg_path,
            node_command=command,
            progress=cluster_say,
            node_env=fault.node_env(cfg, work),
        )
        stack.callback(_teardown, lc, report_dir, result)
        say(f"   starting {opts.nodes} nodes ({topology} topology) ...")
        lc.up(timeout=90.0)
        watcher = None
        if fault.failpoints:
            # Stopped before the teardown (LIFO) kills the nodes.
            watcher = CrashWatcher(lc, log=event).start()
            stack.callback(watcher.stop)

        # -- workload, fault, heal
        history = HistoryWriter(history_path)
        stack.callback(history.close)
        wcfg = WorkloadConfig(
            clients=opts.clients,
            keys=opts.keys,
            seed=opts.seed,
            op_deadline=opts.op_deadline,
            **fault.workload_settings,
        )
        workload = Workload(
            endpoints, history, wcfg, run_id=run_id, node_ids=[n.id for n in cfg.nodes]
        )
        ctx = FaultContext(
            cluster=lc,
            rng=rng,
            log=event,
            window=window,
            proxies=proxies,
            partitioner=partitioner,
            lazyfs=lazyfs,
            watcher=watcher,
        )
        t0 = time.monotonic_ns()
        workload.start()
        progress = _Progress(workload, t0, opts.progress_interval, say)
        progress.start()
        stack.callback(progress.stop)
        fault_start = heal = None
        started = healed = False
        try:
            _sleep_until(t0 + int(warmup * NS))
            progress.phase = f"FAULT {fault.name}"
            begin = time.monotonic_ns()
            started = True
            try:
                event(f"fault start: {fault.start(ctx)}")
            except Exception as e:  # noqa: BLE001 - reported, then healed and checked
                event(f"fault injection failed: {e!r}")
                result.status, result.reason = "error", f"fault injection failed: {e}"
            # The fault's own mark (it in effect), not when we began looking for a leader.
            fault_start = ctx.injected_ns or begin
            _sleep_until(fault_start + int(window * NS))
            progress.phase = "healing"
            try:
                fault.stop(ctx)
                event("healed")
            except Exception as e:  # noqa: BLE001 - reported; the checks still run
                event(f"healing failed: {e!r}")
                result.status, result.reason = "error", f"healing failed: {e}"
            healed = True
            heal = time.monotonic_ns()
            progress.phase = "recovery"
            _sleep_until(max(t0 + int(opts.duration * NS), heal + int(recovery * NS)))
        finally:
            if started and not healed:
                with contextlib.suppress(Exception):
                    fault.stop(ctx)
                    event("healed (after an error or interrupt)")
            progress.phase = "stopping the workload"
            workload.stop()
            end = time.monotonic_ns()
            progress.stop()
        result.error_codes = dict(workload.errors)
        if fault_start and heal:
            result.fault_window = ((fault_start - t0) / NS, (heal - t0) / NS)
        event(
            f"workload stopped: {workload.counters.ok} ok, {workload.counters.fail} fail, "
            f"{workload.counters.info} unknown"
        )

        # -- every node up and ready, then the final reads
        if watcher is not None:
            watcher.settle(15.0)  # failpoint crashes are restarted, not "crashed"
        crashed = []
        for nid in lc.node_ids:
            if not lc.is_running(nid):
                crashed.append(nid)
                event(f"{nid} is not running after the heal: log tail:\n{lc.log_tail(nid, 15)}")
                lc.start_node(nid)
        unexpected = watcher.unexpected if watcher is not None else []
        details = [f"not running after the heal: {', '.join(crashed)}"] if crashed else []
        details += [f"{n} exited with status {c} during the run" for n, c in unexpected]
        result.verdicts.append(
            Verdict(
                "no node crashed",
                FAIL if crashed or unexpected else PASS,
                f"{len(lc.node_ids) - len(crashed)}/{len(lc.node_ids)} running",
                "; ".join(details),
            )
        )
        try:
            took = lc.wait_ready(None, timeout=60.0)
            ready = f"all nodes ready {took:.1f} s after the workload stopped"
        except SupervisorError as e:
            ready = f"not every node became ready: {e}"
        event(ready)
        values, revisions, missing = final_reads(
            cfg.http_urls(), wcfg.key_names(), history=history, process=opts.clients, ns=wcfg.ns
        )
        history.close()
        event(f"final reads: {len(values)}/{len(wcfg.key_names())} keys")
        result.verdicts.append(
            Verdict(
                "final read of every key",
                FAIL if missing else PASS,
                f"{len(values)}/{len(wcfg.key_names())} keys",
                f"unreadable: {', '.join(missing)}; {ready}" if missing else "",
            )
        )
        replica_reads = _converge(cfg, wcfg.ns, result, event)
        for v in fault.verify(ctx):
            result.verdicts.append(v)
        if watcher is not None:
            watcher.poll()
            if exit_failpoints(fault.failpoints):
                result.verdicts.append(watcher.verdict(exit_failpoints(fault.failpoints)))
            result.crashes = dict(watcher.crashes)
    # The cluster is down now: the CPU is the checker's.
    _check(
        opts, fault, result, history_path, values, revisions, t0, end, fault_start, heal, say,
        replica_reads, [n.id for n in cfg.nodes],
    )


def _converge(
    cfg: ClusterConfig, ns: str, result: RunResult, event: Say
) -> list[tuple[str, Any, int, str]]:
    """The "replicas converge" verdict; returns every kv read, for the revision check."""
    urls = {n.id: n.http_url for n in cfg.nodes}
    states, waited = read_replicas(urls, ns, timeout=20.0)
    conv = compare_replicas(states)
    event(
        f"replicas: {'identical' if conv.ok else 'DIFFER'} ({conv.keys} keys; {conv.positions}; "
        f"waited {waited:.1f} s for equal positions)"
    )
    result.replica_diffs = conv.problems + [d.describe() for d in conv.diffs[:50]]
    detail = "; ".join(conv.problems)
    if conv.diffs:
        shown = ", ".join(d.key for d in conv.diffs[:10])
        more = f" and {len(conv.diffs) - 10} more" if len(conv.diffs) > 10 else ""
        detail = (detail + "; " if detail else "") + f"keys differ: {shown}{more}"
    result.verdicts.append(
        Verdict(
            "replicas converge",
            PASS if conv.ok else FAIL,
            f"{len(states)} nodes, {conv.keys} keys"
            + ("" if conv.ok else f", {len(conv.diffs)} differ"),
            detail or conv.positions,
        )
    )
    return [
        (key, kv[0], kv[3], f"convergence read on {s.node}")
        for s in states
        for key, kv in (s.kvs or {}).items()
    ]


def _teardown(lc: LocalCluster, report_dir: Path, result: RunResult) -> None:
    """Stop every node (SIGKILL: a resumed paused node included) and keep their logs."""
    for nid in lc.node_ids:
        with contextlib.suppress(Exception):
            lc.resume_node(nid)
    with contextlib.suppress(Exception):
        lc.kill_all()
    logs = report_dir / "logs"
    logs.mkdir(exist_ok=True)
    for nid in lc.node_ids:
        with contextlib.suppress(OSError):
            shutil.copyfile(lc.log_file(nid), logs / f"{nid}.log")
            result.files[f"{nid} log"] = f"logs/{nid}.log"
    lc.close()


def _check(
    opts: RunOptions,
    fault: Fault,
    result: RunResult,
    history_path: Path,
    values: dict[str, Any],
    revisions: dict[str, int],
    t0: int,
    end: int,
    fault_start: int | None,
    heal: int | None,
    say: Say,
    replica_reads: Sequence[tuple[str, Any, int, str]] = (),
    node_ids: Sequence[str] = (),
) -> None:
    say("   checking the history ...")
    ops = read_history(history_path)
    allowed = fault.allows_loss(opts.fsync)
    lin = checker.check(ops, time_limit=opts.check_time_limit)
    result.checker_report = lin.report()
    st = lin.stats
    if lin.valid is True:
        status, value = PASS, f"yes ({st['checked']} ops, {st['partitions']} partitions)"
    elif lin.valid is False:
        bad = sorted({k for p in lin.partitions if p.valid is False for k in p.keys})
        status, value = (ALLOWED if allowed else FAIL), f"NO: violation on {', '.join(bad)}"
    else:
        status, value = UNKNOWN, "unknown (checker ran out of time / memory)"
    result.verdicts.insert(
        0, Verdict("linearizable", status, value, f"checked in {st['elapsed']:.1f} s")
    )
    lost = checker.lost_writes(ops, values, final_revisions=revisions)
    result.lost = [f"{w.key}: {w.reason}" for w in lost[:50]]
    result.verdicts.insert(
        1,
        Verdict(
            "lost acknowledged writes",
            PASS if not lost else (ALLOWED if allowed else FAIL),
            str(len(lost)),
            "allowed by the contract: power loss with fsync=never" if lost and allowed else "",
        ),
    )
    dups = checker.duplicate_applications(ops, values, final_revisions=revisions)
    result.duplicates = [d.reason for d in dups[:50]]
    result.verdicts.insert(
        2, Verdict("duplicate applications", FAIL if dups else PASS, str(len(dups)))
    )
    regs = revision_regressions(ops)
    t_first = min((o.invoke_time for o in ops), default=t0)
    result.regressions = [
        f"#{g.op.id} {g.op.f} (p{g.op.process}, invoked at {(g.op.invoke_time - t_first) / NS:.2f} s) "
        f"answered at revision {g.revision}, but #{g.floor_op.id} had completed at revision "
        f"{g.floor} before it started"
        for g in regs[:20]
    ] + ([f"... and {len(regs) - 20} more"] if len(regs) > 20 else [])
    result.verdicts.insert(
        3,
        Verdict(
            "store revision never went back",
            PASS if not regs else (ALLOWED if allowed else FAIL),
            str(len(regs)),
            f"{len(regs)} ops saw an older revision than one already acknowledged" if regs else "",
        ),
    )
    conflicts = revision_conflicts(ops, replica_reads)
    result.divergent = conflicts
    result.verdicts.insert(
        4,
        Verdict(
            "reads agree with acknowledged writes",
            PASS if not conflicts else (ALLOWED if allowed else FAIL),
            str(len(conflicts)),
            "every kv read (any node, any consistency) is the write acknowledged at its "
            "mod_revision" if not conflicts else conflicts[0],
        ),
    )
    per_node = served_by(ops, exclude_processes=[opts.clients])
    result.verdicts.append(
        Verdict(
            "ops served per node",
            INFO,
            ", ".join(f"{n} {c['writes']}w/{c['reads']}r/{c['serializable']}s" for n, c in per_node.items())
            or "-",
            "ok writes / linearizable reads / serializable reads answered by each node",
        )
    )
    m = compute_metrics(
        ops, t0=t0, end=end, fault_start=fault_start, heal=heal, exclude_processes=[opts.clients]
    )
    result.metrics = m
    if heal is not None:
        recovered = m.recovery_write_s is not None and m.recovery_read_s is not None
        result.verdicts.append(
            Verdict(
                "serves again after the heal",
                PASS if recovered else FAIL,
                f"write after {_s(m.recovery_write_s)}, read after {_s(m.recovery_read_s)}",
                "" if recovered else "no ok write or read was invoked and completed after the heal",
            )
        )
        # Every node, not just the cluster: clients send a share of their ops to each.
        since = heal + int(EVERY_NODE_GRACE_S * NS)
        if end - since >= int(2 * NS):
            idle = idle_nodes(ops, node_ids, since, exclude_processes=[opts.clients])
            result.verdicts.append(
                Verdict(
                    "every node serves after the heal",
                    FAIL if idle else PASS,
                    f"{len(node_ids) - len(idle)}/{len(node_ids)} nodes",
                    "; ".join(f"{n} answered no ok {' or '.join(k)}" for n, k in idle.items())
                    + (f" for ops invoked {EVERY_NODE_GRACE_S:g} s or more after the heal"
                       if idle else ""),
                )
            )
    result.verdicts += [
        Verdict("RTO (first ok write)", INFO, _s(m.rto_write_s), "from fault start"),
        Verdict("RTO (first ok linearizable read)", INFO, _s(m.rto_read_s), "from fault start"),
        Verdict(
            "error rate",
            INFO,
            f"{100 * m.error_rate:.1f}% overall"
            + (
                f", {100 * m.fault_error_rate:.1f}% in the fault window"
                if m.fault_error_rate is not None
                else ""
            ),
            f"{m.ok} ok, {m.fail} fail, {m.info} unknown; {m.throughput_ok:.0f} ok ops/s",
        ),
    ]


def _s(x: float | None) -> str:
    return "never" if x is None else f"{x:.2f} s"


# ------------------------------------------------------------------------------ suite


def run_suite(
    names: Sequence[str] | None,
    base: RunOptions,
    *,
    smoke: bool = False,
    root: Path | None = None,
    say: Say = _say,
) -> tuple[list[RunResult], Path]:
    """Run several scenarios one after another; returns the results and summary.md."""
    if names is None:
        names = list(SMOKE) if smoke else fault_names()
    suite_dir = Path(
        root or Path("chaos-reports") / f"{time.strftime('%Y%m%d-%H%M%S')}-suite"
    ).resolve()
    suite_dir.mkdir(parents=True, exist_ok=True)
    results: list[RunResult] = []
    summary = suite_dir / "summary.md"
    for i, name in enumerate(names, 1):
        say(f"\n##### [{i}/{len(names)}] {name}")
        opts = dataclasses.replace(base, fault=name, report_dir=suite_dir / name)
        try:
            results.append(run_scenario(opts, say))
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001 - one broken scenario must not end the suite
            say(f"!! {name}: {e!r}")
            results.append(
                RunResult(
                    fault=name, status="error", reason=repr(e), report_dir=str(suite_dir / name)
                )
            )
        write_summary(results, summary)  # after each run: a partial suite is still useful
    say("\n" + render_summary(results, markdown=False))
    say(f"\nsummary: {summary}")
    return results, summary
