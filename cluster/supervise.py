"""`statekeeper cluster supervise` (and `cluster up --supervise`): keep the local nodes
running. A thin loop: every poll it probes each node (is its process there, does
GET /v1/health/live answer 200), hands the probes to the Watchdog (cluster/watchdog.py, which
decides), and carries out its kills and restarts through LocalCluster.

It runs in the foreground until Ctrl-C or SIGTERM; the nodes keep running after it stops.
Every decision goes to stdout and to <cluster data dir>/supervise.log, one line each with
a UTC time and the reason. One supervisor per cluster: a second one exits at once (an
flock on <cluster data dir>/supervise.lock), so two never restart the same node.

What the nodes do by themselves once restarted (node/recovery.py): a node whose RocksDB is
corrupt moves it aside and rebuilds; a node whose data dir is gone starts empty and catches
up from the leader's snapshot.
"""

from __future__ import annotations

import contextlib
import fcntl
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

from statekeeper.cluster.supervisor import LocalCluster, SupervisorError, http_get_json
from statekeeper.cluster.watchdog import Action, Policy, Probe, Watchdog

LOG_FILE = "supervise.log"
LOCK_FILE = "supervise.lock"


class AlreadySupervised(SupervisorError):
    """Another supervisor holds the cluster's supervise.lock."""


def cluster_data_dir(lc: LocalCluster) -> Path:
    """The cluster's data dir (the parent of the nodes' own), resolved like theirs."""
    return (Path(lc.config.base_dir) / lc.config.data_dir).resolve()


def _exit_detail(code: int) -> str:
    if code < 0:
        try:
            return f"exited on signal {signal.Signals(-code).name}"
        except ValueError:
            return f"exited on signal {-code}"
    return f"exited with code {code}"


class Supervisor:
    """Polls the nodes of `lc` every `poll` seconds and acts on the Watchdog's decisions."""

    def __init__(
        self,
        lc: LocalCluster,
        policy: Policy | None = None,
        *,
        poll: float = 1.0,
        out: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lc = lc
        self.poll = poll
        self.watchdog = Watchdog(lc.node_ids, policy)
        self._out = out
        self._clock = clock
        self.log_path = cluster_data_dir(lc) / LOG_FILE
        self.log_path.parent.mkdir(parents=True, exist_ok=True)

    def say(self, msg: str) -> None:
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} supervise: {msg}"
        with open(self.log_path, "a") as f:
            f.write(line + "\n")
        print(line, file=self._out or sys.stdout, flush=True)

    def probe(self, node_id: str) -> Probe:
        lc = self.lc
        if lc.pid(node_id) is None:
            last = lc.last_exit.get(node_id)
            detail = "process " + (_exit_detail(last[1]) if last else "gone")
            if not lc.data_dir(node_id).exists():
                detail += "; its data dir is missing (it will start empty and catch up)"
            return Probe(running=False, live=False, detail=detail)
        code, doc = http_get_json(lc.url(node_id) + "/v1/health/live", timeout=2.0, tls=lc.tls)
        if code == 200:
            return Probe(running=True, live=True)
        err = (doc or {}).get("error")
        if isinstance(err, dict):
            detail = f"HTTP {code} {err.get('code')}: {err.get('message')}"
        else:
            detail = f"HTTP {code}" if code else "no answer to GET /v1/health/live"
        return Probe(running=True, live=False, detail=detail)

    def poll_once(self) -> list[Action]:
        probes = {nid: self.probe(nid) for nid in self.lc.node_ids}
        actions = self.watchdog.step(self._clock(), probes)
        for action in list(actions):
            actions += self._act(action)
        return actions

    def _act(self, a: Action) -> list[Action]:
        if a.kind == "kill":
            self.say(f"{a.node_id}: killing it ({a.reason})")
            self.lc.kill_node(a.node_id)
        elif a.kind == "restart":
            self.say(f"{a.node_id}: restarting it ({a.reason})")
            try:
                self.lc.start_node(a.node_id)
            except SupervisorError as e:
                self.say(f"{a.node_id}: could not start it: {e}")
                more = self.watchdog.start_failed(a.node_id, self._clock(), str(e))
                done = list(more)
                for b in more:
                    done += self._act(b)
                return done
        elif a.kind == "backoff" and a.delay > 0:
            self.say(f"{a.node_id}: down ({a.reason})")
        elif a.kind == "recovered":
            self.say(f"{a.node_id}: {a.reason}")
        elif a.kind == "give_up":
            self.say(f"{a.node_id}: GIVING UP: {a.reason}")
        return []

    def run(self, stop: threading.Event) -> None:
        nodes = ", ".join(self.lc.node_ids)
        self.say(f"watching {nodes} every {self.poll:g} s (log: {self.log_path}; Ctrl-C stops)")
        while not stop.is_set():
            self.poll_once()
            stop.wait(self.poll)
        self.say("stopped (the nodes keep running; 'statekeeper cluster down' stops them)")


@contextlib.contextmanager
def exclusive(lc: LocalCluster) -> Iterator[None]:
    """Hold <cluster data dir>/supervise.lock, or raise AlreadySupervised."""
    path = cluster_data_dir(lc) / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise AlreadySupervised(
                f"another 'statekeeper cluster supervise' already watches this cluster "
                f"(it holds {path})"
            ) from None
        yield


def run_until_signalled(sup: Supervisor) -> None:
    """sup.run() in the foreground until SIGINT or SIGTERM (then return normally)."""
    stop = threading.Event()
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in previous:
        signal.signal(s, lambda *_: stop.set())
    try:
        with exclusive(sup.lc):
            sup.run(stop)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
