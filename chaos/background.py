"""An asyncio loop on a thread of its own, for the parts of a chaos run that go on beside
the workload (watchers, lockers): `start()` returns once `_main()` signalled it is running
(or raises what stopped it), `stop()` asks `_main()` to finish and joins the thread.

A subclass implements `async _main()`: it calls `self._begin()` first, sets
`self._started` once it is up, and returns after `await self._stopping.wait()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading


class BackgroundLoop:
    name = "chaos-background"  # the thread's name
    stop_timeout = 15.0  # how long stop() waits for the thread

    def __init__(self) -> None:
        self.start_revision = 0
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    def start(self, timeout: float = 30.0) -> int:
        """Start; returns `start_revision` as `_main()` set it."""
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        if not self._started.wait(timeout + 5.0) or self._error is not None:
            self.stop()
            raise RuntimeError(f"{self.name} did not start: {self._error!r}")
        return self.start_revision

    def stop(self) -> None:
        if self._thread is None:
            return
        if self._loop is not None and self._stopping is not None:
            with contextlib.suppress(RuntimeError):  # loop already closed
                self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(self.stop_timeout)
        self._thread = None

    def _begin(self) -> asyncio.Event:
        """Call first in `_main()`: the loop and the stop event; returns the event."""
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        return self._stopping

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - reported by start()
            self._error = exc
        finally:
            self._started.set()

    async def _main(self) -> None:
        raise NotImplementedError
