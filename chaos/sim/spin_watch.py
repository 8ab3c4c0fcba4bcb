"""A callback that never returns, caught: the one spin the loop itself cannot see.

Virtual time moves only between callbacks, so a loop inside ONE callback that waits for
time to pass (pysyncobj's AppendEntries loop waits for a connection timeout of wall
time) spins forever here, and SPIN_LIMIT (loop.py) never fires, since the loop makes no
pass at all. A long exploration wedged on one seed that way for 40 minutes (seed
200061). SpinWatch is a thread that looks at the loop's pass counter every few wall
seconds; when it has not moved for `limit` wall seconds, it signals the main thread,
whose handler raises CallbackSpin out of the spinning callback, naming the virtual time
and where it spun, and stops the loop; asyncio hands the exception itself to whoever
catches a callback's errors, so the watch keeps it (`spun`) and World.run raises it once
the loop has stopped (scenario.run reports it as the run's failure).

A real node would not hang there for ever: it would stall for that wall-clock timeout,
and again at every reconnection. Wall time plays no part in a verdict otherwise; this
only decides when a run that can never end is ended.
"""

from __future__ import annotations

import signal
import threading
import traceback
from collections.abc import Callable

LIMIT_SECONDS = 60.0  # wall seconds without a loop pass (a whole 30 s world takes ~20)
SIGNAL = signal.SIGUSR2


class CallbackSpin(BaseException):
    """One callback ran LIMIT_SECONDS of wall time without returning to the loop."""


class SpinWatch:
    """with SpinWatch(lambda: selector.passes, lambda: virtual_now, loop.stop): ... (main
    thread); afterwards `spun` is the CallbackSpin raised, if any."""

    def __init__(
        self,
        passes: Callable[[], int],
        now: Callable[[], float],
        stop: Callable[[], None],
        limit: float | None = None,
    ) -> None:
        self._passes = passes
        self._now = now
        self._stop_loop = stop
        self.spun: CallbackSpin | None = None
        self.limit = LIMIT_SECONDS if limit is None else limit
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._previous = None

    def __enter__(self) -> SpinWatch:
        if threading.current_thread() is not threading.main_thread():
            return self  # signals reach the main thread only: nothing to watch with
        self._previous = signal.signal(SIGNAL, self._raise)
        self._thread = threading.Thread(target=self._watch, name="sim-spin-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        signal.signal(SIGNAL, self._previous)

    def _watch(self) -> None:
        main = threading.main_thread().ident
        last, still = self._passes(), 0.0
        tick = min(1.0, self.limit / 4)
        while not self._stop.wait(tick):
            now = self._passes()
            still = still + tick if now == last else 0.0
            last = now
            if still >= self.limit:
                signal.pthread_kill(main, SIGNAL)
                still = 0.0

    def _raise(self, signum: int, frame) -> None:
        where = " <- ".join(
            f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno} {f.name}"
            for f in reversed(traceback.extract_stack(frame)[-4:])
        )
        self.spun = CallbackSpin(
            f"one callback ran {self.limit:g} s of wall time without returning, at virtual "
            f"time {self._now():.6f}: {where}"
        )
        self._stop_loop()
        raise self.spun
