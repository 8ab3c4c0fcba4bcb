"""The plumbing of one chaos run (``chaos.runner``): the cluster's base config, the
Toxiproxy API it may need, progress lines, SIGTERM as Ctrl-C, and the teardown that
stops the nodes and keeps their logs."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from statekeeper import IMPORT_ROOT
from statekeeper.chaos.report import RunResult
from statekeeper.chaos.workload import Workload
from statekeeper.cluster.ports import free_ports
from statekeeper.cluster.supervisor import LocalCluster
from statekeeper.node import config as node_config
from statekeeper.node.config import ClusterConfig, NodeConfig

if TYPE_CHECKING:
    from statekeeper.chaos.faults import Fault
    from statekeeper.chaos.runner import RunOptions

__all__ = [
    "NS",
    "Progress",
    "Say",
    "base_config",
    "client_environment",
    "report_options",
    "workload_token",
    "sigterm_as_interrupt",
    "sleep_until",
    "teardown",
    "toxiproxy_url",
    "with_tls",
]

Say = Callable[[str], None]
NS = 1_000_000_000


def base_config(opts: RunOptions, data_dir: Path) -> ClusterConfig:
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


def report_options(opts: RunOptions, fault: Fault, warmup: float, window: float) -> dict:
    """The options a run's report lists (what makes it reproducible)."""
    from statekeeper.chaos.faults import failpoint_spec

    return {
        "duration": opts.duration,
        "clients": opts.clients,
        "seed": opts.seed,
        "fsync": opts.fsync,
        "nodes": opts.nodes,
        "keys": opts.keys,
        "stream_share": opts.stream_share,
        "watchers": opts.watchers,
        "lockers": opts.lockers,
        "crdt_clients": opts.crdt_clients,
        "warmup": warmup,
        "fault_window": window,
        "op_deadline": opts.op_deadline,
        "think_time": opts.think_time,
        "tls": opts.tls,
        "auth": opts.auth,
        "debug_unsafe_reads": opts.debug_unsafe_reads,
        **({"debug_watch_drop": True} if opts.debug_watch_drop else {}),
        **({"debug_lock_unfenced": True} if opts.debug_lock_unfenced else {}),
        **({"debug_crdt_reuse_id": True} if opts.debug_crdt_reuse_id else {}),
        **({"failpoints": failpoint_spec(fault.failpoints)} if fault.failpoints else {}),
        **({"raft": fault.raft_settings} if fault.raft_settings else {}),
        **({"retention": fault.retention_settings} if fault.retention_settings else {}),
        **({"workload": fault.workload_settings} if fault.workload_settings else {}),
    }


def with_tls(cfg: ClusterConfig, work: Path) -> ClusterConfig:
    """`cfg` with [tls] on (client and raft ports), certificates from a fresh CA in
    `work`/tls (the config file is written to `work`, so the paths are relative to it)."""
    from statekeeper.cluster.certs import init_cluster_tls

    init_cluster_tls(work / "tls", [(n.id, n.host) for n in cfg.nodes], cfg.name)
    tls = node_config.TlsSettings(
        enabled=True, ca_file="tls/ca.pem", cert_file="tls/{id}.pem", key_file="tls/{id}-key.pem"
    )
    return dataclasses.replace(cfg, tls=tls)


def workload_token(lc: LocalCluster) -> str:
    """A token for the run's clients (auth on): writer of every namespace, minted with the
    root token (derived from the cluster secret), so the workload goes through the token
    store's check on every request, not the root shortcut."""
    from statekeeper.client import Client
    from statekeeper.client.auth.tokens import root_token

    cfg = lc.config
    with Client(cfg.http_urls(), token=root_token(cfg.secret), tls=lc.tls, timeout=10) as c:
        return c.auth_token_create(ns="*", role="writer", name="chaos workload").token


@contextlib.contextmanager
def client_environment(env: dict[str, str]) -> Iterator[None]:
    """Set `env` for this process (the workload's clients read their CA and token from
    it, client/tls.py), and put the old values back after."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def toxiproxy_url(mode: str, say: Say) -> Iterator[str]:
    """The URL of the Toxiproxy API to use for this run."""
    external = os.environ.get("TOXIPROXY_URL")
    if external:
        say(f"using the Toxiproxy at {external} (TOXIPROXY_URL)")
        yield external.rstrip("/")
        return
    if mode == "in-process":
        from statekeeper.chaos.toxiproxy import ToxiproxyServer

        with ToxiproxyServer() as server:
            yield server.url
        return
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (IMPORT_ROOT, env.get("PYTHONPATH", "")) if p)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "statekeeper.chaos.toxiproxy",
            "--port",
            "0",
            "--log-level",
            "WARNING",
        ],
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


class Progress(threading.Thread):
    """Prints one line per interval: phase, op counts (total and in the last interval),
    and the watchers' events and resumes."""

    def __init__(
        self, workload: Workload, t0: int, interval: float, say: Say, watchers: Any = None
    ) -> None:
        super().__init__(name="chaos-progress", daemon=True)
        self.workload, self.t0, self.interval, self.say = workload, t0, interval, say
        self.watchers = watchers  # chaos.watch_workload.Watchers: their counts too
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
                f"+{d[2]} unknown" + self._watch()
            )

    def _watch(self) -> str:
        if self.watchers is None:
            return ""
        events, resumes = self.watchers.counts()
        return f" | watch {events} events, {resumes} resumes"

    def stop(self) -> None:
        self._stop_event.set()


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
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


def sleep_until(deadline_ns: int) -> None:
    while True:
        left = (deadline_ns - time.monotonic_ns()) / NS
        if left <= 0:
            return
        time.sleep(min(left, 0.2))


def teardown(lc: LocalCluster, report_dir: Path, result: RunResult) -> None:
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
