"""One statekeeper node process: state machine + raft + HTTP API."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import NoReturn

from prometheus_client import disable_created_metrics

from statekeeper.node import config as config_mod
from statekeeper.node import failpoints, fatal, file_modes, log_files, recovery
from statekeeper.node.api.routes import Api
from statekeeper.node.errors import OpError
from statekeeper.node.fatal import STATE_MACHINE_EXIT_CODE, stop_now
from statekeeper.node.metrics import NodeMetrics
from statekeeper.node.proposer import Proposer
from statekeeper.node.quota.disk_watch import DiskWatch
from statekeeper.node.raft import RaftNode
from statekeeper.node.raft.cluster_clock import ClusterClock
from statekeeper.node.raft.data_dir import EmptyStart
from statekeeper.node.shutdown import Shutdown
from statekeeper.node.snapshot_file import fsync_dir
from statekeeper.node.store import StateMachine
from statekeeper.node.tasks.leases import LeaseExpiry
from statekeeper.node.tasks.retention import RetentionGC
from statekeeper.node.tls import client_port_context

log = logging.getLogger("statekeeper.node")


async def _when_ready(
    raft: RaftNode, started: float, scan: recovery.BackgroundVerify, scan_after: float = 10.0
) -> None:
    """Log the one line operators (and the cold-start benchmark) read recovery time from,
    then start the checksum scan: in that order, from one task, so a scan that finds
    corruption at once cannot stop the node before its ready line is written (two polling
    tasks raced; CI saw it). The scan runs after ready so it does not slow the start it
    was moved out of, but `scan_after` s at most: a node that cannot reach a quorum is
    still checked."""
    deadline = time.monotonic() + scan_after
    while not raft.status().ready and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    if raft.status().ready:
        _log_ready(raft, started)
        scan.start()
        return
    scan.start()
    while not raft.status().ready:
        await asyncio.sleep(0.02)
    _log_ready(raft, started)


def _log_ready(raft: RaftNode, started: float) -> None:
    st = raft.status()
    log.info(
        "ready %.2f s after start (applied index %d, leader %s)",
        time.monotonic() - started,
        st.applied_index,
        st.leader_id,
    )


def _stop_on_corruption(sm: StateMachine, what: str, e: BaseException) -> NoReturn:
    """Leave word for the next start to move the corrupt DB aside, then stop
    (node/recovery.py): a restart then rebuilds the DB instead of failing again."""
    recovery.mark_corrupt(sm.path, e)
    stop_now(
        f"{what}: RocksDB is corrupt; the next start moves it aside ({recovery.marker_path(sm.path)})",
        e,
        STATE_MACHINE_EXIT_CODE,
    )


def _apply_fn(sm: StateMachine, applied: list):
    """What raft calls for every committed entry: apply it, then wake whoever waits for
    the new revision (`applied` is filled with those callbacks once they exist).

    apply() may raise only when RocksDB fails; a node that cannot persist an entry it
    must apply cannot continue with a state it trusts, so it stops at once (marking a
    corrupt DB for the next start first)."""

    def apply(index: int, payload: bytes):
        try:
            result = sm.apply(index, payload)
        except BaseException as e:
            if recovery.is_corruption(e):
                _stop_on_corruption(sm, f"applying raft entry {index} failed", e)
            stop_now(f"applying raft entry {index} failed", e, STATE_MACHINE_EXIT_CODE)
        for fn in applied:
            fn()
        return result

    return apply


@dataclass
class _Parts:
    """What one node is made of, in the order serve() builds it."""

    sm: StateMachine
    raft: RaftNode
    clock: ClusterClock
    metrics: NodeMetrics
    disk: DiskWatch
    proposer: Proposer
    after_apply: list  # called after each apply (filled once the API exists)
    verify: recovery.BackgroundVerify  # the DB's checksum scan, started once ready


def _open_store(
    cfg: config_mod.ClusterConfig, node_id: str, empty_start: EmptyStart
) -> StateMachine:
    data_dir = cfg.node_data_dir(node_id)
    recovery.note_lost_state(data_dir, empty_start)  # a lost disk: no vote until caught up
    file_modes.private_data_dir(data_dir)  # 0700; warns about (and fixes) an open one
    fatal.report_to(data_dir)  # where a fatal stop leaves last_stop.json
    started = time.monotonic()
    # A corrupt RocksDB is moved aside and rebuilt from raft (node/recovery.py).
    sm = recovery.open_state_machine(
        data_dir / "db",
        lambda: StateMachine(
            data_dir / "db",
            limits=cfg.limits,
            retention=cfg.retention,
            # The raft journal is the durable record (fsynced before any ack); after a power
            # loss RocksDB recovers a consistent prefix and replays the rest from the journal
            # (or restores the snapshot that covers it), so a sync write here would only add
            # a second fsync per entry.
            sync_writes=False,
        ),
    )
    log.info(
        "state machine open in %.2f s (applied index %d, revision %d)",
        time.monotonic() - started,
        sm.applied_index,
        sm.revision,
    )
    return sm


def _build(cfg: config_mod.ClusterConfig, node_id: str, empty_start: EmptyStart) -> _Parts:
    """The store, raft, the disk watch and the proposer; nothing serves yet."""
    sm = _open_store(cfg, node_id, empty_start)
    opened = time.monotonic()
    after_apply: list = []
    # The clock the leader stamps entries with; the lease expiry task reads it too.
    clock = ClusterClock(lambda: sm.clock_ms)
    # A `_created` series per counter and histogram doubles what a scrape stores for
    # nothing a rate() needs; the setting is process-wide (this process is one node).
    disable_created_metrics()
    metrics = NodeMetrics()
    # Raft runs on this loop too: one thread per node (node/raft/loop_driver.py).
    raft = RaftNode(
        cfg,
        node_id,
        _apply_fn(sm, after_apply),
        sm,
        clock=clock,
        metrics=metrics,
        loop=asyncio.get_running_loop(),
        empty_start=empty_start,
    )
    log.info(
        "raft journal loaded in %.2f s (%s)", time.monotonic() - opened, raft.journal_summary()
    )
    # The storage quota's NOSPACE alarm, fed by a timer (node/quota/disk_watch.py, node/quota/alarm.py).
    disk = DiskWatch.for_node(cfg, node_id, sm, raft.compact_journal)
    if cfg.fsync == "always":
        # A new directory entry is durable only once its parent is fsynced: without this a
        # power loss right after the first start can take the whole data dir with it.
        # Every ancestor: `cluster up` may just have created several levels of them.
        data_dir = cfg.node_data_dir(node_id)
        for d in (data_dir / "raft", data_dir, *data_dir.parents):
            fsync_dir(str(d))
    proposer = Proposer(
        raft.submit,
        max_entry_bytes=cfg.raft.max_entry_bytes,
        max_inflight=cfg.raft.max_inflight_entries,
        inflight_timeout=cfg.raft.request_timeout,
        metrics=metrics,
    )
    raft.on_leadership_lost(proposer.leadership_lost)
    verify = recovery.BackgroundVerify(
        sm.verify_chunk, lambda e: _stop_on_corruption(sm, "verifying RocksDB's checksums", e)
    )
    return _Parts(sm, raft, clock, metrics, disk, proposer, after_apply, verify)


def _start_background(
    cfg: config_mod.ClusterConfig, n: _Parts, started: float
) -> tuple[asyncio.Task, ...]:
    when_ready = asyncio.create_task(_when_ready(n.raft, started, n.verify))
    # Only the leader expires leases, after a grace past every election (node/tasks/leases.py).
    grace = cfg.raft.election_timeout_max + 1.0
    lease_expiry = asyncio.create_task(
        LeaseExpiry.for_node(n.sm, n.raft, n.clock, n.proposer, grace).run()
    )
    # Only the leader enforces retention policies, after the same grace (node/tasks/retention.py).
    retention_gc = asyncio.create_task(
        RetentionGC.for_node(
            n.sm, n.raft, n.clock, n.proposer, grace, cfg.retention.gc_interval_seconds
        ).run()
    )
    disk_watch = asyncio.create_task(n.disk.run())
    return when_ready, lease_expiry, retention_gc, disk_watch


def _shutdown_plan(
    cfg: config_mod.ClusterConfig, node_id: str, n: _Parts, api: Api, http, background
) -> Shutdown:
    def drain_api() -> None:
        api.shutting_down = True  # readiness and every route answer 503 from now on
        for task in background:
            task.cancel()

    return Shutdown(
        node_id,
        http,
        n.raft,
        grace=cfg.http.shutdown_grace_seconds,
        handover_timeout=2 * cfg.raft.election_timeout_max,
        on_drain=drain_api,
        release=[
            lambda: n.proposer.fail_all(OpError("unavailable", f"{node_id} is shutting down")),
            # Stops raft on the loop (the journal is synced and closed), so no apply can
            # follow the store's close below.
            n.raft.destroy,
            n.verify.stop,  # ends after its chunk: close waits for that chunk's `use`
            n.sm.close,
        ],
    )


async def serve(
    cfg: config_mod.ClusterConfig,
    node_id: str,
    unsafe_reads: bool = False,
    empty_start: EmptyStart = EmptyStart.LOST_DISK,
) -> int:
    """`empty_start` (--new-cluster, --join): what a start with no raft state is
    (node/raft/catchup.py)."""
    me = cfg.node(node_id)
    started = time.monotonic()
    n = _build(cfg, node_id, empty_start)
    if unsafe_reads:
        failpoints.enable("read-barrier-skip")
    api = Api(cfg, node_id, n.sm, n.raft, n.proposer, n.metrics, n.disk.quota, n.disk.free_now)
    n.after_apply.append(api.reads.revisions.applied)
    n.after_apply.append(api.token_changes.applied)
    http = api.server()
    await http.start(
        *me.http_listen,
        client_port_context(cfg, node_id),
        require_client_cert=cfg.tls.enabled and cfg.tls.client_auth == "required",
    )
    log.info(
        "%s serving HTTP on %s, raft on %s, data in %s (fsync=%s)",
        node_id,
        cfg.url(node_id),
        me.raft_address,
        cfg.node_data_dir(node_id),
        cfg.fsync,
    )
    background = _start_background(cfg, n, started)
    shutdown = _shutdown_plan(cfg, node_id, n, api, http, background)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        # The first signal starts the graceful stop; a second one cuts it short.
        loop.add_signal_handler(sig, lambda: shutdown.hurry() if stop.is_set() else stop.set())
    await stop.wait()

    log.info(
        "%s shutting down (grace %g s; a second SIGTERM/SIGINT stops it at once)",
        node_id,
        shutdown.grace,
    )
    outcome = await shutdown.run()
    log.info("%s stopped (%s)", node_id, outcome)
    return 0


def run_node(
    config_path: str,
    node_id: str,
    unsafe_reads: bool = False,
    empty_start: EmptyStart = EmptyStart.LOST_DISK,
) -> int:
    # Raft and HTTP share one thread, but snapshot packing, backups and reclaim run on
    # helper threads: the default 5 ms switch interval would let one of them stall the loop
    # for a whole raft round trip.
    sys.setswitchinterval(0.001)
    # Every file and dir this node creates is its user's only (node/file_modes.py); set
    # before the log handler opens (and rotates) node.log.
    file_modes.use_private_umask()
    # To stderr, or to a rotated node.log when the supervisor names one (node/log_files.py).
    log_files.configure(
        node_id, os.environ.get("STATEKEEPER_LOG", "INFO"), os.environ.get(log_files.LOG_FILE_ENV)
    )
    try:
        cfg = config_mod.load(config_path)
        cfg.node(node_id)
    except config_mod.ConfigError as e:
        print(f"statekeeper node: {e}", file=sys.stderr)
        return 2
    # Where the secret came from, never the secret itself.
    log.info("cluster secret from %s", cfg.secret_source or "nowhere (none is set)")
    for warning in cfg.secret_warnings:
        log.warning("%s", warning)
    try:
        import uvloop  # optional: faster event loop

        uvloop.install()
    except ImportError:
        pass
    try:
        return asyncio.run(serve(cfg, node_id, unsafe_reads, empty_start))
    except config_mod.ConfigError as e:
        print(f"statekeeper node: {e}", file=sys.stderr)
        return 2
