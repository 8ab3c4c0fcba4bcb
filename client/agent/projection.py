"""Projections (CQRS read models): fold a stream into a model kept current as events
arrive, saving the position reached, so a restarted projector resumes instead of
replaying from zero.

    def count_tools(model, event):                    # fold(model, AgentEvent) -> model
        if event.type == "tool.ok":
            model[event.data["tool"]] = model.get(event.data["tool"], 0) + 1
        return model

    p = Projection(client, "tool-counts", "agent/agent-7", count_tools, {})
    p.catch_up()                      # fold what is there, save, return the model
    p.run(stop=stop_event)            # then live: long polls, folding as events arrive

The five things (docs/agent-state.md, "The five things"):

1. Consistency: the saved record ``proj/{name}`` = {stream, position, model} and the kv
   ops ``outputs(model, event)`` returns commit in ONE txn guarded by the record's
   mod_revision, so the read model, its outputs and its position never disagree, and two
   projectors of one name cannot both save (ProjectionConflict). Events are read in
   stream order (seqs are gapless, raft commit order): catch-up pages from position + 1,
   then the same read with ``wait`` (the server's long poll, the one subscription
   mechanism of client.subscribe).
2. ok / failed / unknown: a save that failed or whose outcome is unknown (Timeout after
   the client's retries) leaves the record as it was or as saved; a restarted projector
   loads it and folds again from its position, so the model sees each event exactly once
   even though the fold function may run twice for some (keep it pure).
3. Limits: the record is one value (<= 1 MiB, 413 value_too_large: keep models small or
   write them out through ``outputs``); outputs of one save: <= ~1000 ops (saved early
   when reached) and one request (4 MiB).
4. Key layout: ``proj/{name}`` in the projection's namespace; outputs wherever they say.
5. Chaos: kv/txn (chaos/workload.py) and paged stream reads (chaos/stream_workload.py)
   cover the primitives; the long poll (``wait``) and projections themselves have no
   chaos workload yet (the save txn, record + outputs, is a plain kv txn).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import msgpack

from ..errors import InvalidRequest, NotFound
from ..ops import compare, ops
from ..plan import AgentPlan, arun, call, driven, planned, run
from .codec import Codec
from .envelope import SchemaRegistry
from .errors import ProjectionConflict
from .layout import projection_key
from .records import AgentEvent
from .timeline import agent_event

__all__ = ["AsyncProjection", "Projection", "ProjectionCore"]

Fold = Callable[[Any, AgentEvent], Any]
Outputs = Callable[[Any, AgentEvent], Iterable[Mapping[str, Any]] | None]
MAX_OUTPUT_OPS = 900


def _stopped(stop: Any) -> bool:
    if stop is None:
        return False
    if hasattr(stop, "is_set"):
        return bool(stop.is_set())
    return bool(stop())


class ProjectionCore:
    """What Projection and AsyncProjection share (use one of them).

    Args:
        client: a Client (Projection) or AsyncClient (AsyncProjection).
        name: the projection's name (no '/'); its record is ``proj/{name}``.
        stream: the stream it folds (an agent's is ``agent/{id}``).
        fold: ``fold(model, event) -> model`` over AgentEvents (data decoded).
        initial: the model before any event (copied), or a factory for it.
        ns: namespace of the record and the stream (the client's by default).
        checkpoint_every: save after this many events (and whenever caught up).
        outputs: ``outputs(model, event) -> [client.ops.put(...)/delete(...)]``, kv ops
            saved in the same txn as the record (the last op per key wins).
        registry, format: how the model is encoded (the envelope).
        wait: seconds one live long poll waits for new events.
        page_size: events per read (the server's default when None).
    """

    def __init__(
        self,
        client: Any,
        name: str,
        stream: str,
        fold: Fold,
        initial: Any = None,
        *,
        ns: str | None = None,
        checkpoint_every: int = 100,
        outputs: Outputs | None = None,
        registry: SchemaRegistry | None = None,
        format: str = "msgpack",
        wait: float = 5.0,
        page_size: int | None = None,
    ) -> None:
        if checkpoint_every < 1:
            raise ValueError("checkpoint_every must be >= 1")
        self.client = client
        self.name = name
        self.key = projection_key(name)
        self.stream = stream
        self.fold = fold
        self.initial = initial
        self.ns = ns if ns is not None else getattr(client, "ns", None)
        self.checkpoint_every = checkpoint_every
        self.outputs = outputs
        self.codec = Codec(registry, None, format)
        timeout = getattr(client, "timeout", 10.0)
        self.wait = max(0.0, min(wait, timeout - 1.0))  # a long poll must end before the client gives up
        self.page_size = page_size
        self.model: Any = None
        """The read model as folded so far."""
        self.position = 0
        """The last seq folded into the model."""
        self.saved_position = 0
        """The position of the last save."""
        self.revision = 0
        """The revision of the last save (0: never saved)."""
        self._loaded = False
        self._pending: dict[tuple[Any, ...], dict[str, Any]] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.stream!r}, position={self.position})"

    # -- the record --------------------------------------------------------------------------

    def _load_plan(self) -> AgentPlan[None]:
        if self._loaded:
            return
        try:
            kv = yield call("get", self.key, ns=self.ns)
        except NotFound:
            kv = None
        if kv is None:
            model = self.initial() if callable(self.initial) else copy.deepcopy(self.initial)
            self.model, self.position, self.revision = model, 0, 0
        else:
            rec = msgpack.unpackb(kv.value, raw=False)
            if rec.get("stream") != self.stream:
                raise InvalidRequest(
                    f"projection {self.name!r} was built from stream {rec.get('stream')!r}, "
                    f"not {self.stream!r}: give this one another name",
                    code="invalid_argument",
                )
            self.model = self.codec.decode(rec["model"])
            self.position, self.revision = int(rec["position"]), kv.mod_revision
        self.saved_position = self.position
        self._loaded = True

    def _save_plan(self) -> AgentPlan[int]:
        record = {
            "v": 1,
            "stream": self.stream,
            "position": self.position,
            "model": self.codec.encode(self.model),
            "time_ms": int(time.time() * 1000),
        }
        raw = msgpack.packb(record, use_bin_type=True)
        success = [ops.put(self.key, raw), *self._pending.values()]
        r = yield call(
            "txn", [compare.mod_revision(self.key) == self.revision], success,
            [ops.get(self.key)], ns=self.ns,
        )
        if not r.succeeded:
            kv = r.results[0] if r.results else None
            raise ProjectionConflict(
                f"projection {self.name!r}: its record moved (saved at revision "
                f"{kv.mod_revision if kv else 0}, this projector last saw {self.revision}); "
                "another projector of this name is running",
                current=kv,
            )
        self.revision, self.saved_position = r.revision, self.position
        self._pending.clear()
        return r.revision

    def _apply(self, e: Any) -> None:
        ev = agent_event(self.codec, e)
        self.model = self.fold(self.model, ev)
        self.position = e.seq
        if self.outputs is not None:
            for op in self.outputs(self.model, ev) or ():
                op = dict(op)
                self._pending[(op.get("ns"), op.get("key"), op.get("prefix", False))] = op

    def _due(self) -> bool:
        return (
            self.position - self.saved_position >= self.checkpoint_every
            or len(self._pending) >= MAX_OUTPUT_OPS
        )

    # -- the loop ----------------------------------------------------------------------------

    def _loop(self, stop: Any, max_events: int | None, live: bool) -> AgentPlan[int]:
        yield from self._load_plan()
        folded = 0
        while not _stopped(stop) and (max_events is None or folded < max_events):
            limit = self.page_size
            if max_events is not None:
                limit = min(limit or 1000, max_events - folded)
            page = yield call(
                "read_stream", self.stream, start=self.position + 1, limit=limit, ns=self.ns,
                wait=self.wait if live and self.wait > 0 else None,
            )
            for e in page.events:
                self._apply(e)
                folded += 1
                if self._due():
                    yield from self._save_plan()
            caught_up = not page.more
            if caught_up and self.position != self.saved_position:
                yield from self._save_plan()
            if caught_up and not live:
                break
        if self.position != self.saved_position or self._pending:
            yield from self._save_plan()
        return folded

    @planned
    def catch_up(self) -> AgentPlan[Any]:
        """Fold every event after the saved position, save, and return the model."""
        yield from self._loop(None, None, live=False)
        return self.model

    @planned
    def run(self, stop: Any = None, max_events: int | None = None) -> AgentPlan[int]:
        """Catch up, then follow the stream live (long polls of ``wait`` seconds), saving
        every ``checkpoint_every`` events and whenever caught up; returns the number of
        events folded when ``stop`` (a threading/asyncio Event, or a callable) is set or
        ``max_events`` were folded."""
        return (yield from self._loop(stop, max_events, live=True))

    @planned
    def load(self) -> AgentPlan[Any]:
        """Load the saved model and position (done by catch_up/run); returns the model."""
        self._loaded = False
        yield from self._load_plan()
        return self.model

    @planned
    def save(self) -> AgentPlan[int]:
        """Save the model and position now; returns the revision."""
        yield from self._load_plan()
        return (yield from self._save_plan())


@driven(ProjectionCore, run, is_async=False)
class Projection(ProjectionCore):
    """A projection over a blocking :class:`client.Client` (see ProjectionCore)."""


@driven(ProjectionCore, arun, is_async=True)
class AsyncProjection(ProjectionCore):
    """A projection over an :class:`client.AsyncClient`: the same methods, awaited."""
