"""The chaos CRDT clients: a few agents sharing one counter through local replicas
(``client.crdt.counter``) through the whole run, every fault included; checked afterwards
by ``chaos.checker.crdt``.

Each CRDT client (``WorkloadConfig.crdt_clients``, history processes ``first_process`` +
i) is an ``AsyncClient`` over every endpoint the workload uses (through the proxies under
the proxy topology, so proxy faults hit it too), starting on a different node each
(``prefer_leader=False``), with the client's own retries bounded by ``crdt_op_deadline``.
Its replica of ``crdt_key`` (a pncounter, replica id ``{run}-c{i}``, in memory) loops:

1. ``crdt_add``: increment the replica locally by 1..5 (never touches the network;
   recorded as an op that completes ok at once, with the replica's own ``total``);
2. after every 1..4 adds, ``crdt_sync``: ``replica.sync()`` (a ``crdt_sync_full_share``
   of them ship the whole state, not only the pending deltas). Invoke: ``key``,
   ``replica``, ``total`` (the replica's own count when it ships: the store then holds at
   least that much of it once the merge is acknowledged), ``pending``, ``full``. ok:
   ``sent``, ``changed``, ``revision``, ``value``, ``pulled`` (False: the merge was
   acknowledged but the read of the store's state afterwards failed); fail:
   ``error`` (the merge was refused: type mismatch, invalid); info: ``error``
   (timeout, unavailable, connection lost: the merge may or may not have landed; the
   replica keeps its deltas pending and sends them again).

After the run (cluster healed, every node ready) :meth:`CrdtClients.finish` records, on
the process of each client:

- ``crdt_read`` (``final: "before"``): the store's value and per-replica counts, read
  BEFORE any final sync: the checker's bound (acknowledged <= store <= acknowledged +
  unknown);
- per replica ``crdt_sync`` with ``final: 1`` (the whole state, so merges the store may
  have lost are restored), ``final: 2`` (pull what the others shipped), ``final: 3``
  (the whole state again: it must change nothing, ``changed`` False);
- ``crdt_read`` (``final: "after"``): must equal the total of every add, and so must
  every replica's value after its ``final: 2`` sync.

``crdt_reuse_id`` (a MUTATION, ``--debug-crdt-reuse-id``): once a client has synced, its
replica is replaced by a fresh one with the SAME replica id (a restart that lost its
state): its later increments are absorbed by the store's older count of that id, and the
check must fail (docs/crdt.md: one replica id, one replica).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from statekeeper.chaos.background import BackgroundLoop
from statekeeper.chaos.history import HistoryWriter
from statekeeper.chaos.workload_config import WorkloadConfig
from statekeeper.client import AsyncClient, InvalidRequest, RetryPolicy, StatekeeperError
from statekeeper.client.errors import CrdtTypeMismatch

__all__ = ["CrdtClients", "CrdtRun", "finish_crdt", "start_crdt"]

Say = Callable[[str], None]
FINAL_TRIES_S = 30.0  # how long a final sync / read keeps trying


@dataclass
class CrdtRun:
    """The CRDT half of a run, for the checks."""

    key: str
    clients: int
    processes: tuple[int, ...]


def _code(e: BaseException) -> str:
    return e.code if isinstance(e, StatekeeperError) else type(e).__name__


class CrdtClients(BackgroundLoop):
    """Runs the CRDT clients in a background thread with its own event loop. ``start()``
    starts them; ``halt()`` lets each finish its current step and keeps the loop (and the
    replicas) for ``finish()``; ``stop()`` ends it all."""

    name = "chaos-crdt"
    stop_timeout = 20.0

    def __init__(
        self,
        endpoints: Sequence[str],
        history: HistoryWriter,
        config: WorkloadConfig,
        first_process: int,
        run_id: str = "run",
    ) -> None:
        if config.crdt_clients < 1:
            raise ValueError("no CRDT clients configured")
        self.endpoints, self.history, self.config = list(endpoints), history, config
        self.first_process, self.run_id = first_process, run_id
        super().__init__()
        self.replicas: list[Any] = []
        self.clients: list[Any] = []
        self.counts = {"adds": 0, "total": 0, "syncs_ok": 0, "syncs_fail": 0, "syncs_unknown": 0}
        self._halting: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []
        self._reused: set[int] = set()
        self._agents_done: asyncio.Event | None = None

    # -- the background loop
    async def _main(self) -> None:
        stopping = self._begin()
        self._halting, self._agents_done = asyncio.Event(), asyncio.Event()
        cfg, n = self.config, len(self.endpoints)
        policy = RetryPolicy(max_attempts=1000, deadline=cfg.crdt_op_deadline, backoff_max=0.3)
        async with contextlib.AsyncExitStack() as stack:
            for i in range(cfg.crdt_clients):
                c = AsyncClient(
                    self.endpoints[i % n :] + self.endpoints[: i % n], ns=cfg.ns,
                    timeout=cfg.attempt_timeout, retry=policy, prefer_leader=False,
                )  # fmt: skip
                self.clients.append(await stack.enter_async_context(c))
                self.replicas.append(c.crdt.counter(cfg.crdt_key, replica_id=self._rid(i)))
            self._tasks = [asyncio.create_task(self._agent(i)) for i in range(cfg.crdt_clients)]
            self._started.set()
            await self._halting.wait()
            try:
                _, pending = await asyncio.wait(self._tasks, timeout=10.0)
                for t in pending:
                    t.cancel()
                results = await asyncio.gather(*self._tasks, return_exceptions=True)
            finally:
                self._agents_done.set()
            for r in results:
                if isinstance(r, Exception):
                    raise r
            await stopping.wait()

    def _rid(self, i: int) -> str:
        return f"{self.run_id}-c{i}"

    def halt(self) -> None:
        """Stop the agents' loops (each finishes its step); the replicas stay for
        :meth:`finish`."""
        if self._loop is not None and self._halting is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._halting.set)

    def stop(self) -> None:
        self.halt()
        super().stop()

    def finish(self, timeout: float = 4 * FINAL_TRIES_S) -> None:
        """Run the final reads and syncs (module docstring) on the loop; call after
        :meth:`halt`, with the cluster healed."""
        if self._loop is None:
            return
        fut = asyncio.run_coroutine_threadsafe(self._final(), self._loop)
        fut.result(timeout)

    # -- one agent
    async def _agent(self, i: int) -> None:
        cfg, h, p = self.config, self.history, self.first_process + i
        rng = random.Random(cfg.seed * 104_729 + i)
        assert self._halting is not None
        synced = False
        while not self._halting.is_set():
            for _ in range(rng.randint(*cfg.crdt_sync_every)):
                n = rng.randint(*cfg.crdt_add)
                replica = self.replicas[i]
                replica.increment(n)
                self.counts["adds"] += 1
                self.counts["total"] += n
                op = h.invoke(p, "crdt_add", cfg.crdt_key, replica=replica.replica_id, n=n)
                h.ok(op, total=self._own(replica))
                await asyncio.sleep(rng.uniform(*cfg.crdt_think))
            full = rng.random() < cfg.crdt_sync_full_share
            synced = await self._sync(i, full=full) == "ok" or synced
            if cfg.crdt_reuse_id and synced and i not in self._reused:
                self._reused.add(i)  # MUTATION: a restart that lost its state, same id
                fresh = self.clients[i].crdt.counter(cfg.crdt_key, replica_id=self._rid(i))
                self.replicas[i] = fresh

    def _own(self, replica: Any) -> int:
        """The replica's own contribution to the counter (its increments)."""
        p = replica.state.get("p", {}) if isinstance(replica.state, dict) else {}
        return int(p.get(replica.replica_id, 0))

    async def _sync(self, i: int, *, full: bool = False, final: int | None = None) -> str:
        """One recorded sync of replica ``i``; returns its outcome (ok, fail, info)."""
        cfg, h, p = self.config, self.history, self.first_process + i
        replica = self.replicas[i]
        had = replica.pending
        extra = {"final": final} if final is not None else {}
        op = h.invoke(
            p, "crdt_sync", cfg.crdt_key, replica=replica.replica_id, total=self._own(replica),
            pending=had, full=full, **extra,
        )  # fmt: skip
        outcome = "ok"
        try:
            r = await replica.sync(full=full)
        except (CrdtTypeMismatch, InvalidRequest) as e:
            h.fail(op, error=e.code)
            outcome = "fail"
        except (StatekeeperError, TimeoutError) as e:
            if (had or full) and not replica.pending:  # merged; the pull failed
                h.ok(op, sent=True, pulled=False, error=_code(e))
            else:
                h.info(op, error=_code(e))
                outcome = "info"
        else:
            h.ok(op, sent=r.sent, changed=r.changed, revision=r.revision, value=r.value,
                 pulled=True)  # fmt: skip
        if final is None:  # the workload's syncs; the final ones are the checker's
            self.counts[
                {"ok": "syncs_ok", "fail": "syncs_fail", "info": "syncs_unknown"}[outcome]
            ] += 1
        return outcome

    # -- after the run
    async def _read(self, final: str) -> None:
        cfg, h, p = self.config, self.history, self.first_process
        deadline = time.monotonic() + FINAL_TRIES_S
        while True:
            op = h.invoke(p, "crdt_read", cfg.crdt_key, final=final)
            try:
                got = await self.clients[0].crdt_get(cfg.crdt_key, state=True, default=None)
            except (StatekeeperError, TimeoutError) as e:
                h.info(op, error=_code(e))
                if time.monotonic() > deadline:
                    return
                await asyncio.sleep(0.5)
                continue
            if got is None:
                h.ok(op, value=None, counts={}, negative={})
            else:
                s = got.state if isinstance(got.state, dict) else {}
                h.ok(op, value=got.value, revision=got.revision, counts=dict(s.get("p", {})),
                     negative=dict(s.get("n", {})))  # fmt: skip
            return

    async def _final_sync(self, i: int, *, full: bool, final: int) -> None:
        deadline = time.monotonic() + FINAL_TRIES_S
        while await self._sync(i, full=full, final=final) == "info":
            if time.monotonic() > deadline:
                return
            await asyncio.sleep(0.5)

    async def _final(self) -> None:
        assert self._agents_done is not None
        await self._agents_done.wait()  # no agent's sync still running
        await self._read("before")
        for rnd, full in ((1, True), (2, False), (3, True)):
            for i in range(len(self.replicas)):
                await self._final_sync(i, full=full, final=rnd)
        await self._read("after")


def start_crdt(
    endpoints: Sequence[str], history: HistoryWriter, config: WorkloadConfig,
    first_process: int, say: Say, run_id: str = "run",
) -> CrdtClients | None:  # fmt: skip
    """Start the run's CRDT clients (None: ``config.crdt_clients`` is 0)."""
    if config.crdt_clients < 1:
        return None
    crdt = CrdtClients(endpoints, history, config, first_process, run_id)
    crdt.start()
    say(
        f"   {config.crdt_clients} CRDT clients syncing counter replicas of "
        f"{config.crdt_key!r}"
        + (" (MUTATION: each reuses its replica id without its state)" if config.crdt_reuse_id
           else "")
    )  # fmt: skip
    return crdt


def finish_crdt(crdt: CrdtClients | None, config: WorkloadConfig, event: Say) -> CrdtRun | None:
    """After the run (cluster healed, nodes ready): the final reads and syncs, recorded in
    the history; then the loop ends."""
    if crdt is None:
        return None
    try:
        crdt.finish()
    except Exception as e:  # noqa: BLE001 - the checker reports what is missing
        event(f"crdt: the final syncs did not finish: {e!r}")
    finally:
        crdt.stop()
    c = crdt.counts
    event(
        f"crdt: {c['adds']} local adds (total {c['total']}), syncs {c['syncs_ok']} ok / "
        f"{c['syncs_fail']} refused / {c['syncs_unknown']} unknown"
    )
    procs = tuple(range(crdt.first_process, crdt.first_process + config.crdt_clients))
    return CrdtRun(config.crdt_key, config.crdt_clients, procs)
