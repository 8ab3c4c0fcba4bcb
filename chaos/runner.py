"""Run one chaos scenario (or a suite of them) against a fresh local cluster.

One run::

    fresh cluster (temp dir; per-link addresses / proxies / LazyFS as the fault needs)
    -> watchers start on the kv keys' prefix (chaos.watch_workload; watch.jsonl), and the
       lockers (chaos.lock_workload: fenced writes to one key under one lock), and the
       CRDT clients (chaos.crdt_workload: counter replicas synced through the fault)
    -> workload starts (history.jsonl in the report dir)
    -> warmup -> fault start ... fault window ... heal -> recovery
    -> workload stops -> every node running and ready -> final linearizable read of
       every key and of every event stream, the CRDT replicas' final syncs (recorded in
       the history too) -> replicas
       converge: once every node reports the same applied index, each node's
       serializable read of the whole namespace must be identical (chaos.convergence);
       each node's copy of the streams is read -> the prefix's change history is read
       back (chaos.watch_reads), the watchers catch up and stop; so is the lock key's
       -> the fault's own checks
    -> cluster torn down -> checks (linearizability, lost acknowledged writes, duplicate
       applications, reads that contradict the acknowledged writes, event streams:
       chaos.checker.streams, watch: chaos.checker.watch, locks: chaos.checker.locks,
       CRDTs: chaos.checker.crdt),
       metrics (RTO, throughput, errors, latency, ops per node) -> report.md + PNG

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
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from statekeeper.chaos.crdt_workload import finish_crdt, start_crdt
from statekeeper.chaos.faults import (
    SMOKE,
    CrashWatcher,
    Fault,
    FaultContext,
    FaultError,
    ProxyNet,
    exit_failpoints,
    fault_names,
    get_fault,
    start_cluster,
)
from statekeeper.chaos.final_reads import final_reads
from statekeeper.chaos.history import HistoryWriter
from statekeeper.chaos.lock_workload import finish_lockers, start_lockers
from statekeeper.chaos.report import (
    FAIL,
    PASS,
    RunResult,
    Verdict,
    format_verdicts,
    render_summary,
    write_run_report,
    write_summary,
)
from statekeeper.chaos.run_checks import check_run, converge
from statekeeper.chaos.run_setup import (
    NS,
    Progress,
    Say,
    base_config,
    client_environment,
    report_options,
    sigterm_as_interrupt,
    sleep_until,
    teardown,
    toxiproxy_url,
    with_tls,
    workload_token,
)
from statekeeper.chaos.stream_reads import read_stream_copies, run_final_streams
from statekeeper.chaos.watch_workload import finish_watchers, start_watchers
from statekeeper.chaos.workload import Workload
from statekeeper.chaos.workload_config import WorkloadConfig
from statekeeper.cluster.supervisor import LocalCluster, SupervisorError
from statekeeper.node import config as node_config
from statekeeper.node.config import FSYNC_MODES

__all__ = ["RunOptions", "default_report_dir", "run_scenario", "run_suite"]


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
    stream_share: float = 0.15  # share of the ops that are stream ops (0: no streams)
    watchers: int = 2  # watchers on the kv keys through the run (0: no watch check)
    lockers: int = 3  # lockers doing fenced writes through the run (0: no lock check)
    crdt_clients: int = 2  # counter replicas synced through the run (0: no CRDT check)
    warmup: float | None = None  # default: 20% of duration, at least 2 s
    fault_window: float | None = None  # default: 35% of duration, at least 3 s
    report_dir: Path | None = None
    debug_unsafe_reads: bool = False
    debug_watch_drop: bool = False  # MUTATION: watcher w0 loses one delivered event
    debug_lock_unfenced: bool = False  # MUTATION: the lockers' writes carry no fence
    debug_crdt_reuse_id: bool = False  # MUTATION: a CRDT replica restarts without its state
    check_time_limit: float = 120.0
    # Seconds one op may keep retrying (same idempotency key) before its outcome is
    # recorded; 0: one attempt per op, so the error rate shows every failed attempt.
    op_deadline: float = 8.0
    think_time: float = 0.0  # seconds each client waits between two ops
    keep_data: bool = False
    verbose: bool = False
    progress_interval: float = 1.0
    # "subprocess": our Toxiproxy server in its own process (clean timings, no GIL
    # sharing with the workload); "in-process": in a thread of this one. $TOXIPROXY_URL
    # (a real Toxiproxy) wins over both.
    toxiproxy: str = "subprocess"
    tls: bool = False  # HTTPS and raft TLS, from a CA made for the run
    auth: bool = False  # [auth] on; the clients use a writer token of every namespace

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
        if not 0 <= self.stream_share <= 1:
            raise ValueError("--stream-share must be within [0, 1]")
        if self.watchers < 0 or (self.debug_watch_drop and not self.watchers):
            raise ValueError("--watchers must be >= 0 (and >= 1 with --debug-watch-drop)")
        if self.lockers < 0 or (self.debug_lock_unfenced and self.lockers < 2):
            raise ValueError("--lockers must be >= 0 (and >= 2 with --debug-lock-unfenced)")
        if self.crdt_clients < 0 or (self.debug_crdt_reuse_id and not self.crdt_clients):
            raise ValueError("--crdt-clients must be >= 0 (and >= 1 with --debug-crdt-reuse-id)")
        self.phases()


def default_report_dir(fault: str, root: Path = Path("chaos-reports")) -> Path:
    return root / f"{time.strftime('%Y%m%d-%H%M%S')}-{fault}"


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
        options=report_options(opts, fault, warmup, window),
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
        + (", WATCHER DROPS AN EVENT (mutation)" if opts.debug_watch_drop else "")
        + (", UNFENCED LOCK WRITES (mutation)" if opts.debug_lock_unfenced else "")
        + (", CRDT REPLICA ID REUSED (mutation)" if opts.debug_crdt_reuse_id else "")
        + f"\n   report: {report_dir}"
    )
    report_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"sk-chaos-{opts.fault}-"))
    say(f"   cluster data: {work}")
    try:
        with sigterm_as_interrupt():
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
            from statekeeper.chaos.lazyfs import LazyFS

            backing, mount = work / "backing", work / "mnt"
            backing.mkdir()
            mount.mkdir()
            lazyfs = stack.enter_context(
                LazyFS(
                    backing,
                    mount,
                    log_path=work / "lazyfs.log",
                    namespace=type(fault).lazyfs_namespace,
                )
            )
            data_dir = mount / "data"
        elif topology == "smallfs":  # a size-limited tmpfs (the disk-full fault)
            from statekeeper.chaos.smallfs import SmallFs

            data_dir = stack.enter_context(SmallFs(work / "smallfs", fault.fs_bytes)) / "data"
        cfg = fault.configure(base_config(opts, data_dir))
        if opts.auth:
            cfg = dataclasses.replace(cfg, auth=node_config.AuthSettings(enabled=True))
        if opts.tls:
            cfg = with_tls(cfg, work)
            ca = work / cfg.tls.ca_file
            stack.enter_context(client_environment({"STATEKEEPER_CA_FILE": str(ca)}))
        endpoints = cfg.http_urls()
        if topology == "links":
            from statekeeper.chaos.partition import Partitioner, with_link_addresses

            cfg = with_link_addresses(cfg)
            partitioner = stack.enter_context(Partitioner(cfg))
        elif topology == "proxy":
            url = stack.enter_context(toxiproxy_url(opts.toxiproxy, say))
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
            endpoints = proxies.client_urls(cfg.scheme)
        node_config.validate(cfg)
        cfg_path = work / "cluster.toml"
        node_config.write(cfg, cfg_path)
        cfg = node_config.load(cfg_path)
        command = [sys.executable, "-m", "statekeeper.node"]
        if opts.debug_unsafe_reads:
            command.append("--unsafe-reads")
        lc = LocalCluster(
            cfg,
            cfg_path,
            node_command=command,
            progress=cluster_say,
            node_env=fault.node_env(cfg, work),
        )
        stack.callback(teardown, lc, report_dir, result)
        say(f"   starting {opts.nodes} nodes ({topology} topology) ...")
        watcher = None
        if fault.failpoints:
            # Started before the cluster (a node may hit a failpoint while the others are
            # still starting); stopped before the teardown (LIFO) kills the nodes.
            watcher = CrashWatcher(lc, log=event).start()
            stack.callback(watcher.stop)
        start_cluster(lc, watcher)
        if opts.auth:
            token = workload_token(lc)
            stack.enter_context(client_environment({"STATEKEEPER_TOKEN": token}))

        # -- workload, fault, heal
        history = HistoryWriter(history_path)
        stack.callback(history.close)
        wcfg = WorkloadConfig(
            clients=opts.clients,
            keys=opts.keys,
            seed=opts.seed,
            op_deadline=opts.op_deadline,
            think_time=opts.think_time,
            **{
                "stream_share": opts.stream_share,
                "watchers": opts.watchers,
                "watch_drop": 50 if opts.debug_watch_drop else 0,
                "lockers": opts.lockers,
                "lock_unfenced": opts.debug_lock_unfenced,
                "crdt_clients": opts.crdt_clients,
                "crdt_reuse_id": opts.debug_crdt_reuse_id,
                **fault.workload_settings,
            },
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
        # The node the fault will hit, chosen now (kept by ctx for the fault's own pick) so
        # that a watcher starts on it and the fault exercises its resume.
        try:
            target = ctx.plan(type(fault).watch_target) if opts.watchers else None
        except FaultError as e:
            say(f"   no fault target planned for the watchers: {e}")
            target = None
        watchers = start_watchers(endpoints, [n.id for n in cfg.nodes], wcfg, say, target)
        if watchers is not None:
            stack.callback(watchers.stop)
        lockers = start_lockers(endpoints, history, wcfg, opts.clients + 1, say)
        if lockers is not None:
            stack.callback(lockers.stop)
        crdt = start_crdt(endpoints, history, wcfg, opts.clients + 1 + opts.lockers, say, run_id)
        if crdt is not None:
            stack.callback(crdt.stop)
        t0 = time.monotonic_ns()
        workload.start()
        progress = Progress(workload, t0, opts.progress_interval, say, watchers)
        progress.start()
        stack.callback(progress.stop)
        fault_start = heal = None
        started = healed = False
        try:
            sleep_until(t0 + int(warmup * NS))
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
            sleep_until(fault_start + int(window * NS))
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
            sleep_until(max(t0 + int(opts.duration * NS), heal + int(recovery * NS)))
        finally:
            if started and not healed:
                with contextlib.suppress(Exception):
                    fault.stop(ctx)
                    event("healed (after an error or interrupt)")
            progress.phase = "stopping the workload"
            workload.stop()
            if lockers is not None:
                lockers.stop()
            if crdt is not None:
                crdt.halt()
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
        streams = run_final_streams(cfg, wcfg, history, opts.clients)
        crdt_run = finish_crdt(crdt, wcfg, event)
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
        replica_reads = converge(cfg, wcfg.ns, result, event)
        if streams is not None:
            read_stream_copies(cfg, wcfg.ns, streams, event)
        watch = finish_watchers(watchers, cfg.http_urls(), wcfg, report_dir, result, event)
        locks = finish_lockers(lockers, cfg.http_urls(), wcfg, event)
        for v in fault.verify(ctx):
            result.verdicts.append(v)
        if watcher is not None:
            watcher.poll()
            if exit_failpoints(fault.failpoints):
                result.verdicts.append(watcher.verdict(exit_failpoints(fault.failpoints)))
            result.crashes = dict(watcher.crashes)
    # The cluster is down now: the CPU is the checker's.
    check_run(
        opts, fault, result, history_path, values, revisions, t0, end, fault_start, heal, say,
        replica_reads, [n.id for n in cfg.nodes], streams=streams, watch=watch, locks=locks,
        crdt=crdt_run, restarts=watcher.restart_times if watcher is not None else None,
    )


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
