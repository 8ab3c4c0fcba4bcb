"""The chaos workload: concurrent clients doing conflicting ops, recorded as a history.

Every client is one asyncio task with its own ``AsyncClient`` and its own ``process`` id in
the history (``chaos.history``). Clients pick random ops on a small key set so that they
conflict: ``get`` (linearizable), ``put``, ``cas`` (by mod_revision, recorded by value),
``delete`` and ``txn`` over a fixed pair of keys (pairs keep the checker's partitions
small: a txn joins its keys into one partition). Every written value is unique
(``"<process>-<counter>"``), so a read names the write it saw, and every write carries its
own idempotency key.

Retries: the client library's retry loop is turned off and the workload retries itself
(same request, same idempotency key, next endpoint) until the op's deadline. That keeps
one logical op = one history op, and lets the workload know whether any attempt may have
reached a node. The final outcome is recorded:

- ``ok``: an answer that says what happened (a result, ``key_not_found``,
  ``compare_failed``);
- ``fail``: the op cannot have taken effect: the request was rejected as invalid, or EVERY
  attempt provably submitted nothing (connection refused before sending, or the server
  answered ``unavailable``, which the protocol defines as "nothing was submitted");
- ``info``: anything else (timeout, connection lost after sending, a garbled answer,
  stopped mid-flight). Unknown outcomes are kept as such, never guessed.

"Pinned readers" (a quarter of the clients by default) only read, always from one node:
agents reading from their local node. They are what makes a stale read show up when a node
is cut off but still answers (the mutation test relies on them).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from chaos.history import HistoryWriter
from client import (
    Compacted,
    Conflict,
    InvalidRequest,
    NotFound,
    RetryPolicy,
    StatekeeperError,
)

__all__ = ["OpMix", "Workload", "WorkloadConfig", "classify_error", "final_reads"]


@dataclass(frozen=True)
class OpMix:
    """Relative weights of the op kinds a (non-pinned) client picks from."""

    get: float = 0.35
    put: float = 0.20
    cas: float = 0.20
    txn: float = 0.20
    delete: float = 0.05

    def choices(self) -> tuple[list[str], list[float]]:
        names = ["get", "put", "cas", "txn", "delete"]
        return names, [getattr(self, n) for n in names]


@dataclass(frozen=True)
class WorkloadConfig:
    clients: int = 16
    keys: int = 8  # even: txns use fixed pairs (k0,k1), (k2,k3), ...
    seed: int = 7
    mix: OpMix = field(default_factory=OpMix)
    # Share of clients that only read, pinned to one node (rounded down).
    pinned_reader_share: float = 0.25
    # One HTTP attempt; above the cluster's request_timeout so the node's own
    # "timeout"/"unavailable" answer normally arrives first.
    attempt_timeout: float = 3.0
    # How long one op may keep retrying before it records its (unknown) outcome.
    op_deadline: float = 8.0
    # Pause between a client's ops (0: as fast as it can).
    think_time: float = 0.0
    ns: str = "chaos"

    def key_names(self) -> list[str]:
        return [f"k{i}" for i in range(self.keys)]


def classify_error(err: BaseException) -> tuple[str, bool]:
    """(error code, whether it proves the request was not submitted anywhere).

    Only two answers prove it: the connection was refused before anything was sent
    (``connection_failed``), or the node answered ``unavailable``/``not_ready`` with
    HTTP 503 (the protocol says nothing was submitted). Everything else may have been.
    """
    if isinstance(err, StatekeeperError):
        if err.code == "connection_failed":
            return err.code, True
        if err.code in ("unavailable", "not_ready") and err.status == 503:
            return err.code, True
        return err.code, False
    if isinstance(err, TimeoutError):
        return "client_timeout", False
    return type(err).__name__, False


class _Stop(Exception):
    """The workload is stopping: give up the op (outcome decided by the caller)."""


@dataclass
class Counters:
    ok: int = 0
    fail: int = 0
    info: int = 0

    def total(self) -> int:
        return self.ok + self.fail + self.info


class Workload:
    """Runs the clients in a background thread with its own event loop.

    ``start()`` returns at once; ``stop()`` lets in-flight ops finish (up to their
    deadline) and returns. ``counters`` is live, for progress lines.
    """

    def __init__(
        self,
        endpoints: Sequence[str],
        history: HistoryWriter,
        config: WorkloadConfig | None = None,
        *,
        run_id: str | None = None,
    ) -> None:
        if not endpoints:
            raise ValueError("the workload needs at least one endpoint")
        self.endpoints = list(endpoints)
        self.history = history
        self.config = config or WorkloadConfig()
        if self.config.keys < 2 or self.config.keys % 2:
            raise ValueError("keys must be an even number >= 2 (txns use key pairs)")
        self.run_id = run_id or uuid.uuid4().hex[:8]
        self.counters = Counters()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self.errors: dict[str, int] = {}

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("workload already started")
        self._thread = threading.Thread(target=self._run, name="chaos-workload", daemon=True)
        self._thread.start()
        self._started.wait(10.0)

    def stop(self, timeout: float | None = None) -> None:
        """Ask every client to stop after its current op; wait for them."""
        if self._thread is None:
            return
        if self._loop is not None and self._stopping is not None:
            with contextlib.suppress(RuntimeError):  # loop already closed
                self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(timeout if timeout is not None else self.config.op_deadline + 10.0)
        self._thread = None
        if self._error is not None:
            raise RuntimeError(f"the workload crashed: {self._error!r}") from self._error

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # surfaced by stop()
            self._error = exc
        finally:
            self._started.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        self._started.set()
        cfg = self.config
        n_pinned = int(cfg.clients * cfg.pinned_reader_share)
        tasks = []
        for p in range(cfg.clients):
            pinned = p >= cfg.clients - n_pinned
            tasks.append(asyncio.create_task(self._client(p, pinned)))
        await self._stopping.wait()
        # In-flight ops get until their deadline (they notice _stopping between retries).
        done, pending = await asyncio.wait(tasks, timeout=cfg.op_deadline + 2.0)
        for t in pending:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for t in done:
            if not t.cancelled() and t.exception() is not None:
                raise t.exception()  # type: ignore[misc]

    # ------------------------------------------------------------------ clients

    def _client_endpoints(self, p: int, pinned: bool) -> list[str]:
        n = len(self.endpoints)
        if pinned:
            return [self.endpoints[p % n]]
        start = p % n  # spread clients over the nodes
        return self.endpoints[start:] + self.endpoints[:start]

    async def _client(self, p: int, pinned: bool) -> None:
        from client import AsyncClient  # imported only where the async client is used

        cfg = self.config
        rng = random.Random(cfg.seed * 100_003 + p)
        keys = cfg.key_names()
        names, weights = cfg.mix.choices()
        assert self._stopping is not None
        # What this client last saw per key: (value, mod_revision); absent = (None, 0).
        seen: dict[str, tuple[str | None, int]] = {}
        async with AsyncClient(
            self._client_endpoints(p, pinned),
            ns=cfg.ns,
            timeout=cfg.attempt_timeout,
            retry=RetryPolicy.disabled(),
            max_connections=4,
            prefer_leader=False,  # spread over the nodes on purpose: followers serve too
        ) as c:
            counter = 0
            while not self._stopping.is_set():
                counter += 1
                f = "get" if pinned else rng.choices(names, weights)[0]
                key = rng.choice(keys)
                op = getattr(self, f"_op_{f}")
                await op(c, p, counter, key, seen, rng)
                if cfg.think_time:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stopping.wait(), cfg.think_time)

    def _names(self, p: int, n: int) -> tuple[str, str]:
        """(unique value, idempotency key) of op n of process p."""
        return f"{p}-{n}", f"{self.run_id}-{p}-{n}"

    async def _attempts(self, call: Callable[[], Awaitable[Any]]) -> tuple[str, Any]:
        """Run one op with retries; returns (outcome, result or exception).

        Outcomes: "ok" (result, or NotFound / Conflict: definite answers), "fail"
        (definitely not applied), "info" (unknown).
        """
        assert self._stopping is not None
        deadline = time.monotonic() + self.config.op_deadline
        maybe_submitted = False
        delay = 0.05
        while True:
            try:
                return "ok", await call()
            except (NotFound, Conflict) as e:
                return "ok", e
            except (InvalidRequest, Compacted) as e:
                self._note(e.code)
                return "fail", e
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - any other failure: maybe retry
                code, not_sent = classify_error(e)
                self._note(code)
                maybe_submitted = maybe_submitted or not not_sent
                last: Exception = e
            if self._stopping.is_set() or time.monotonic() + delay >= deadline:
                return ("info" if maybe_submitted else "fail"), last
            await asyncio.sleep(delay * (0.5 + random.random() / 2))
            delay = min(delay * 2, 0.5)

    def _note(self, code: str) -> None:
        self.errors[code] = self.errors.get(code, 0) + 1

    def _finish(self, op_id: int | str, outcome: str, err: Any = None, **result: Any) -> None:
        h = self.history
        if outcome == "ok":
            h.ok(op_id, **result)
            self.counters.ok += 1
        else:
            code, _ = classify_error(err) if err is not None else ("stopped", False)
            if outcome == "fail":
                h.fail(op_id, error=code)
                self.counters.fail += 1
            else:
                h.info(op_id, error=code)
                self.counters.info += 1

    async def _run_op(
        self, op_id: int | str, call: Callable[[], Awaitable[Any]]
    ) -> tuple[str, Any]:
        """_attempts, recording info if the op is cancelled mid-flight."""
        try:
            return await self._attempts(call)
        except asyncio.CancelledError:
            self.history.info(op_id, error="cancelled")
            self.counters.info += 1
            raise

    # ------------------------------------------------------------------ ops

    async def _op_get(self, c, p, n, key, seen, rng) -> None:
        op_id = self.history.invoke(p, "get", key)
        outcome, res = await self._run_op(op_id, lambda: c.get(key))
        if outcome != "ok":
            self._finish(op_id, outcome, res)
            return
        if isinstance(res, NotFound):
            seen[key] = (None, 0)
            self._finish(op_id, "ok", value=None, revision=res.revision)
            return
        value = res.text
        seen[key] = (value, res.mod_revision)
        self._finish(op_id, "ok", value=value, revision=res.revision, mod_revision=res.mod_revision)

    async def _op_put(self, c, p, n, key, seen, rng) -> None:
        value, ik = self._names(p, n)
        op_id = self.history.invoke(p, "put", key, value=value, idempotency_key=ik)
        outcome, res = await self._run_op(op_id, lambda: c.put(key, value, idempotency_key=ik))
        if outcome == "ok":
            seen[key] = (value, res.revision)
            self._finish(op_id, "ok", revision=res.revision)
        else:
            self._finish(op_id, outcome, res)

    async def _op_delete(self, c, p, n, key, seen, rng) -> None:
        _, ik = self._names(p, n)
        op_id = self.history.invoke(p, "delete", key, idempotency_key=ik)
        outcome, res = await self._run_op(op_id, lambda: c.delete(key, idempotency_key=ik))
        if outcome == "ok":
            seen[key] = (None, 0)
            self._finish(op_id, "ok", revision=res.revision, deleted=res.deleted)
        else:
            self._finish(op_id, outcome, res)

    async def _op_cas(self, c, p, n, key, seen, rng) -> None:
        value, ik = self._names(p, n)
        expect, mod_rev = seen.get(key, (None, 0))
        # By mod_revision, recorded by value: with unique values the two are equivalent
        # (a version would not be: it restarts at 1 after a delete).
        kw: dict[str, Any] = (
            {"expect_mod_revision": mod_rev} if expect is not None else {"must_not_exist": True}
        )
        op_id = self.history.invoke(p, "cas", key, value=value, expect=expect, idempotency_key=ik)
        outcome, res = await self._run_op(
            op_id, lambda: c.cas(key, value, idempotency_key=ik, **kw)
        )
        if outcome != "ok":
            self._finish(op_id, outcome, res)
            return
        if isinstance(res, Conflict):
            cur = res.current
            if cur is None:
                seen[key] = (None, 0)
                self._finish(op_id, "ok", succeeded=False, value=None, revision=res.revision)
            else:
                seen[key] = (cur.text, cur.mod_revision)
                self._finish(
                    op_id,
                    "ok",
                    succeeded=False,
                    value=cur.text,
                    mod_revision=cur.mod_revision,
                    revision=res.revision,
                )
            return
        seen[key] = (value, res.revision)
        self._finish(op_id, "ok", succeeded=True, revision=res.revision)

    async def _op_txn(self, c, p, n, key, seen, rng) -> None:
        from client import compare, ops

        keys = self.config.key_names()
        i = keys.index(key) // 2 * 2
        a, b = keys[i], keys[i + 1]
        if rng.random() < 0.5:
            a, b = b, a
        va, ik = self._names(p, n)
        vb = f"{va}b"  # still unique: no other op writes a value ending in "b"
        expect, _ = seen.get(a, (None, 0))
        cmp = compare.value(a) == expect if expect is not None else compare.missing(a)
        both = rng.random() < 0.5
        success = [ops.put(a, va), ops.put(b, vb) if both else ops.get(b)]
        failure = [ops.get(a), ops.get(b)]
        op_id = self.history.invoke(
            p,
            "txn",
            keys=[a, b],
            compare=[{"key": a, "value": expect, "op": "=="}],
            success=[
                {"f": "put", "key": a, "value": va},
                {"f": "put", "key": b, "value": vb} if both else {"f": "get", "key": b},
            ],
            failure=[{"f": "get", "key": a}, {"f": "get", "key": b}],
            idempotency_key=ik,
        )
        outcome, res = await self._run_op(
            op_id, lambda: c.txn([cmp], success, failure, idempotency_key=ik)
        )
        if outcome != "ok":
            self._finish(op_id, outcome, res)
            return
        results: list[Any] = []
        for r in res.results:
            if isinstance(r, StatekeeperError):
                results.append(None)  # never expected: the txn was validated whole
            elif hasattr(r, "mod_revision"):  # a KeyValue from a get
                results.append(r.text)
            else:
                results.append(None)  # a put's WriteResult or a get of a missing key
        if res.succeeded:
            seen[a] = (va, res.revision)
            if both:
                seen[b] = (vb, res.revision)
        elif results and results[0] is not None:
            seen[a] = (results[0], res.results[0].mod_revision)
        else:
            seen[a] = (None, 0)
        self._finish(op_id, "ok", succeeded=res.succeeded, revision=res.revision, results=results)


async def _final_reads_async(
    endpoints: Sequence[str],
    keys: Sequence[str],
    history: HistoryWriter | None,
    process: int,
    ns: str,
    deadline: float,
) -> tuple[dict[str, Any], dict[str, int], list[str]]:
    from client import AsyncClient

    values: dict[str, Any] = {}
    revisions: dict[str, int] = {}
    missing: list[str] = []
    policy = RetryPolicy(max_attempts=1000, deadline=max(1.0, deadline - time.monotonic()))
    async with AsyncClient(list(endpoints), ns=ns, timeout=3.0, retry=policy) as c:
        for key in keys:
            op_id = history.invoke(process, "get", key) if history else None
            try:
                kv = await c.get(key, default=None)
            except StatekeeperError as e:
                missing.append(key)
                if history:
                    history.info(op_id, error=e.code)
                continue
            if kv is None:
                values[key] = None
                if history:
                    history.ok(op_id, value=None)
            else:
                values[key] = kv.text
                revisions[key] = kv.mod_revision
                if history:
                    history.ok(
                        op_id, value=kv.text, revision=kv.revision, mod_revision=kv.mod_revision
                    )
    return values, revisions, missing


def final_reads(
    endpoints: Sequence[str],
    keys: Sequence[str],
    *,
    history: HistoryWriter | None = None,
    process: int = 10_000,
    ns: str = "chaos",
    timeout: float = 60.0,
) -> tuple[dict[str, Any], dict[str, int], list[str]]:
    """Linearizable read of every key, retried until ``timeout``; recorded in ``history``.

    Returns (key -> value or None, key -> mod_revision, keys that could not be read).
    """
    return asyncio.run(
        _final_reads_async(endpoints, keys, history, process, ns, time.monotonic() + timeout)
    )
