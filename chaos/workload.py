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

Which node serves an op: every (non-pinned) client holds one connection pool per node
and sends op n of client p first to node ``(p + n) % N`` (``op_node``), each retry to the
next node; so every node, followers included, serves an even share of every client's
reads and writes at any moment (a follower forwards writes inside raft and serves
linearizable reads after a barrier: those paths are exercised, not only the leader's).
The node that gave the recorded answer is kept on the completion event (``node``).
``spread="sticky"`` is the older behaviour: a client stays on one node until it fails.

"Pinned readers" (a quarter of the clients by default, at least one per node when there
are enough clients) only read, always from one node: agents reading from their local
node. They are what makes a stale read show up when a node is cut off but still answers
(the mutation test relies on them). A share of their reads (``serializable_share``) are
``consistency="serializable"``: local state, no leader needed, so a node cut off from the
cluster still answers them, and whatever it serves (a value it should never have applied,
say) is in the history. They are recorded with ``consistency``; the linearizability check
ignores them, the revision checks (``chaos.convergence``) do not.

Idempotency probes (``resend_share`` of a client's ops): a put of a unique value to a key
of its own (``idem-<process>-<n>``, written by nothing else), later re-sent once or twice
(``resend_delay`` seconds after it completed, through whichever node is next) with the
same idempotency key, as an agent that lost track of an answer would. Each re-send is one
more history op with the same idempotency key (and ``resend_of``): the store must replay
the first answer, same revision; a re-send that is applied again shows up as one
idempotency key acknowledged at two revisions (``checker.duplicate_applications``).
Keys of their own keep the linearizability check exact: re-writing the same value to a
key nobody else writes is invisible to it.

Event streams (``stream_share`` of the ops, on by default; ``chaos.stream_workload``):
appends with expectations and re-sends of unknown appends that reuse their event ids,
and whole-stream reads (pinned readers too), checked by ``chaos.checker.streams``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from statekeeper.chaos.history import HistoryWriter
from statekeeper.chaos.stream_workload import StreamOps, StreamState
from statekeeper.chaos.workload_config import SPREAD_MODES, WorkloadConfig, op_node, pinned_nodes
from statekeeper.chaos.workload_ops import WorkloadOps
from statekeeper.client import (
    Compacted,
    Conflict,
    InsufficientStorage,
    InvalidRequest,
    NotFound,
    RetryPolicy,
    StatekeeperError,
)

__all__ = ["Workload", "classify_error"]


def classify_error(err: BaseException) -> tuple[str, bool]:
    """(error code, whether it proves the request was not submitted anywhere).

    Only these answers prove it of the attempt that got them: the connection was refused
    before anything was sent (``connection_failed``), the node answered
    ``unavailable``/``not_ready`` with HTTP 503, or ``insufficient_storage`` with 507 (the
    NOSPACE alarm refuses before proposing: "this attempt was not proposed"). Everything
    else may have been. Of the whole call they prove it only when no earlier attempt may
    have been applied: the client library's retry loop raises such a refusal after an
    attempt of unknown outcome as ``outcome_unknown`` (a Timeout, the refusal its cause),
    which is "maybe submitted"; the workload's own retries keep ``maybe_submitted``.
    """
    if isinstance(err, StatekeeperError):
        if err.code == "connection_failed":
            return err.code, True
        if err.code in ("unavailable", "not_ready") and err.status == 503:
            return err.code, True
        if err.code == "insufficient_storage" and err.status == 507:
            return err.code, True
        return err.code, False
    if isinstance(err, TimeoutError):
        return "client_timeout", False
    return type(err).__name__, False


@dataclass
class Counters:
    ok: int = 0
    fail: int = 0
    info: int = 0

    def total(self) -> int:
        return self.ok + self.fail + self.info


class Workload(WorkloadOps, StreamOps):
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
        node_ids: Sequence[str] | None = None,
    ) -> None:
        if not endpoints:
            raise ValueError("the workload needs at least one endpoint")
        self.endpoints = list(endpoints)
        # What the history calls the node behind each endpoint (same order).
        self.node_ids = list(node_ids) if node_ids is not None else list(self.endpoints)
        if len(self.node_ids) != len(self.endpoints):
            raise ValueError("node_ids must name every endpoint")
        self.history = history
        self.config = config or WorkloadConfig()
        if self.config.keys < 2 or self.config.keys % 2:
            raise ValueError("keys must be an even number >= 2 (txns use key pairs)")
        if self.config.spread not in SPREAD_MODES:
            raise ValueError(f"spread must be one of {SPREAD_MODES}")
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
        pins = pinned_nodes(cfg.clients, cfg.pinned_reader_share, len(self.endpoints))
        first_pinned = cfg.clients - len(pins)
        tasks = []
        for p in range(cfg.clients):
            pin = pins[p - first_pinned] if p >= first_pinned else None
            tasks.append(asyncio.create_task(self._client(p, pin)))
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

    async def _client(self, p: int, pin: int | None) -> None:
        """One client: pinned to node ``pin`` (reads only), or spreading its ops."""
        from statekeeper.client import AsyncClient  # imported only where the async client is used

        cfg = self.config
        rng = random.Random(cfg.seed * 100_003 + p)
        keys = cfg.key_names()
        names, weights = cfg.mix.choices()
        assert self._stopping is not None
        # What this client last saw per key: (value, mod_revision); absent = (None, 0).
        seen: dict[str, tuple[str | None, int]] = {}
        # Idempotency probes waiting for their re-send: (due, key, value, ik, first op id,
        # re-sends left).
        resends: list[tuple[float, str, str, str, int | str, int]] = []
        streams = StreamState()  # chaos.stream_workload
        stream_names = cfg.stream_names()
        n = len(self.endpoints)
        # One pool per node (lazily connected): the op, not the client, picks the node.
        nodes = [pin] if pin is not None else list(range(n))
        async with contextlib.AsyncExitStack() as stack:
            clients: dict[int, Any] = {}
            for i in nodes:
                clients[i] = await stack.enter_async_context(
                    AsyncClient(
                        [self.endpoints[i]],
                        ns=cfg.ns,
                        timeout=cfg.attempt_timeout,
                        retry=RetryPolicy.disabled(),
                        max_connections=4,
                        prefer_leader=False,
                    )
                )
            sticky = [p % n]  # the node a "sticky" client is on (moves when it fails)
            counter = 0
            while not self._stopping.is_set():
                counter += 1
                route = self._router(p, counter, pin, sticky, clients)
                now = time.monotonic()
                due = [r for r in resends if r[0] <= now] if pin is None else []
                if due:
                    item = min(due)
                    resends.remove(item)
                    await self._op_resend(route, p, item, resends, rng)
                elif pin is not None and stream_names and rng.random() < cfg.stream_share:
                    await self._op_read_stream(route, p, counter, rng.choice(stream_names))
                elif pin is not None:
                    serializable = rng.random() < cfg.serializable_share
                    await self._op_get(route, p, counter, rng.choice(keys), seen, rng, serializable)
                elif await self._stream_turn(route, p, counter, rng, streams):
                    pass
                elif rng.random() < cfg.resend_share:
                    await self._op_probe(route, p, counter, resends, rng)
                else:
                    f = rng.choices(names, weights)[0]
                    op = getattr(self, f"_op_{f}")
                    await op(route, p, counter, rng.choice(keys), seen, rng)
                if cfg.think_time:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stopping.wait(), cfg.think_time)

    def _router(
        self, p: int, n: int, pin: int | None, sticky: list[int], clients: dict[int, Any]
    ) -> _Route:
        size = len(self.endpoints)
        if pin is not None:
            return _Route(lambda attempt: pin, clients, self.node_ids, pinned=True)
        if self.config.spread == "sticky":

            def pick(attempt: int) -> int:
                if attempt:  # the previous attempt failed: move on
                    sticky[0] = (sticky[0] + 1) % size
                return sticky[0]

            return _Route(pick, clients, self.node_ids)
        return _Route(lambda attempt: op_node(p, n, attempt, size), clients, self.node_ids)

    def _names(self, p: int, n: int) -> tuple[str, str]:
        """(unique value, idempotency key) of op n of process p."""
        return f"{p}-{n}", f"{self.run_id}-{p}-{n}"

    async def _attempts(
        self, route: _Route, call: Callable[[Any], Awaitable[Any]]
    ) -> tuple[str, Any]:
        """Run one op with retries; returns (outcome, result or exception).

        Outcomes: "ok" (result, or NotFound / Conflict: definite answers), "fail"
        (definitely not applied), "info" (unknown). ``route.node`` is left naming the
        node of the last attempt.
        """
        assert self._stopping is not None
        deadline = time.monotonic() + (
            min(self.config.op_deadline, self.config.pinned_op_deadline)
            if route.pinned
            else self.config.op_deadline
        )
        maybe_submitted = False
        delay = 0.05
        attempt = 0
        while True:
            c = route.client(attempt)
            attempt += 1
            try:
                return "ok", await call(c)
            except (NotFound, Conflict) as e:
                return "ok", e
            except (InvalidRequest, Compacted) as e:
                self._note(e.code)
                return "fail", e
            except InsufficientStorage as e:  # this attempt not proposed; the alarm stays a while
                self._note(e.code)  # an earlier attempt may have been: then info, not fail
                return ("info" if maybe_submitted else "fail"), e
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

    def _finish(
        self, op_id: int | str, outcome: str, err: Any = None, *, node: str | None = None,
        **result: Any,
    ) -> None:
        h = self.history
        where = {"node": node} if node is not None else {}
        if outcome == "ok":
            h.ok(op_id, **result, **where)
            self.counters.ok += 1
        else:
            code, _ = classify_error(err) if err is not None else ("stopped", False)
            if outcome == "fail":
                h.fail(op_id, error=code, **where)
                self.counters.fail += 1
            else:
                h.info(op_id, error=code, **where)
                self.counters.info += 1

    async def _run_op(
        self, op_id: int | str, route: _Route, call: Callable[[Any], Awaitable[Any]]
    ) -> tuple[str, Any]:
        """_attempts, recording info if the op is cancelled mid-flight."""
        try:
            return await self._attempts(route, call)
        except asyncio.CancelledError:
            self.history.info(op_id, error="cancelled", **route.where())
            self.counters.info += 1
            raise


class _Route:
    """Where the attempts of one op go: ``pick(attempt)`` -> node index; remembers the
    node of the last attempt (the one whose answer is recorded)."""

    __slots__ = ("_clients", "_ids", "_pick", "index", "pinned")

    def __init__(
        self,
        pick: Callable[[int], int],
        clients: dict[int, Any],
        node_ids: Sequence[str],
        *,
        pinned: bool = False,
    ) -> None:
        self._pick, self._clients, self._ids = pick, clients, node_ids
        self.pinned = pinned
        self.index: int | None = None

    def client(self, attempt: int) -> Any:
        self.index = self._pick(attempt)
        return self._clients[self.index]

    @property
    def node_id(self) -> str | None:
        return None if self.index is None else self._ids[self.index]

    def where(self) -> dict[str, str]:
        return {} if self.index is None else {"node": self._ids[self.index]}
