"""Failpoints armed in the nodes (node/failpoints.py): the ``STATEKEEPER_FAILPOINTS``
value a fault's ``failpoints`` become, and the :class:`CrashWatcher` that restarts a node
that exited at one (status 86) and counts the crashes."""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from statekeeper.chaos.report import FAIL, INFO, PASS, UNKNOWN, Verdict
from statekeeper.cluster.supervisor import LocalCluster, NodeStartError, SupervisorError

__all__ = [
    "FAILPOINTS_ENV",
    "FAILPOINT_EXIT_CODE",
    "TINY_SNAPSHOTS",
    "CrashWatcher",
    "exit_failpoints",
    "failpoint_spec",
    "last_failpoint",
]

FAILPOINTS_ENV = "STATEKEEPER_FAILPOINTS"
FAILPOINT_EXIT_CODE = 86  # node/failpoints.py EXIT_CODE
_FAILPOINT_LINE = re.compile(r"failpoint (\S+): exiting")

# Snapshot thresholds that make compaction run about once a second on every node (instead
# of every 5000 entries / 5 minutes): snapshot, rename and journal prefix drop happen
# dozens of times in a 20 s run. pysyncobj needs min_entries >= 2.
TINY_SNAPSHOTS: dict[str, Any] = {"snapshot_min_entries": 40, "snapshot_min_seconds": 1}


def failpoint_spec(points: Mapping[str, str]) -> str:
    """The STATEKEEPER_FAILPOINTS value for ``points`` (name -> action), validated with the
    node's own parser so that a typo fails here and not as a node that refuses to start."""
    from statekeeper.node import failpoints

    spec = ";".join(f"{name}={action}" for name, action in points.items())
    failpoints.parse(spec)  # raises FailpointError naming the bad part
    return spec


def exit_failpoints(points: Mapping[str, str]) -> list[str]:
    """Names in ``points`` whose action can make the node exit (exit, N*exit, P%exit)."""
    return [name for name, action in points.items() if action.strip().endswith("exit")]


def last_failpoint(log_text: str) -> str | None:
    """The failpoint named by the last "failpoint NAME: exiting" line of a node's log."""
    names = _FAILPOINT_LINE.findall(log_text)
    return names[-1] if names else None


class CrashWatcher:
    """Restarts nodes that exited at a failpoint (status 86), counting the crashes;
    after :meth:`disarm` (the heal) without their failpoints.

    Polls every ``interval`` seconds (a crashed node is started again within about that
    long; it then catches up on its own). Only status 86 is restarted: a node killed by a
    fault (a signal) is the fault's business, and any other exit status is a real crash,
    recorded in ``unexpected`` and left for the runner to report. Each exit is handled
    once (by pid).
    """

    def __init__(
        self, cluster: LocalCluster, log: Callable[[str], None] = print, interval: float = 0.1
    ) -> None:
        self.cluster = cluster
        self.log = log
        self.interval = interval
        self.crashes: Counter[str] = Counter()  # failpoint name -> exits
        self.by_node: Counter[str] = Counter()
        self.unexpected: list[tuple[str, int]] = []  # (node, exit status)
        self.restarts = 0
        # node -> time.monotonic_ns() of each restart (the history's clock)
        self.restart_times: dict[str, list[int]] = {}
        # Extra environment of a restart: after disarm(), the failpoints switched off.
        self._restart_env: dict[str, str] | None = None
        self._handled: set[int] = set()
        self._pending: set[str] = set()  # crashed at a failpoint, not yet started again
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> CrashWatcher:
        self._thread = threading.Thread(target=self._run, name="crash-watcher", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(15.0)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except Exception as e:  # noqa: BLE001 - keep watching; say what went wrong
                self.log(f"crash watcher: {e!r}")

    def poll(self) -> None:
        """One round: notice exits, restart failpoint crashes."""
        lc = self.cluster
        with self._lock:
            for nid in lc.node_ids:
                if lc.pid(nid) is not None:
                    continue
                last = lc.last_exit.get(nid)
                if last is not None and last[0] not in self._handled:
                    self._handled.add(last[0])
                    pid, code = last
                    if code == FAILPOINT_EXIT_CODE:
                        name = last_failpoint(lc.log_tail(nid, 40)) or "?"
                        self.crashes[name] += 1
                        self.by_node[nid] += 1
                        self._pending.add(nid)
                        self.log(f"{nid} exited at failpoint {name} (pid {pid}); restarting it")
                    elif code > 0:
                        self.unexpected.append((nid, code))
                        self.log(f"{nid} exited with status {code} (pid {pid}): not a failpoint")
                if nid in self._pending:
                    try:
                        lc.start_node(nid, env=self._restart_env)
                    except SupervisorError as e:  # e.g. its port not free yet: next round
                        self.log(f"crash watcher: restarting {nid} failed, will retry: {e}")
                        continue
                    self._pending.discard(nid)
                    self.restarts += 1
                    self.restart_times.setdefault(nid, []).append(time.monotonic_ns())

    def disarm(self) -> None:
        """From now on, restart crashed nodes with every failpoint off: the fault ends at
        the heal for each node as it next crashes, so the recovery can be judged (a node
        that kept crashing about once a second never would be)."""
        from statekeeper.node import failpoints

        with self._lock:
            self._restart_env = {failpoints.ENV: ""}

    def settle(self, timeout: float = 10.0) -> bool:
        """Wait until no failpoint crash awaits its restart; False on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            with self._lock:
                if not self._pending:
                    return True
            if time.monotonic() > deadline:
                return False
            time.sleep(self.interval)

    def verdict(self, expected: Sequence[str]) -> Verdict:
        """How many crashes each expected failpoint caused. A failpoint that never fired
        tested nothing: all of them silent is a FAIL, some of them UNKNOWN."""
        counts = {name: self.crashes.get(name, 0) for name in expected}
        others = {k: v for k, v in self.crashes.items() if k not in counts}
        value = ", ".join(f"{k} {v}" for k, v in {**counts, **others}.items()) or "none armed"
        per_node = ", ".join(f"{n} {c}" for n, c in sorted(self.by_node.items()))
        detail = f"{self.restarts} restarts ({per_node or 'no node crashed'})"
        silent = [k for k, v in counts.items() if v == 0]
        if counts and len(silent) == len(counts):
            status = FAIL
            detail = "no failpoint ever fired: the scenario tested nothing; " + detail
        elif silent:
            status = UNKNOWN
            detail = f"never fired: {', '.join(silent)}; " + detail
        else:
            status = PASS if counts else INFO
        return Verdict("failpoint crashes", status, value, detail)


def start_cluster(lc: LocalCluster, watcher: CrashWatcher | None, attempts: int = 10) -> None:
    """lc.up(); with failpoints armed a node may exit at one before it is live (snapshots
    run about once a second from the start): the watcher starts it again and the ordered
    start is resumed (lc.up() leaves running nodes alone). Any other start failure, or
    one the watcher did not recognise as a failpoint exit, is raised."""
    for attempt in range(attempts):
        try:
            lc.up(timeout=90.0)
            return
        except NodeStartError:
            if watcher is None or watcher.unexpected or attempt == attempts - 1:
                raise
            watcher.settle(10.0)
