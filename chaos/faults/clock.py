"""Wall-clock jumps: nodes run under libfaketime, their clock offset read from a file
per node (chaos/clockshim keeps time.sleep working under it)."""

from __future__ import annotations

import glob
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from statekeeper import IMPORT_ROOT
from statekeeper.chaos.faults.base import Fault, FaultContext, FaultError
from statekeeper.chaos.report import PASS, UNKNOWN, Verdict

if TYPE_CHECKING:
    from statekeeper.node.config import ClusterConfig

__all__ = ["ClockJump", "faketime_env", "find_libfaketime"]

LIBFAKETIME_GLOBS = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/*/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)
CHAOS_DIR = Path(__file__).resolve().parent.parent
CLOCK_SHIM_DIR = CHAOS_DIR / "clockshim"


def find_libfaketime() -> str | None:
    for pattern in LIBFAKETIME_GLOBS:
        for path in sorted(glob.glob(pattern)):
            if os.path.exists(path):
                return path
    return None


def faketime_env(lib: str, timestamp_file: str | os.PathLike[str]) -> dict[str, str]:
    """Environment that runs a Python process under libfaketime with its wall clock
    offset by whatever ``timestamp_file`` says (e.g. "+3h", "-1d", "+0"), re-read at most
    once a second (FAKETIME_CACHE_DURATION=1), and its monotonic clock untouched (raft
    timeouts, asyncio). chaos/clockshim makes time.sleep work under it (see its
    docstring).

    Measured on Debian's libfaketime 0.9.10 with CPython 3.11 (a node's put / get, one
    client; three Python threads sharing the GIL):

    - not FAKETIME_NO_CACHE=1 (re-read on every call): every CLOCK_REALTIME read of the
      process then opens and parses the file, RocksDB's included: a put took 40 ms
      instead of 4.7 ms, get 6.4 ms instead of 1.8. With a 1 s cache a jump takes effect
      within a second and nodes run at their normal speed;
    - FAKETIME_FORCE_MONOTONIC_FIX=0: libfaketime otherwise rewrites the CLOCK_MONOTONIC
      deadlines of pthread_cond_timedwait, which CPython's GIL hand-off uses; three
      threads took 24.6 s instead of 0.5 s, and nodes answered in 50-100 ms;
    - time.sleep still fails (EINVAL, libfaketime#426): chaos/clockshim.
    """
    pythonpath = os.pathsep.join(
        p
        for p in (str(CLOCK_SHIM_DIR), IMPORT_ROOT, os.environ.get("PYTHONPATH", ""))
        if p
    )
    return {
        "LD_PRELOAD": lib,
        "FAKETIME_TIMESTAMP_FILE": str(timestamp_file),
        "FAKETIME_CACHE_DURATION": "1",
        "DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_FORCE_MONOTONIC_FIX": "0",
        "PYTHONPATH": pythonpath,
    }


class ClockJump(Fault):
    name = "clock-jump"
    watch_target = "leader"
    kind = "clock"
    description = (
        "wall clock jumps (libfaketime) of +25h then -3h on a follower, then on the "
        "leader, while idempotent writes go through every node and are re-sent later with "
        "the same key; idempotency window 1 h, so a jump that reaches the records' expiry "
        "shows up as a write applied twice"
    )
    retention_settings = {"idempotency_seconds": 3600}
    JUMPS: ClassVar[tuple[str, ...]] = ("+25h", "-3h")
    MIN_STEP_S: ClassVar[float] = 1.8  # libfaketime re-reads the offset once a second

    def __init__(self) -> None:
        self.files: dict[str, Path] = {}
        self.done: list[str] = []

    @classmethod
    def available(cls) -> tuple[bool, str]:
        if find_libfaketime() is None:
            return False, "libfaketime is not installed (apt-get install faketime)"
        return True, ""

    def node_env(self, cfg: ClusterConfig, work: Path) -> dict[str, dict[str, str]]:
        lib = find_libfaketime()
        if lib is None:
            raise FaultError("libfaketime is not installed (apt-get install faketime)")
        clocks = work / "faketime"
        clocks.mkdir(parents=True, exist_ok=True)
        env = {}
        for n in cfg.nodes:
            path = clocks / n.id
            path.write_text("+0\n")
            self.files[n.id] = path
            env[n.id] = faketime_env(lib, path)
        return env

    def set_offset(self, node_id: str, offset: str) -> None:
        path = self.files[node_id]
        tmp = path.with_suffix(".tmp")
        tmp.write_text(offset + "\n")
        tmp.replace(path)  # a reader never sees an empty file

    def start(self, ctx: FaultContext) -> str:
        if not self.files:
            raise FaultError("clock-jump needs its nodes started under libfaketime")
        leader = ctx.leader()
        follower = ctx.follower(leader)
        steps = [(follower, j) for j in self.JUMPS] + [(leader, j) for j in self.JUMPS]
        step_s = max(self.MIN_STEP_S, (ctx.window - 0.5) / len(steps))
        ctx.mark()
        for nid, offset in steps:
            self.set_offset(nid, offset)
            role = "follower" if nid == follower else "leader"
            self.done.append(f"{nid} ({role}) {offset}")
            ctx.log(f"clock of {nid} ({role}) now {offset}")
            time.sleep(step_s)
            self.set_offset(nid, "+0")
        return f"clock jumps, {step_s:.1f} s each: {', '.join(self.done)}"

    def stop(self, ctx: FaultContext) -> None:
        for nid in self.files:
            self.set_offset(nid, "+0")

    def verify(self, ctx: FaultContext) -> list[Verdict]:
        preloaded = []
        for nid in ctx.node_ids:
            pid = ctx.cluster.pid(nid)
            try:
                maps = Path(f"/proc/{pid}/maps").read_text() if pid else ""
            except OSError:
                maps = ""
            if "libfaketime" in maps:
                preloaded.append(nid)
        ok = len(preloaded) == len(ctx.node_ids)
        return [
            Verdict(
                "clocks faked (libfaketime loaded)",
                PASS if ok and self.done else UNKNOWN,
                f"{len(preloaded)}/{len(ctx.node_ids)} nodes",
                f"jumps: {', '.join(self.done) or 'none'}",
            )
        ]
