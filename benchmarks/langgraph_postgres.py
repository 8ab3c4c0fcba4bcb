"""A throwaway local PostgreSQL for `benchmarks.langgraph_savers`.

`LocalPostgres` runs initdb on a fresh data directory in a temp dir, starts the server on a
free loopback port with fsync=on and synchronous_commit=on (the durable settings: a commit
returns after its WAL record is flushed), and stops it and deletes the directory at the
end. PostgreSQL refuses to run as root, so under root every server command runs as the
`postgres` user through runuser (or su). Binaries: `bin_dir`, else the newest
/usr/lib/postgresql/*/bin, else initdb on PATH.
"""

from __future__ import annotations

import glob
import os
import pwd
import random
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

from statekeeper.benchmarks.cluster_control import free_port_block

SERVER_SETTINGS = {
    "fsync": "on",
    "synchronous_commit": "on",
    "listen_addresses": "127.0.0.1",
    "max_connections": "100",
}


def find_bin_dir(explicit: str | None = None) -> Path:
    if explicit:
        return Path(explicit)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
    if found:
        return Path(found[-1])
    initdb = shutil.which("initdb")
    if initdb:
        return Path(os.path.realpath(initdb)).parent
    raise RuntimeError("no PostgreSQL binaries found: pass --pg-bin DIR (with initdb, pg_ctl)")


def as_user_prefix(user: str = "postgres") -> list[str]:
    """The command prefix that runs a command as `user` when we are root (else nothing)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("runuser"):
        return ["runuser", "-u", user, "--"]
    return ["su", user, "-s", "/bin/sh", "-c"]  # the command follows as one string


class LocalPostgres:
    """initdb + pg_ctl start on a free port; a context manager. `conninfo` once started."""

    def __init__(self, bin_dir: str | None = None, parent: Path | None = None) -> None:
        self.bin = find_bin_dir(bin_dir)
        self.parent = parent
        self.dir: Path | None = None
        self.port = 0
        self.prefix = as_user_prefix()
        self.settings: dict[str, str] = {}  # SHOW-ed after the start

    @property
    def data(self) -> Path:
        assert self.dir is not None
        return self.dir / "data"

    @property
    def conninfo(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres?sslmode=disable"

    def _run(self, *cmd: str, timeout: float = 120.0) -> None:
        args = [str(self.bin / cmd[0]), *cmd[1:]]
        full = self.prefix + ([shlex.join(args)] if self.prefix[:1] == ["su"] else args)
        proc = subprocess.run(full, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(
                f"{shlex.join(full)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}"
            )

    def start(self) -> LocalPostgres:
        self.dir = Path(tempfile.mkdtemp(prefix="pg-langgraph-", dir=self.parent))
        if self.prefix:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        self._run(
            "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
            "--no-instructions",
        )  # fmt: skip
        self.port = free_port_block(1, set(), random.Random())
        opts = {**SERVER_SETTINGS, "port": str(self.port), "unix_socket_directories": str(self.dir)}
        o = " ".join(f"-c {k}={v}" for k, v in opts.items())
        log = str(self.dir / "server.log")
        self._run("pg_ctl", "-D", str(self.data), "-l", log, "-w", "-t", "60", "-o", o, "start")
        self.settings = self._show(
            ("fsync", "synchronous_commit", "wal_sync_method", "server_version")
        )
        if self.settings.get("fsync") != "on" or self.settings.get("synchronous_commit") != "on":
            raise RuntimeError(f"PostgreSQL did not take the durable settings: {self.settings}")
        return self

    def _show(self, names: tuple[str, ...]) -> dict[str, str]:
        import psycopg

        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            return {n: str(conn.execute(f"SHOW {n}").fetchone()[0]) for n in names}  # type: ignore[index]

    def stop(self) -> None:
        if self.dir is None:
            return
        try:
            if (self.data / "postmaster.pid").exists():
                try:
                    self._run(
                        "pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop", timeout=60
                    )
                except (RuntimeError, subprocess.TimeoutExpired):
                    self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> LocalPostgres:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
