"""The workload of `benchmarks.langgraph_savers`: checkpoint chains, a 10-node graph and a
closed-loop runner on OS threads (LangGraph's sync API is what a threaded app calls).

- :class:`Chain`: one worker's stream of realistic checkpoints. Each thread id gets a chain
  of `length` puts built with LangGraph's own ``empty_checkpoint()``/``create_checkpoint()``:
  `channels` channels holding dict values of ~`value_size` bytes (a message-like record);
  the first put writes every channel, later puts change two of them (``messages`` and one
  other in turn) and pass only those in ``new_versions``, with versions from the saver's own
  ``get_next_version``. Then a fresh thread id.
- :func:`build_graph`: a StateGraph of `nodes` trivial nodes in a chain.
- :func:`closed_loop`: N threads, each calling its own op in a loop; ops that finish in the
  first `warmup` seconds are not measured, those that finish in the next `duration` seconds
  are (the same closed-loop rule as benchmarks/harness.py, on threads instead of asyncio).
"""

from __future__ import annotations

import random
import string
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from statekeeper.benchmarks.harness import error_key
from statekeeper.chaos.stats import percentile

# One op: does its work, returns (units done, its own latency in ns). Units are 1 for a
# put or a get_tuple and the number of node executions for a graph invoke.
Op = Callable[[], tuple[int, int]]

CHANNEL_NAMES = ("messages", "context", "scratchpad", "plan", "tools", "memory", "summary", "docs")


def text_pool(n: int, size: int, seed: int = 13) -> list[str]:
    """`n` random ASCII strings of `size` characters (made once: not timed)."""
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits + " "
    return ["".join(rng.choices(alphabet, k=size)) for _ in range(n)]


def channel_value(pool: Sequence[str], step: int, i: int) -> dict[str, Any]:
    """A message-like record of ~len(pool[0]) bytes (a dict: stored as a blob by savers
    that inline primitives)."""
    return {"role": "assistant", "step": step, "content": pool[(step * 7 + i) % len(pool)]}


class Chain:
    """Realistic checkpoints for one worker: `length` puts per thread id, then a new id."""

    def __init__(
        self,
        saver: Any,
        *,
        prefix: str,
        length: int = 10,
        channels: int = 4,
        pool: Sequence[str],
    ) -> None:
        from langgraph.checkpoint.base import empty_checkpoint

        if not 1 <= channels <= len(CHANNEL_NAMES) or length < 1:
            raise ValueError(f"need 1 <= channels <= {len(CHANNEL_NAMES)} and length >= 1")
        self._empty = empty_checkpoint
        self.next_version = saver.get_next_version
        self.prefix = prefix
        self.length = length
        self.names = CHANNEL_NAMES[:channels]
        self.pool = pool
        self.thread_id = ""
        self.step = length  # forces a new thread on the first call
        self.checkpoint: dict[str, Any] = {}
        self.parent_id: str | None = None

    def next(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        """(config, checkpoint, metadata, new_versions) of the next put."""
        from langgraph.checkpoint.base import create_checkpoint

        if self.step >= self.length:
            self.thread_id = f"{self.prefix}-{uuid.uuid4().hex[:16]}"
            self.step, self.parent_id = 0, None
            base = self._empty()
            changed = list(self.names)
            source = "input"
        else:
            base = self.checkpoint
            k = 1 + self.step % max(1, len(self.names) - 1)
            changed = [self.names[0]] + ([self.names[k]] if len(self.names) > 1 else [])
            source = "loop"
        versions = dict(base["channel_versions"])
        new_versions = {}
        values = dict(base["channel_values"])
        for i, ch in enumerate(changed):
            new_versions[ch] = versions[ch] = self.next_version(versions.get(ch), None)
            values[ch] = channel_value(self.pool, self.step, i)
        seen = {k: dict(v) for k, v in base["versions_seen"].items()}
        seen[f"node{self.step}"] = {ch: versions[ch] for ch in changed}
        draft = {**base, "channel_values": values, "channel_versions": versions}
        draft["versions_seen"] = seen
        ckpt = create_checkpoint(draft, None, self.step)  # type: ignore[arg-type]
        configurable = {"thread_id": self.thread_id, "checkpoint_ns": ""}
        if self.parent_id:
            configurable["checkpoint_id"] = self.parent_id
        metadata = {"source": source, "step": self.step - 1, "parents": {}, "run_id": "bench"}
        self.checkpoint, self.parent_id = ckpt, ckpt["id"]
        self.step += 1
        return {"configurable": configurable}, ckpt, metadata, new_versions


def put_op(saver: Any, chain: Chain, written: Callable[[str], None] | None = None) -> Op:
    """One saver.put of the chain's next checkpoint (building it is not timed);
    `written(thread_id)` after the first put of each thread id succeeded."""
    put, nxt, clock = saver.put, chain.next, time.perf_counter_ns

    def op() -> tuple[int, int]:
        config, ckpt, metadata, versions = nxt()
        t0 = clock()
        put(config, ckpt, metadata, versions)
        took = clock() - t0
        if chain.step == 1 and written is not None:
            written(chain.thread_id)
        return 1, took

    return op


class Miss(Exception):
    """get_tuple returned None for a thread that has checkpoints."""


def get_op(saver: Any, thread_ids: Sequence[str], seed: int) -> Op:
    """get_tuple of the latest checkpoint of a random thread written by the put cells."""
    if not thread_ids:
        raise ValueError("no thread ids to read: run a put cell first")
    get, clock, rng = saver.get_tuple, time.perf_counter_ns, random.Random(seed)
    ids = list(thread_ids)

    def op() -> tuple[int, int]:
        config = {
            "configurable": {"thread_id": ids[int(rng.random() * len(ids))], "checkpoint_ns": ""}
        }
        t0 = clock()
        found = get(config)
        took = clock() - t0
        if found is None:
            raise Miss(config["configurable"]["thread_id"])
        return 1, took

    return op


def build_graph(saver: Any, nodes: int = 10) -> Any:
    """A StateGraph of `nodes` trivial nodes in a chain (each adds 1 to `n`), compiled
    with `saver` as its checkpointer."""
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    class State(TypedDict):
        n: int

    def step(state: State) -> dict[str, int]:
        return {"n": state["n"] + 1}

    g = StateGraph(State)
    names = [f"node{i}" for i in range(nodes)]
    for name in names:
        g.add_node(name, step)
    for a, b in zip([START, *names], [*names, END], strict=True):
        g.add_edge(a, b)
    return g.compile(checkpointer=saver)


def graph_op(graph: Any, nodes: int, prefix: str) -> Op:
    """One invoke of the graph on a fresh thread id; its units are the node executions."""
    invoke, clock = graph.invoke, time.perf_counter_ns

    def op() -> tuple[int, int]:
        config = {"configurable": {"thread_id": f"{prefix}-{uuid.uuid4().hex[:16]}"}}
        t0 = clock()
        out = invoke({"n": 0}, config)
        took = clock() - t0
        if out["n"] != nodes:
            raise AssertionError(f"graph ran {out['n']} of {nodes} nodes")
        return nodes, took

    return op


# ------------------------------------------------------------------------------ runner


@dataclass
class CellResult:
    """One measured window: latencies (ms) of the ops that finished in it, units done."""

    threads: int
    duration_s: float
    latencies_ms: list[float] = field(default_factory=list)
    units: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    warmup_ops: int = 0

    def summary(self) -> dict[str, Any]:
        xs = self.latencies_ms
        return {
            "threads": self.threads,
            "duration_s": self.duration_s,
            "ops": len(xs),
            "units": self.units,
            "units_per_s": round(self.units / self.duration_s, 2) if self.duration_s else 0.0,
            "p50_ms": round(percentile(xs, 50) or 0.0, 3),
            "p99_ms": round(percentile(xs, 99) or 0.0, 3),
            "max_ms": round(max(xs), 3) if xs else 0.0,
            "errors": dict(sorted(self.errors.items())),
            "warmup_ops": self.warmup_ops,
        }


class _Worker(threading.Thread):
    def __init__(self, op: Op, start_gate: threading.Barrier, clock_box: list[int]) -> None:
        super().__init__(daemon=True)
        self.op, self.gate, self.box = op, start_gate, clock_box
        self.lat: list[int] = []
        self.units = 0
        self.done = 0
        self.warmup_ops = 0
        self.errors: dict[str, int] = {}

    def run(self) -> None:
        self.gate.wait()
        measure_start, stop_at = self.box
        clock, op, lat = time.perf_counter_ns, self.op, self.lat
        while clock() < stop_at:
            try:
                units, took = op()
            except Exception as exc:  # noqa: BLE001 - every failure is a data point
                end = clock()
                if measure_start <= end <= stop_at:
                    key = error_key(exc)
                    self.errors[key] = self.errors.get(key, 0) + 1
                time.sleep(0.001)
                continue
            end = clock()
            self.done += 1
            if end < measure_start:
                self.warmup_ops += 1
            elif end <= stop_at:
                lat.append(took)
                self.units += units


def closed_loop(
    ops: Sequence[Op],
    *,
    duration: float,
    warmup: float,
    tick: Callable[[int], None] | None = None,
    tick_interval: float = 0.5,
) -> CellResult:
    """Run one thread per op until `warmup + duration` seconds have passed; `tick(done)`
    is called from this thread every `tick_interval` seconds (progress)."""
    if not ops or duration <= 0 or warmup < 0:
        raise ValueError("need at least one op, duration > 0 and warmup >= 0")
    box: list[int] = []
    gate = threading.Barrier(len(ops) + 1)
    workers = [_Worker(op, gate, box) for op in ops]
    for w in workers:
        w.start()
    t0 = time.perf_counter_ns()
    box += [t0 + int(warmup * 1e9), t0 + int((warmup + duration) * 1e9)]
    gate.wait()
    while alive := [w for w in workers if w.is_alive()]:
        alive[0].join(tick_interval)
        if tick is not None:
            tick(sum(w.done for w in workers))
    out = CellResult(threads=len(ops), duration_s=duration)
    for w in workers:
        out.latencies_ms += [x / 1e6 for x in w.lat]
        out.units += w.units
        out.warmup_ops += w.warmup_ops
        for k, v in w.errors.items():
            out.errors[k] = out.errors.get(k, 0) + v
    return out
