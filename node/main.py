"""One statekeeper node process: state machine + raft + HTTP API."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time

from prometheus_client import disable_created_metrics

from node import config as config_mod
from node import failpoints, recovery
from node.cluster_clock import ClusterClock
from node.errors import OpError
from node.fatal import STATE_MACHINE_EXIT_CODE, stop_now
from node.http_api import Api
from node.lease_expiry import LeaseExpiry
from node.metrics import NodeMetrics
from node.proposer import Proposer
from node.raft import RaftNode
from node.retention_gc import RetentionGC
from node.snapshot_file import fsync_dir
from node.store import StateMachine
from node.tls import client_port_context

log = logging.getLogger("statekeeper.node")


async def _log_when_ready(raft: RaftNode, started: float) -> None:
    # One line operators (and the cold-start benchmark) can read recovery time from.
    while not raft.status().ready:
        await asyncio.sleep(0.02)
    st = raft.status()
    log.info(
        "ready %.2f s after start (applied index %d, leader %s)",
        time.monotonic() - started,
        st.applied_index,
        st.leader_id,
    )


def _apply_fn(sm: StateMachine, applied: list):
    """What raft calls for every committed entry: apply it, then wake whoever waits for
    the new revision (`applied` is filled with those callbacks once they exist).

    apply() may raise only when RocksDB fails; a node that cannot persist an entry it
    must apply cannot continue with a state it trusts, so it stops at once."""

    def apply(index: int, payload: bytes):
        try:
            result = sm.apply(index, payload)
        except BaseException as e:
            stop_now(f"applying raft entry {index} failed", e, STATE_MACHINE_EXIT_CODE)
        for fn in applied:
            fn()
        return result

    return apply


async def serve(cfg: config_mod.ClusterConfig, node_id: str, unsafe_reads: bool = False) -> int:
    me = cfg.node(node_id)
    data_dir = cfg.node_data_dir(node_id)
    recovery.note_lost_state(data_dir)  # a lost disk: said loudly, then caught up
    data_dir.mkdir(parents=True, exist_ok=True)
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
    opened = time.monotonic()
    log.info(
        "state machine open in %.2f s (applied index %d, revision %d)",
        opened - started,
        sm.applied_index,
        sm.revision,
    )
    after_apply: list = []
    # The clock the leader stamps entries with; the lease expiry task reads it too.
    clock = ClusterClock(lambda: sm.clock_ms)
    # A `_created` series per counter and histogram doubles what a scrape stores for
    # nothing a rate() needs; the setting is process-wide (this process is one node).
    disable_created_metrics()
    metrics = NodeMetrics()
    raft = RaftNode(cfg, node_id, _apply_fn(sm, after_apply), sm, clock=clock, metrics=metrics)
    log.info(
        "raft journal loaded in %.2f s (%s)", time.monotonic() - opened, raft.journal_summary()
    )
    if cfg.fsync == "always":
        # A new directory entry is durable only once its parent is fsynced: without this a
        # power loss right after the first start can take the whole data dir with it.
        # Every ancestor: `cluster up` may just have created several levels of them.
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
    if unsafe_reads:
        failpoints.enable("read-barrier-skip")
    api = Api(cfg, node_id, sm, raft, proposer, metrics)
    after_apply.append(api.reads.revisions.applied)
    http = api.server()
    await http.start(
        me.host,
        me.http_port,
        client_port_context(cfg, node_id),
        require_client_cert=cfg.tls.enabled and cfg.tls.client_auth == "required",
    )
    log.info(
        "%s serving HTTP on %s, raft on %s, data in %s (fsync=%s)",
        node_id,
        cfg.url(node_id),
        me.raft_address,
        data_dir,
        cfg.fsync,
    )

    ready_logger = asyncio.create_task(_log_when_ready(raft, started))
    # Only the leader expires leases, after a grace past every election (node/lease_expiry.py).
    grace = cfg.raft.election_timeout_max + 1.0
    lease_expiry = asyncio.create_task(LeaseExpiry.for_node(sm, raft, clock, proposer, grace).run())
    # Only the leader enforces retention policies, after the same grace (node/retention_gc.py).
    retention_gc = asyncio.create_task(
        RetentionGC.for_node(
            sm, raft, clock, proposer, grace, cfg.retention.gc_interval_seconds
        ).run()
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()

    log.info("%s shutting down", node_id)
    ready_logger.cancel()
    lease_expiry.cancel()
    retention_gc.cancel()
    api.shutting_down = True
    # Hand leadership over first so the cluster does not wait an election timeout.
    if raft.status().is_leader:
        raft.transfer_leadership()
        for _ in range(20):
            await asyncio.sleep(0.05)
            if not raft.status().is_leader:
                break
    proposer.fail_all(OpError("unavailable", f"{node_id} is shutting down"))
    await http.close()
    # Joins the raft thread, so no apply can race the close below.
    await asyncio.get_running_loop().run_in_executor(None, raft.destroy)
    sm.close()
    log.info("%s stopped", node_id)
    return 0


def run_node(config_path: str, node_id: str, unsafe_reads: bool = False) -> int:
    # Two threads share the GIL (HTTP loop, raft tick); the default 5 ms switch interval
    # lets one stall the other for a whole raft round trip.
    sys.setswitchinterval(0.001)
    logging.basicConfig(
        level=os.environ.get("STATEKEEPER_LOG", "INFO"),
        format=f"%(asctime)s {node_id} %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
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
        return asyncio.run(serve(cfg, node_id, unsafe_reads))
    except config_mod.ConfigError as e:
        print(f"statekeeper node: {e}", file=sys.stderr)
        return 2
