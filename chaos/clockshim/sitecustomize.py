"""Imported at start-up by a node that the clock-jump scenario runs under libfaketime.

The chaos suite fakes one node's wall clock with libfaketime (LD_PRELOAD) and leaves its
monotonic clock alone (DONT_FAKE_MONOTONIC=1), so raft timeouts are unaffected. Debian's
libfaketime 0.9.10 then breaks ``time.sleep`` on Python >= 3.11: CPython sleeps with
``clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, ...)`` and libfaketime hands the kernel
a negative deadline, so every sleep raises ``OSError: [Errno 22] Invalid argument``
(wolfcw/libfaketime#426, fixed upstream after 0.9.10). This module replaces
``time.sleep`` with a relative-timeout ``select()`` on the monotonic clock, which
libfaketime passes through untouched. Nothing else changes: ``time.time()`` and friends
still go through libfaketime, which is the point.

It only acts when libfaketime is preloaded; the chaos runner puts this directory on the
node's PYTHONPATH only for that scenario.
"""

from __future__ import annotations

import os
import select
import time


def _sleep(seconds: float) -> None:
    seconds = float(seconds)  # TypeError for non-numbers, like time.sleep
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        select.select([], [], [], left)  # EINTR: retried by Python (PEP 475)


if "faketime" in os.environ.get("LD_PRELOAD", ""):
    time.sleep = _sleep
