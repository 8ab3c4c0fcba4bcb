"""The key-value rows of the comparison and the per-request coroutine of each.

A `Workload` is one row: what each of `clients` closed-loop workers does per request.
`Workload.key` is the row's stable id (results, JSON, tests); `label` is what the table
shows. `make_op` builds the coroutine from a `System`'s methods only, so the same code
drives every system.

The append rows (group "append", issue 28) are an event log: each request appends
`events` events of `value_size` bytes to one of STREAMS streams picked at random, through
`System.append`, which each system maps to its own closest operation (APPEND_ACTIONS says
which; the table prints it under the rows).
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from dataclasses import dataclass

from statekeeper.benchmarks.harness import Op
from statekeeper.benchmarks.load import format_size, key_op
from statekeeper.benchmarks.systems import System

GROUPS = ("put", "get", "mix", "cas", "txn", "batch", "append", "failover", "cold-start")

HOT_KEYS = 10  # compare-and-set contention
TXN_OPS = 10
BATCH_OPS = 64
APPEND_EVENTS = 100  # events per request of the multi-event append row
STREAMS = 64  # streams the append rows spread over (an agent's log each)

# What each system does for one request of an append row of n events (System.append).
APPEND_ACTIONS = {
    "statekeeper": {
        1: "`client.append(stream, [event])`: one append op",
        APPEND_EVENTS: f"`client.append(stream, [{APPEND_EVENTS} events])`: one append op "
        "(atomic, one revision)",
    },
    "etcd": {
        1: "one put of the event under a new key `<stream>/<n>` (etcd has no append)",
        APPEND_EVENTS: f"one Txn of {APPEND_EVENTS} such puts (atomic, no compares)",
    },
    "redis": {
        1: "`XADD stream * d <event>`",
        APPEND_EVENTS: f"MULTI, {APPEND_EVENTS} x `XADD`, EXEC in one round trip "
        "(XADD takes one entry)",
    },
}


@dataclass(frozen=True)
class Workload:
    """One key-value row: what each of `clients` closed-loop workers does per request."""

    kind: str  # put | get | mix | cas | txn | batch | append
    clients: int
    value_size: int = 256
    consistency: str = "linearizable"
    quick: bool = False  # part of the --quick subset
    events: int = 1  # append: events per request

    @property
    def ops_per_request(self) -> int:
        """What the ops/s column counts per request: puts (batch) or events (append)."""
        return {"batch": BATCH_OPS, "append": self.events}.get(self.kind, 1)

    @property
    def key(self) -> str:
        extra = {"put": str(self.value_size), "get": self.consistency[:3]}.get(self.kind, "")
        if self.kind == "append":
            extra = f"{self.events}x{self.value_size}"
        return f"{self.kind}{'-' + extra if extra else ''}-x{self.clients}"

    @property
    def label(self) -> str:
        c = f"x{self.clients}"
        if self.kind == "put":
            return f"put {format_size(self.value_size)} {c}"
        if self.kind == "get":
            return f"get {self.consistency} {c}"
        if self.kind == "mix":
            return f"90/10 get/put {c}"
        if self.kind == "cas":
            return f"cas {HOT_KEYS} hot keys {c} (successful cas/s)"
        if self.kind == "txn":
            return f"txn {TXN_OPS} puts {c} (txn/s)"
        if self.kind == "batch":
            return f"batch {BATCH_OPS} puts {c} (puts/s)"
        if self.kind == "append":
            n = "1 event" if self.events == 1 else f"{self.events} events"
            return f"append {n} of {format_size(self.value_size)} {c} (events/s)"
        raise ValueError(self.kind)


def append_events(row_key: str) -> int | None:
    """Events per request of an append row, from its key (Workload.key); None otherwise."""
    if not row_key.startswith("append-"):
        return None
    return int(row_key.split("-")[1].split("x")[0])


def kv_matrix() -> list[Workload]:
    """The issue's rows; `quick=True` marks the few-minute subset."""
    rows = []
    for size in (256, 4096):
        for clients in (1, 16, 64, 256):
            quick = (size, clients) in ((256, 1), (256, 64), (4096, 64))
            rows.append(Workload("put", clients, size, quick=quick))
    for consistency in ("linearizable", "serializable"):
        for clients in (1, 64):
            rows.append(Workload("get", clients, consistency=consistency, quick=clients == 64))
    rows += [
        Workload("mix", 64, quick=True),
        Workload("cas", 64, quick=True),
        Workload("txn", 16, quick=True),
        Workload("batch", 1),
        Workload("batch", 16, quick=True),
        Workload("append", 1, quick=True),
        Workload("append", 64, quick=True),
        Workload("append", 1, events=APPEND_EVENTS, quick=True),
    ]
    return rows


def select_workloads(groups: Sequence[str], quick: bool) -> list[Workload]:
    return [w for w in kv_matrix() if w.kind in groups and (w.quick or not quick)]


def make_op(system: System, w: Workload, keys: Sequence[str], stats: dict[str, int]) -> Op:
    """The per-request coroutine of one workload; random keys from `keys`."""
    n = len(keys)
    rand = random.random  # a C call; randrange() costs several times more per op
    value = os.urandom(w.value_size)  # incompressible, so storage compression can't cheat
    if w.kind in ("put", "get"):
        return key_op(system, w.kind, keys, value, w.consistency)
    if w.kind == "mix":
        get, put = system.get, system.put

        async def op() -> object:
            if rand() < 0.9:
                return await get(keys[int(rand() * n)], "linearizable")
            return await put(keys[int(rand() * n)], value)

    elif w.kind == "cas":
        hot = [f"hot{i}" for i in range(HOT_KEYS)]
        versions = dict.fromkeys(hot, 0)  # last version seen per key, shared by the workers
        cas = system.cas
        stats["attempts"] = 0

        async def op() -> object:
            # Optimistic concurrency: one op = one *successful* cas; a lost race learns the
            # current version from the answer and tries again at once.
            k = hot[int(rand() * HOT_KEYS)]
            while True:
                stats["attempts"] += 1
                ok, version = await cas(k, value, versions[k])
                if version > versions[k] or ok:
                    versions[k] = version
                if ok:
                    return None

    elif w.kind in ("txn", "batch"):
        size = TXN_OPS if w.kind == "txn" else BATCH_OPS
        call = system.txn_put if w.kind == "txn" else system.batch_put

        async def op() -> object:
            start = int(rand() * n)  # consecutive keys: distinct, as a txn requires
            return await call([(keys[(start + j) % n], value) for j in range(size)])

    elif w.kind == "append":
        return append_op(system, w.events, value)
    else:
        raise ValueError(f"unknown workload {w.kind!r}")
    return op


def append_op(system: System, events: int, value: bytes) -> Op:
    """`events` events of `value` per request to one of STREAMS random streams."""
    streams = [f"s{i:02d}" for i in range(STREAMS)]
    batch = [value] * events
    append, rand = system.append, random.random

    async def op() -> object:
        return await append(streams[int(rand() * STREAMS)], batch)

    return op


_OPTIONAL_OPS = {"cas": "cas", "txn": "txn_put", "batch": "batch_put", "append": "append"}


def supports(system: System, kind: str) -> bool:
    """False when the workload needs an optional System method the system does not override.

    Checked up front: inside run_load a NotImplementedError would only count as errors.
    """
    method = _OPTIONAL_OPS.get(kind)
    return method is None or getattr(type(system), method) is not getattr(System, method)
