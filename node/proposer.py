"""Group commit and read barriers: the asyncio side of the raft hand-off.

Write ops and linearizable reads that arrive while an entry is in flight wait for the
next one; that entry carries all of their ops at once (one raft round trip, one fsync,
one RocksDB WriteBatch for many ops). A read is linearizable once ANY entry proposed
after the read arrived has been applied on this node, so waiting reads ride along in the
next entry, which is empty ("a barrier") when no write is pending.

An entry in flight that hears nothing back within `inflight_timeout` is given up: its
writers get "timeout" (outcome unknown: it may still commit) and its readers
"unavailable", and the proposer moves on. pysyncobj can lose the callback of an entry (a
forwarded command whose send or reply is lost, a snapshot installed over a waiting
index); without this expiry one lost callback stopped the node proposing anything until
the next leader change. A callback that arrives after the expiry is ignored.

Whatever goes wrong inside submit() means "outcome unknown", never "not applied":
pysyncobj queues the command before the steps that can raise. Only an explicit NO_LEADER
from raft (the command was never queued) is reported as "nothing was applied".
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from statekeeper.node import entry
from statekeeper.node.config import RAFT_ENTRY_LIMIT_BYTES
from statekeeper.node.errors import OpError
from statekeeper.node.raft import SubmitError

if TYPE_CHECKING:
    from statekeeper.node.metrics import NodeMetrics

Submit = Callable[[bytes, Callable[[object, "SubmitError | None"], None]], None]


def _error_for(err: SubmitError) -> OpError:
    if err is SubmitError.NO_LEADER:
        return OpError("unavailable", "no raft leader is reachable; nothing was applied, retry")
    if err is SubmitError.ENTRY_TOO_LARGE:
        return OpError(
            "request_too_large",
            f"the raft entry of this request would exceed {RAFT_ENTRY_LIMIT_BYTES} bytes, "
            "the most one raft entry may hold (docs/protocol.md, 'Raft entries'); nothing "
            "was applied: send fewer or smaller ops",
        )
    return OpError(
        "timeout",
        "the leader changed before the write was confirmed; it may or may not have been "
        "applied: retry with the same idempotency_key",
    )


@dataclass(eq=False)
class _Pending:
    ops: list[dict] = field(default_factory=list)
    # (future, start, stop): the future of ops[start] (stop None) or of ops[start:stop].
    futures: list[tuple[asyncio.Future, int, int | None]] = field(default_factory=list)
    readers: list[asyncio.Future] = field(default_factory=list)
    size: int = 0
    expiry: asyncio.TimerHandle | None = None


def _add_run(p: _Pending, fut: asyncio.Future, n: int) -> tuple[int, asyncio.Future]:
    """Make `fut` the future of the last `n` ops queued in `p`."""
    stop = len(p.ops)
    p.futures.append((fut, stop - n, stop))
    return n, fut


def _writers(p: _Pending) -> list[asyncio.Future]:
    return [f for f, _, _ in p.futures]


class Proposer:
    """Gathers write ops and read barriers into raft entries, max_inflight at a time."""

    def __init__(
        self,
        submit: Submit,
        *,
        max_entry_bytes: int = 4 * 1024 * 1024,  # node/config.py RaftSettings says why
        max_inflight: int = 1,
        inflight_timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
        metrics: NodeMetrics | None = None,
    ):
        self._submit = submit
        self._max_entry_bytes = max_entry_bytes
        self._max_inflight = max_inflight
        self._inflight_timeout = inflight_timeout
        # Provisional: the leader restamps every entry with its own time (node/raft/).
        self._clock = clock
        self._pending = _Pending()
        self._inflight: set[_Pending] = set()
        self._flush_scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self.entries_proposed = 0
        self.ops_proposed = 0
        self._metrics = metrics

    def _loop_now(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._loop_thread = threading.get_ident()
        return self._loop

    def _hand_over(self, p: _Pending, results, err) -> None:
        """From the raft thread: complete `p` on the loop. In a node raft runs on this
        loop's own thread (node/raft/loop_driver.py), where call_soon is enough:
        call_soon_threadsafe would also write the loop's wake-up descriptor, one more
        write and read system call per entry."""
        loop = self._loop
        assert loop is not None
        if threading.get_ident() == self._loop_thread:
            loop.call_soon(self._complete, p, results, err)
        else:
            loop.call_soon_threadsafe(self._complete, p, results, err)

    async def write(self, op: dict, size_hint: int = 0) -> dict:
        """Replicate one validated write op; returns its own result from apply."""
        return await self.write_many([op], size_hint)[0]

    def write_many(self, ops: list[dict], size_hint: int = 0) -> list[asyncio.Future]:
        """Queue validated write ops, in order; one future each, resolved with the op's
        result from apply (or its OpError) like write()."""
        loop = self._loop_now()
        futures = []
        for op in ops:
            fut = loop.create_future()
            if self._pending.ops and self._pending.size + size_hint > self._max_entry_bytes:
                self._flush(force=True)
            p = self._pending
            p.futures.append((fut, len(p.ops), None))
            p.ops.append(op)
            p.size += size_hint
            futures.append(fut)
        self._schedule()
        return futures

    def write_runs(self, ops: list[dict], size_hint: int = 0) -> list[tuple[int, asyncio.Future]]:
        """Queue validated write ops, in order, like write_many(), but with one future per
        run of them that shares a raft entry: (n, future), the future resolved with the
        list of the run's n results or failed with the entry's OpError. A client batch's
        ops share one entry unless its size bound splits them. Proposing a 64-put batch
        and waiting for it: write_many + gather 3.0 us per put, write_runs 0.7 (entry
        encode included; process time in-process, best of 5, a submit that answers at
        once); futures, gather and _complete were about 5 % of the leader's CPU under
        batches of 64 puts at 16 clients (py-spy --gil)."""
        loop = self._loop_now()
        runs: list[tuple[int, asyncio.Future]] = []
        start = 0  # the first op of the run being queued
        for i, op in enumerate(ops):
            p = self._pending
            if p.ops and p.size + size_hint > self._max_entry_bytes:
                if i > start:
                    runs.append(_add_run(p, loop.create_future(), i - start))
                    start = i
                self._flush(force=True)
                p = self._pending
            p.ops.append(op)
            p.size += size_hint
        if len(ops) > start:
            runs.append(_add_run(self._pending, loop.create_future(), len(ops) - start))
        self._schedule()
        return runs

    async def barrier(self) -> None:
        """Return once an entry proposed after this call has been applied locally."""
        fut = self._loop_now().create_future()
        self._pending.readers.append(fut)
        self._schedule()
        await fut

    def _schedule(self) -> None:
        # Defer to the end of this loop iteration so requests parsed together share an entry.
        if not self._flush_scheduled and len(self._inflight) < self._max_inflight:
            self._flush_scheduled = True
            self._loop_now().call_soon(self._flush)

    def _flush(self, force: bool = False) -> None:
        self._flush_scheduled = False
        p = self._pending
        if not (p.ops or p.readers):
            return
        if len(self._inflight) >= self._max_inflight and not force:
            return
        self._pending = _Pending()
        self._inflight.add(p)
        payload = entry.encode(int(self._clock() * 1000), p.ops)
        self.entries_proposed += 1
        self.ops_proposed += len(p.ops)
        loop = self._loop_now()
        p.expiry = loop.call_later(self._inflight_timeout, self._expire, p)
        m = self._metrics
        if m is None:

            def on_applied(results, err):  # raft thread: hand over, never block
                self._hand_over(p, results, err)

        else:
            m.entry_size.observe(len(payload))
            observe, now = m.proposal_duration.observe, time.perf_counter
            submitted = now()

            def on_applied(results, err):  # raft thread: hand over, never block
                if err is None:
                    observe(now() - submitted)
                self._hand_over(p, results, err)

        try:
            self._submit(payload, on_applied)
        except Exception:  # raised after the command may have been queued: unknown
            self._complete(p, None, SubmitError.OUTCOME_UNKNOWN)

    def _expire(self, p: _Pending) -> None:
        self._complete(p, None, SubmitError.OUTCOME_UNKNOWN)

    def _complete(self, p: _Pending, results, err) -> None:
        if p not in self._inflight:  # already failed by leadership_lost() or expired
            return
        self._inflight.discard(p)
        if p.expiry is not None:
            p.expiry.cancel()
        if err is not None or not isinstance(results, list) or len(results) != len(p.ops):
            if self._metrics is not None:
                self._metrics.proposals_failed.inc()
            error = _error_for(err or SubmitError.OUTCOME_UNKNOWN)
            for f in _writers(p) + p.readers:
                if not f.done():
                    f.set_exception(error)
        else:
            for f, start, stop in p.futures:
                if not f.done():
                    f.set_result(results[start] if stop is None else results[start:stop])
            for f in p.readers:
                if not f.done():
                    f.set_result(None)
        if self._pending.ops or self._pending.readers:
            self._schedule()

    def leadership_lost(self) -> None:
        """Thread-safe. Entries proposed through a leader that stepped down may still commit
        or may be dropped; answer their writers "outcome unknown" now instead of letting them
        wait for a timeout, and their readers "unavailable" (a read has no side effect)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._fail_inflight)

    def _fail_inflight(self) -> None:
        batches, self._inflight = self._inflight, set()
        if self._metrics is not None and batches:
            self._metrics.proposals_failed.inc(len(batches))
        for p in batches:
            if p.expiry is not None:
                p.expiry.cancel()
            for f in _writers(p):
                if not f.done():
                    f.set_exception(_error_for(SubmitError.OUTCOME_UNKNOWN))
            for f in p.readers:
                if not f.done():
                    f.set_exception(OpError("unavailable", "this node lost its leadership; retry"))
        if self._pending.ops or self._pending.readers:
            self._schedule()

    def fail_all(self, error: OpError) -> None:
        """Used at shutdown: nothing pending stays waiting."""
        p, self._pending = self._pending, _Pending()
        for f in _writers(p) + p.readers:
            if not f.done():
                f.set_exception(error)
