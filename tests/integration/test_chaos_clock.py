"""The clock-jump scenario's faked clock, checked on a real child process: with the
environment chaos.faults.faketime_env builds, a Python process's time.time() follows the
timestamp file at runtime (forward and back), time.monotonic() does not, time.sleep()
works, and threads share the GIL at normal speed. Each of these failed with libfaketime's
defaults (see faketime_env's docstring). A few seconds; needs Debian's faketime package."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from statekeeper.chaos.faults import faketime_env, find_libfaketime

pytestmark = pytest.mark.integration

CHILD = r"""
import os, sys, threading, time

def cpu():
    x = 0
    for i in range(1_500_000):
        x += i

def io():  # short blocking calls: each needs the GIL back from a busy thread
    a, b = os.pipe()
    for i in range(1000):
        os.write(b, b"x")
        os.read(a, 1)

t = time.perf_counter()
threads = [threading.Thread(target=f) for f in (cpu, cpu, io)]
[th.start() for th in threads]
[th.join() for th in threads]
print("gil", time.perf_counter() - t, flush=True)
time.sleep(0.05)  # EINVAL under plain libfaketime with DONT_FAKE_MONOTONIC
print("slept", flush=True)
for line in sys.stdin:
    print(time.time(), time.monotonic(), flush=True)
"""


@pytest.fixture
def lib() -> str:
    path = find_libfaketime()
    if path is None:
        pytest.skip("libfaketime is not installed (apt-get install faketime)")
    return path


def _ask(proc: subprocess.Popen) -> tuple[float, float]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("t\n")
    proc.stdin.flush()
    wall, mono = proc.stdout.readline().split()
    return float(wall), float(mono)


def _wait_offset(proc: subprocess.Popen, expected: float, timeout: float = 4.0) -> float:
    """Seconds until the child's wall clock is off ours by ``expected`` (+- 60 s)."""
    start = time.monotonic()
    while True:
        wall, mono = _ask(proc)
        assert abs(mono - time.monotonic()) < 5.0  # the monotonic clock never jumps
        if abs(wall - time.time() - expected) < 60:
            return time.monotonic() - start
        assert time.monotonic() - start < timeout, f"offset {wall - time.time():.0f} s"
        time.sleep(0.1)


def test_faked_wall_clock_follows_the_file_and_nothing_else_breaks(lib: str, tmp_path: Path) -> None:
    stamp = tmp_path / "clock"
    stamp.write_text("+0\n")
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        env={**faketime_env(lib, stamp), "PATH": "/usr/bin:/bin"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        gil = proc.stdout.readline()
        assert gil.startswith("gil "), gil + (proc.stderr.read() if proc.poll() is not None else "")
        # ~0.5 s; 10 s and more with libfaketime's monotonic "fix" for condition variables
        assert float(gil.split()[1]) < 5.0, gil
        assert proc.stdout.readline().strip() == "slept"
        _wait_offset(proc, 0)
        for offset, seconds in (("+25h", 25 * 3600), ("-3h", -3 * 3600), ("+0", 0)):
            stamp.write_text(offset + "\n")
            assert _wait_offset(proc, seconds) < 2.5  # FAKETIME_CACHE_DURATION=1
    finally:
        proc.kill()
        proc.wait()
