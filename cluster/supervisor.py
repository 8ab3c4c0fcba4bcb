"""Run a statekeeper cluster as local processes: start, stop, kill, pause, wait.

Used by the `statekeeper cluster ...` command and by the test fixtures. Each node
runs detached (its own session) so it outlives the command that started it; its
pid lives in `<node data dir>/node.pid`, its output in `<node data dir>/node.log`, which the
node rotates itself (node/log_files.py: at 16 MiB, 3 old files kept).

Only the standard library is used for HTTP so `cluster/` does not depend on
`client/` (the client is what the cluster is tested *with*).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from statekeeper import IMPORT_ROOT
from statekeeper.node.config import ClusterConfig
from statekeeper.node.file_modes import open_private_log
from statekeeper.node.log_files import LOG_FILE, LOG_FILE_ENV, is_log_file
from statekeeper.node.raft.data_dir import bootstrap_new_cluster
from statekeeper.node.tls import operator_tls_context

PID_FILE = "node.pid"


# Explicitly no proxies: an http_proxy in the environment must not catch loopback polls.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

Progress = Callable[[str], None]
StopOutcome = Literal["not running", "stopped", "killed"]
# Seconds past a node's shutdown grace before the supervisor SIGKILLs it: the grace bounds
# draining and the leadership hand-over; closing raft and RocksDB comes after it.
STOP_MARGIN = 10.0


class SupervisorError(RuntimeError):
    """A node could not be started, stopped or reached as asked."""


class NodeStartError(SupervisorError):
    """A node process exited (or could not start) before it became live."""


class ClusterTimeout(SupervisorError, TimeoutError):
    """Nodes did not reach the awaited state in time."""


def url_opener(tls: ssl.SSLContext | None) -> urllib.request.OpenerDirector:
    if tls is None:
        return _OPENER
    return urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=tls)
    )


def http_get_json(
    url: str, timeout: float = 2.0, tls: ssl.SSLContext | None = None
) -> tuple[int, dict[str, Any] | None]:
    """GET `url` (https: verified with `tls`); return (HTTP status, decoded JSON object
    or None).

    Status 0 means no HTTP answer at all (refused, reset, timed out).
    """
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with url_opener(tls).open(req, timeout=timeout) as resp:
            status, body = resp.status, resp.read()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read() if e.fp is not None else b""
    except (urllib.error.URLError, OSError, ValueError):
        return 0, None
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    return status, doc if isinstance(doc, dict) else None


def status_field(status: dict[str, Any], *names: str) -> Any:
    """First present field among `names` (the node's field names may still move)."""
    for name in names:
        if name in status and status[name] is not None:
            return status[name]
    return None


def status_alarm(status: dict[str, Any]) -> str | None:
    """The node's storage alarm ("nospace" while writes that add data get 507), or None."""
    storage = status.get("storage")
    return storage.get("alarm") if isinstance(storage, dict) else None


def status_role(status: dict[str, Any]) -> str | None:
    role = status_field(status, "role", "state")
    if role is None and "is_leader" in status:
        role = "leader" if status["is_leader"] else "follower"
    return str(role) if role is not None else None


def status_leader(status: dict[str, Any]) -> str | None:
    leader = status_field(status, "leader_id", "leader")
    return str(leader) if leader is not None else None


def _proc_state(pid: int) -> str | None:
    """One-letter state from /proc (R, S, T, Z, ...); None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name in parentheses may itself contain spaces or ')'.
    return stat.rsplit(")", 1)[1].split()[0]


def _proc_cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def _pid_alive(pid: int) -> bool:
    if Path("/proc").is_dir():
        state = _proc_state(pid)
        return state is not None and state != "Z"  # a zombie has already exited
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _port_in_use(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.3):
            return True
    except OSError:
        return False


def _signal(pid: int, sig: int) -> None:
    """Signal the node's whole process group when it leads one (it was started so)."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


class LocalCluster:
    """The nodes of one ClusterConfig, run as processes on this machine.

    `node_command` is the argv prefix that starts one node; `--config PATH --id ID`
    is appended. The default is this interpreter running `python -m statekeeper.node`.
    """

    def __init__(
        self,
        config: ClusterConfig,
        config_path: str | os.PathLike[str],
        *,
        node_command: Sequence[str] | None = None,
        progress: Progress | None = None,
        env: dict[str, str] | None = None,
        node_env: dict[str, dict[str, str]] | None = None,
    ) -> None:
        self.config = config
        self.config_path = Path(config_path).resolve()
        # How this supervisor checks the nodes' https port (None: plain http).
        self.tls = operator_tls_context(config)
        self.node_command = list(node_command or [sys.executable, "-m", "statekeeper.node"])
        self._progress = progress
        self._extra_env = dict(env or {})
        # Variables for every start of one node (after `env`, before start_node's own):
        # fault hooks that must survive restarts (failpoints, a faked clock).
        self.node_env: dict[str, dict[str, str]] = {k: dict(v) for k, v in (node_env or {}).items()}
        # Handles of processes this object started: kept so they can be reaped.
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        # Exit codes of reaped children, for tests that check for a clean shutdown.
        self.exit_codes: dict[str, int] = {}
        # node id -> (pid, exit code) of its last reaped child: tells one exit from the next.
        self.last_exit: dict[str, tuple[int, int]] = {}
        # Starting and reaping may happen from two threads (a watcher restarting crashed
        # nodes while a fault kills others): one at a time.
        self._lock = threading.RLock()

    # -- paths and lookups ---------------------------------------------------------

    @property
    def node_ids(self) -> list[str]:
        return [n.id for n in self.config.nodes]

    def url(self, node_id: str) -> str:
        return self.config.url(node_id)

    def data_dir(self, node_id: str) -> Path:
        return self.config.node_data_dir(node_id)

    def pid_file(self, node_id: str) -> Path:
        return self.data_dir(node_id) / PID_FILE

    def log_file(self, node_id: str) -> Path:
        return self.data_dir(node_id) / LOG_FILE

    def log_tail(self, node_id: str, lines: int = 40) -> str:
        try:
            with open(self.log_file(node_id), "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 64 * 1024))
                text = f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _say(self, msg: str) -> None:
        if self._progress is not None:
            self._progress(msg)

    def _warn(self, msg: str) -> None:
        # Warnings are shown even when progress output is off.
        if self._progress is not None:
            self._progress(f"warning: {msg}")
        else:
            print(f"warning: {msg}", file=sys.stderr, flush=True)

    # -- process state -------------------------------------------------------------

    def _reap(self, node_id: str) -> bool:
        """Collect our child's exit status if it exited; True if it is gone."""
        with self._lock:
            proc = self._procs.get(node_id)
            if proc is None:
                return False
            code = proc.poll()
            if code is None:
                return False
            self.exit_codes[node_id] = code
            self.last_exit[node_id] = (proc.pid, code)
            self._procs.pop(node_id, None)
            return True

    def _cmdline_matches(self, pid: int, node_id: str) -> bool:
        if not Path("/proc").is_dir():
            return True  # no way to check for pid reuse here
        argv = _proc_cmdline(pid)
        # After a pid is reused the new process will not carry this node id.
        return argv is not None and node_id in argv

    def pid(self, node_id: str) -> int | None:
        """Pid of the running node, or None (no pid file, exited, or pid reused)."""
        self.config.node(node_id)  # unknown ids fail loudly
        self._reap(node_id)
        try:
            pid = int(self.pid_file(node_id).read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        if not _pid_alive(pid) or not self._cmdline_matches(pid, node_id):
            return None
        return pid

    def is_running(self, node_id: str) -> bool:
        return self.pid(node_id) is not None

    def _clear_pid_file(self, node_id: str) -> None:
        self.pid_file(node_id).unlink(missing_ok=True)

    # -- HTTP probes ---------------------------------------------------------------

    def is_live(self, node_id: str) -> bool:
        return (
            http_get_json(self.url(node_id) + "/v1/health/live", timeout=1.0, tls=self.tls)[0]
            == 200
        )

    def is_ready(self, node_id: str) -> bool:
        return (
            http_get_json(self.url(node_id) + "/v1/health/ready", timeout=1.0, tls=self.tls)[0]
            == 200
        )

    def status(self, node_id: str) -> dict[str, Any] | None:
        """The node's GET /v1/status answer, or None if it does not answer 200."""
        code, doc = http_get_json(self.url(node_id) + "/v1/status", timeout=2.0, tls=self.tls)
        return doc if code == 200 else None

    def statuses(self) -> dict[str, dict[str, Any] | None]:
        return {nid: self.status(nid) for nid in self.node_ids}

    def leader_id(self) -> str | None:
        """The leader of the highest term any reachable node knows of, or None."""
        best: tuple[int, str] | None = None
        for nid, st in self.statuses().items():
            if st is None:
                continue
            term = status_field(st, "term")
            term = term if isinstance(term, int) else -1
            if status_role(st) == "leader":
                leader: str | None = str(status_field(st, "node_id", "id") or nid)
            else:
                leader = status_leader(st)
            if leader is not None and (best is None or term > best[0]):
                best = (term, leader)
        return best[1] if best else None

    # -- starting ------------------------------------------------------------------

    def _child_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (IMPORT_ROOT, env.get("PYTHONPATH", "")) if p
        )
        env["PYTHONUNBUFFERED"] = "1"  # so node.log is current when we show its tail
        env.update(self._extra_env)
        env.update(extra or {})
        return env

    def _node_child_env(self, node_id: str, extra: dict[str, str] | None) -> dict[str, str]:
        return self._child_env({**self.node_env.get(node_id, {}), **(extra or {})})

    def start_node(
        self, node_id: str, env: dict[str, str] | None = None, join: bool = False
    ) -> int:
        """Start one node detached; return its pid (the running one's if already up).

        `env` adds variables for this start of this node only (fault hooks in tests);
        `node_env[node_id]` (see __init__) applies to every start of it. `join`: the
        node is new and about to be added online (`--join`: with no raft state it votes
        at once; node/raft/catchup.py); only add-node's first start passes it.
        Does not wait: see wait_live / wait_ready.
        """
        with self._lock:
            return self._start_node(node_id, env, join)

    def _start_node(self, node_id: str, env: dict[str, str] | None, join: bool) -> int:
        node = self.config.node(node_id)
        pid = self.pid(node_id)
        if pid is not None:
            self._say(f"{node_id}: already running (pid {pid})")
            return pid
        for port in (node.http_port, node.raft_port):
            if _port_in_use(node.host, port):
                raise NodeStartError(
                    f"{node_id}: {node.host}:{port} is already in use by another process"
                )
        # A cluster none of whose nodes has raft state is being created: its nodes vote from
        # their first start. Otherwise a node without raft state votes only once caught up
        # (a lost disk), unless it is a new member joining (`join`; node/raft/catchup.py).
        if bootstrap_new_cluster(self.config):
            self._say(f"new cluster: raft dirs created for {', '.join(self.node_ids)}")
        data_dir = self.data_dir(node_id)
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # the node warns if open
        # The node reads the secret from the config, a file or its environment: never its
        # command line, which any local user can read (/proc/PID/cmdline, ps).
        argv = [*self.node_command, "--config", str(self.config_path), "--id", node_id]
        if join:
            argv.append("--join")
        secret = self.config.secret
        if secret and any(secret in a for a in argv):
            raise NodeStartError(f"{node_id}: refusing to put the cluster secret on a command line")
        # node.log 0600: it can hold keys and tenants' names (node/file_modes.py).
        with open(open_private_log(self.log_file(node_id)), "ab") as log:
            log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting {node_id}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(self.config_path.parent),
                # The node rotates the file its stdout and stderr go to (node/log_files.py).
                env={
                    **self._node_child_env(node_id, env),
                    LOG_FILE_ENV: str(self.log_file(node_id)),
                },
                start_new_session=True,  # survives the CLI; signals go to its own group
                close_fds=True,
            )
        self._procs[node_id] = proc
        tmp = self.pid_file(node_id).with_suffix(".pid.tmp")
        tmp.write_text(f"{proc.pid}\n")
        tmp.replace(self.pid_file(node_id))  # atomic: readers never see a half-written pid
        self._say(f"{node_id}: started (pid {proc.pid}, log {self.log_file(node_id)})")
        return proc.pid

    def _exited_early(self, node_id: str) -> str | None:
        """If our child `node_id` already exited, a message saying so (with its log)."""
        with self._lock:  # the pid file must not be a restarted process's by now
            proc = self._procs.get(node_id)
            if proc is None or proc.poll() is None:
                if proc is None and not self.is_running(node_id):
                    return f"{node_id} is not running"
                return None
            self._reap(node_id)
            self._clear_pid_file(node_id)
        tail = self.log_tail(node_id, 20)
        msg = f"{node_id} exited with code {self.exit_codes.get(node_id)} before it was live"
        return f"{msg}; last lines of {self.log_file(node_id)}:\n{tail}" if tail else msg

    def wait_live(self, node_id: str, timeout: float = 30.0) -> float:
        """Wait until GET /v1/health/live answers 200; return the seconds waited."""
        start = time.monotonic()
        next_note = start + 5.0
        while True:
            if self.is_live(node_id):
                return time.monotonic() - start
            died = self._exited_early(node_id)
            if died:
                raise NodeStartError(died)
            now = time.monotonic()
            if now - start > timeout:
                raise ClusterTimeout(
                    f"{node_id} did not answer /v1/health/live within {timeout:.0f}s "
                    f"(log: {self.log_file(node_id)})"
                )
            if now >= next_note:
                self._say(f"{node_id}: still waiting to be live ({now - start:.0f}s)")
                next_note = now + 5.0
            time.sleep(0.1)

    def wait_ready(
        self, node_ids: str | Iterable[str] | None = None, timeout: float = 60.0
    ) -> float:
        """Wait until every given node (default: all) answers /v1/health/ready 200."""
        if node_ids is None:
            pending = self.node_ids
        elif isinstance(node_ids, str):
            pending = [node_ids]
        else:
            pending = list(node_ids)
        for nid in pending:
            self.config.node(nid)
        start = time.monotonic()
        next_note = start + 5.0
        last: dict[str, str] = {}
        while pending:
            for nid in list(pending):
                code, doc = http_get_json(
                    self.url(nid) + "/v1/health/ready", timeout=1.0, tls=self.tls
                )
                if code == 200:
                    pending.remove(nid)
                    self._say(f"{nid}: ready after {time.monotonic() - start:.1f}s")
                    continue
                if nid in self._procs and self._procs[nid].poll() is not None:
                    raise NodeStartError(self._exited_early(nid) or f"{nid} exited")
                err = (doc or {}).get("error") if doc else None
                last[nid] = (
                    f"HTTP {code} {err.get('code', '')}".strip()
                    if isinstance(err, dict)
                    else (f"HTTP {code}" if code else "no answer")
                )
            if not pending:
                break
            now = time.monotonic()
            if now - start > timeout:
                detail = ", ".join(f"{nid}: {last.get(nid, '?')}" for nid in pending)
                raise ClusterTimeout(f"not ready after {timeout:.0f}s: {detail}")
            if now >= next_note:
                self._say(
                    f"still waiting for {', '.join(pending)} to be ready ({now - start:.0f}s)"
                )
                next_note = now + 5.0
            time.sleep(0.2)
        return time.monotonic() - start

    # -- stopping ------------------------------------------------------------------

    def _wait_gone(self, node_id: str, pid: int, timeout: float) -> bool:
        proc = self._procs.get(node_id)
        if proc is not None and proc.pid == pid:
            try:
                proc.wait(timeout=max(timeout, 0))
            except subprocess.TimeoutExpired:
                return False
            self._reap(node_id)
            return True
        deadline = time.monotonic() + timeout
        while _pid_alive(pid):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    @property
    def stop_timeout(self) -> float:
        """The default wait before SIGKILL: the nodes' graceful stop may take up to
        [http] shutdown_grace_seconds (node/shutdown.py), plus STOP_MARGIN to close."""
        return self.config.http.shutdown_grace_seconds + STOP_MARGIN

    def stop_node(self, node_id: str, timeout: float | None = None) -> StopOutcome:
        """SIGTERM the node and wait; SIGKILL it (with a warning) after `timeout`
        (default: stop_timeout)."""
        return self._stop_many([node_id], timeout)[node_id]

    def _stop_many(self, node_ids: Sequence[str], timeout: float | None) -> dict[str, StopOutcome]:
        timeout = self.stop_timeout if timeout is None else timeout
        outcome: dict[str, StopOutcome] = {}
        pids: dict[str, int] = {}
        for nid in node_ids:
            pid = self.pid(nid)
            if pid is None:
                outcome[nid] = "not running"
                self._clear_pid_file(nid)
                continue
            pids[nid] = pid
            _signal(pid, signal.SIGTERM)
            _signal(pid, signal.SIGCONT)  # a paused node could not act on SIGTERM
        # Signal all first, then wait: nodes shut down in parallel.
        deadline = time.monotonic() + timeout
        for nid, pid in pids.items():
            if self._wait_gone(nid, pid, deadline - time.monotonic()):
                outcome[nid] = "stopped"
                self._say(f"{nid}: stopped")
            else:
                self._warn(f"{nid} (pid {pid}) ignored SIGTERM for {timeout:.0f}s; sending SIGKILL")
                _signal(pid, signal.SIGKILL)
                self._wait_gone(nid, pid, 10.0)
                outcome[nid] = "killed"
            self._clear_pid_file(nid)
        return outcome

    def kill_node(self, node_id: str) -> bool:
        """SIGKILL the node (a crash, for demos and tests); False if it was not running."""
        with self._lock:  # no restart by another thread between the kill and the pid file
            pid = self.pid(node_id)
            if pid is None:
                self._clear_pid_file(node_id)
                return False
            _signal(pid, signal.SIGKILL)
            if not self._wait_gone(node_id, pid, 10.0):
                raise SupervisorError(f"{node_id} (pid {pid}) survived SIGKILL")
            self._clear_pid_file(node_id)
        self._say(f"{node_id}: killed (pid {pid})")
        return True

    def pause_node(self, node_id: str) -> None:
        """SIGSTOP the node: it stays in memory but answers nothing (a frozen process)."""
        pid = self.pid(node_id)
        if pid is None:
            raise SupervisorError(f"{node_id} is not running")
        _signal(pid, signal.SIGSTOP)

    def resume_node(self, node_id: str) -> None:
        pid = self.pid(node_id)
        if pid is None:
            raise SupervisorError(f"{node_id} is not running")
        _signal(pid, signal.SIGCONT)

    def wipe_node(self, node_id: str) -> None:
        """Delete the node's data (it must be stopped); its node.log (and rotations) are kept."""
        if self.is_running(node_id):
            raise SupervisorError(f"{node_id} is running: stop it before wiping its data")
        data_dir = self.data_dir(node_id)
        if not data_dir.is_dir():
            return
        for entry in data_dir.iterdir():
            if is_log_file(entry.name):
                continue  # the log explains what happened before the wipe
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        self._say(f"{node_id}: data wiped ({data_dir})")

    # -- whole cluster -------------------------------------------------------------

    def start_and_wait(self, node_id: str, timeout: float = 60.0) -> int:
        """Start one node (if stopped), wait until it is live, then ready."""
        was_running = self.is_running(node_id)
        pid = self.start_node(node_id)
        if not was_running:
            took = self.wait_live(node_id, timeout=timeout)
            self._say(f"{node_id}: live after {took:.1f}s")
        self.wait_ready(node_id, timeout=timeout)
        return pid

    def restart_node(
        self, node_id: str, stop_timeout: float | None = None, ready_timeout: float = 60.0
    ) -> int:
        """Graceful stop (SIGKILL after stop_timeout), start, wait until ready."""
        self.stop_node(node_id, stop_timeout)
        return self.start_and_wait(node_id, timeout=ready_timeout)

    def up(self, timeout: float = 60.0, live_timeout: float = 30.0) -> dict[str, int]:
        """Start every stopped node, wait until each is live, then until all are ready.
        Running nodes are left alone.

        The nodes start together, not each live before the next: a node takes 0.6-1.1 s to
        be live (0.43 s of it importing node.main, `-X importtime`), three in a row were
        most of every test cluster's start-up. A 3-node up() took a median 6.19 s one at a
        time and 3.00 s together (the old loop and this one alternating in one process,
        6 fresh clusters each, on 2 cores at load ~5; issue 29)."""
        stopped = [nid for nid in self.node_ids if not self.is_running(nid)]
        pids = {nid: self.start_node(nid) for nid in self.node_ids}
        for nid in stopped:
            took = self.wait_live(nid, timeout=live_timeout)
            self._say(f"{nid}: live after {took:.1f}s")
        self.wait_ready(None, timeout=timeout)
        return pids

    def down(self, timeout: float | None = None) -> dict[str, StopOutcome]:
        """SIGTERM every node, wait up to `timeout`, SIGKILL the rest (with a warning)."""
        return self._stop_many(self.node_ids, timeout)

    def kill_all(self) -> None:
        """SIGKILL every node: the fast teardown after a failed test."""
        for nid in self.node_ids:
            self.kill_node(nid)

    def close(self) -> None:
        """Reap children that already exited (does not stop running nodes)."""
        for nid in list(self._procs):
            self._reap(nid)
