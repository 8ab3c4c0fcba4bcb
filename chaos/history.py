"""Chaos histories: what the workload's clients asked for and what they got back.

A history is a JSONL file, one event per line. Every operation (op) is one ``invoke``
event followed by at most one completion event with the same ``id``:

``type``
    ``"invoke"`` (the client is about to send the request), then one of
    ``"ok"``   - the op definitely took effect, with the recorded result;
    ``"fail"`` - the op definitely did NOT take effect (``unavailable`` before anything
    was submitted, ``invalid_argument``, ...);
    ``"info"`` - unknown (timeout, connection lost, crash): it may or may not take effect,
    at any time after its invoke. An info op never completes; its event ``time`` only
    says when the client gave up.
    An invoke with no completion at all (the workload stopped) is read as ``info``.
``process``
    int, the client (logical thread) that issued the op; for display only.
``id``
    int or str, unique per op (not per retry: client-internal retries are one op).
``time``
    int, ``time.monotonic_ns()`` of the workload process (one clock for all events).
``f``
    ``"put" | "get" | "delete" | "cas" | "txn"`` (``"range"`` and ``"compact"`` may be
    recorded too; the checker ignores them, they change no value), ``"append" |
    "read_stream"`` (event streams, below).
``key`` / ``keys``
    the key (str) of a single-key op; ``keys`` (list of str) of a txn.

Op inputs (on the invoke event):

- put: ``value``; delete: nothing (``prefix`` deletes are not supported by the checker).
- get: nothing; ``consistency: "serializable"`` or ``revision: R`` marks a read that is not
  linearizable by contract (the checker ignores it).
- cas: ``value`` (new value) and ``expect`` (the value the workload expects; ``null`` =
  expect the key absent). The check is value-based: with unique write values a cas by
  ``version`` / ``mod_revision`` / ``exists`` is equivalent, so record the value the
  workload read together with the version it compares.
- txn: ``compare``: ``[{"key", "value", "op"?: "==" | "!="}]`` (value ``null`` = absent),
  ``success`` / ``failure``: ``[{"f": "put" | "get" | "delete", "key", "value"?}]``.
- every write: ``idempotency_key`` (str; client retries reuse it).

Completion fields (on ``ok``; ``fail``/``info`` may carry ``error``):

- get: ``value`` read (``null`` = key absent), ``revision`` (store revision served at),
  ``mod_revision`` (of the returned kv; needed by the duplicate-application check).
- put / delete / cas / txn: ``revision``; delete also ``deleted`` (count).
- cas: ``succeeded`` (bool); on failure optionally ``value`` = the current value the
  server returned with ``compare_failed`` (``null`` = absent) - recording it makes the
  check stronger and faster.
- txn: ``succeeded`` (bool) and optionally ``results``: one entry per op of the chosen
  branch, the read value for ``get`` ops (anything for writes).

Event streams (``append`` / ``read_stream``; checked by ``chaos.checker.streams``, ignored
by the kv checks: they name a ``stream``, no ``key``):

- append invoke: ``stream``, ``events`` (``[{"id", "data"}]``, ids unique per logical
  append), ``expect`` (int N or ``"any"``), ``idempotency_key``; a later re-send of an
  unknown append repeats its ``events`` (same ids, same data) with ``retry_of``.
  ok: ``revision``, ``first_seq`` (None when every event was a duplicate), ``last_seq``,
  ``seqs`` and ``duplicates`` (one per event). fail with ``error: "expectation_failed"``
  carries the server's ``last_seq`` and ``exists``.
- read_stream invoke: ``stream``, ``start``, ``direction``, ``limit`` (backward reads only:
  a forward read pages to the end). ok: ``revision``, ``last_seq``, ``events``
  (``[[seq, id, data], ...]``), ``pages``.

Locks (``lock_acquire`` / ``fenced_put`` / ``lock_release``, the lockers of
``chaos.lock_workload``; checked by ``chaos.checker.locks``, ignored by the kv checks):

- lock_acquire invoke: ``name``, ``lease``, ``locker``; ok: ``fence``, ``revision``,
  ``key`` (completed when the client holds the lock); fail: ``lock_timeout``.
- fenced_put invoke: ``key``, ``value``, ``fence`` (the token it carries), ``locker``,
  ``idempotency_key`` (``paused``: the locker paused right before it); ok: ``revision``; fail: ``error`` (``fence_mismatch`` with
  ``holder_fence``).
- lock_release invoke: ``name``, ``fence``; ok: ``revision``, ``held``; fail:
  ``lock_not_held``.

CRDTs (``crdt_add`` / ``crdt_sync`` / ``crdt_read``, the replicas of ``chaos.crdt_workload``;
checked by ``chaos.checker.crdt``, ignored by the kv checks; fields: see
``chaos.crdt_workload``).

Values should be strings (JSON); ``bytes`` are written as ``{"$b64": ...}`` and read back as
``bytes``. Write values should be unique per op (e.g. ``f"{process}-{id}"``): the checks
are much stronger with them (see ``chaos.checker``).

Example::

    {"type": "invoke", "process": 3, "id": 17, "time": 1000, "f": "put", "key": "k1",
     "value": "3-17", "idempotency_key": "9b1c..."}
    {"type": "ok", "process": 3, "id": 17, "time": 2500, "f": "put", "key": "k1",
     "revision": 42}

``read_history`` pairs the events into ``Op`` records (sorted by invoke time);
``HistoryWriter`` appends events from many threads / tasks.
"""

from __future__ import annotations

import base64
import io
import json
import math
import os
import threading
import time as _time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Literal

__all__ = [
    "EVENT_TYPES",
    "OP_NAMES",
    "HistoryError",
    "HistoryWriter",
    "Op",
    "Outcome",
    "parse_events",
    "read_events",
    "read_history",
]

EVENT_TYPES = ("invoke", "ok", "fail", "info")
OP_NAMES = (
    "put", "get", "delete", "cas", "txn", "range", "compact", "append", "read_stream",
    "lock_acquire", "lock_release", "fenced_put", "crdt_add", "crdt_sync", "crdt_read",
)  # fmt: skip
Outcome = Literal["ok", "fail", "info"]

# Fields that describe the event rather than the op's input / output.
_ENVELOPE = frozenset({"type", "process", "id", "time", "f", "key", "keys"})


class HistoryError(ValueError):
    """The history is malformed (unpaired events, duplicate ids, missing fields)."""


@dataclass(eq=False, slots=True)
class Op:
    """One operation: its invoke paired with its completion.

    Identity-hashed (two ops are never "equal"), so ops can go in sets and dict keys.
    ``complete_time`` is ``math.inf`` for ``info`` ops: they may take effect any time
    after ``invoke_time``.
    """

    id: int | str
    process: int
    f: str
    keys: tuple[str, ...]
    invoke_time: int
    complete_time: float
    outcome: Outcome
    input: dict[str, Any] = field(default_factory=dict)
    output: dict[str, Any] = field(default_factory=dict)
    # When the completion event was recorded (also for info: when the client gave up).
    end_time: int | None = None

    @property
    def key(self) -> str | None:
        """The key of a single-key op (None for a multi-key txn)."""
        return self.keys[0] if len(self.keys) == 1 else None

    def __repr__(self) -> str:
        return (
            f"Op(id={self.id!r}, p={self.process}, {self.f} {list(self.keys)}, "
            f"in={self.input!r}, out={self.output!r}, {self.outcome}, "
            f"[{self.invoke_time}, {self.complete_time}])"
        )


# ----------------------------------------------------------------------------- encoding


def _encode_default(obj: Any) -> Any:
    if isinstance(obj, bytes | bytearray | memoryview):
        return {"$b64": base64.b64encode(bytes(obj)).decode("ascii")}
    if isinstance(obj, tuple | set | frozenset):
        return list(obj)
    raise TypeError(f"not JSON serializable in a history: {type(obj).__name__}")


def _decode_hook(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and "$b64" in obj:
        return base64.b64decode(obj["$b64"])
    return obj


def _dumps(event: dict[str, Any]) -> str:
    return json.dumps(event, default=_encode_default, separators=(",", ":"), ensure_ascii=False)


# ------------------------------------------------------------------------------ writing


class HistoryWriter:
    """Appends history events as JSONL; safe to share between threads.

    Call ``invoke`` right before sending a request and exactly one of ``ok`` /
    ``fail`` / ``info`` right after the answer (or the give-up): the clock is read
    inside, so the recorded [invoke, complete] interval always contains the real one,
    which keeps the checks sound. ``append`` writes hand-made events. A path is opened
    for appending: use a fresh file per run (ids must be unique in a file). Events are
    buffered: ``flush()`` (or ``close()``) pushes them to the file.
    """

    def __init__(
        self,
        target: str | os.PathLike[str] | IO[str],
        *,
        clock: Callable[[], int] = _time.monotonic_ns,
        fsync: bool = False,
    ) -> None:
        if isinstance(target, str | os.PathLike):
            self._file: IO[str] = open(target, "a", encoding="utf-8")
            self._owns = True
        else:
            self._file = target
            self._owns = False
        self._clock = clock
        self._fsync = fsync
        self._lock = threading.Lock()
        self._next_id = 0
        # id -> (process, f, key fields) of invoked, not yet completed ops, so that
        # completions repeat f/key for a readable file and bad pairings fail early.
        self._pending: dict[int | str, tuple[int, str, dict[str, Any]]] = {}
        self._used: set[int | str] = set()  # ids must stay unique for the whole file
        self._closed = False

    # -- generic

    def append(self, event: dict[str, Any]) -> None:
        """Write one event (``time`` defaults to now). Validates type/process/id."""
        etype = event.get("type")
        if etype not in EVENT_TYPES:
            raise HistoryError(f"bad event type {etype!r}")
        if "id" not in event or not isinstance(event.get("process"), int):
            raise HistoryError("an event needs an id and an int process")
        with self._lock:
            self._write_locked(dict(event))

    def _write_locked(self, event: dict[str, Any]) -> None:
        if self._closed:
            raise HistoryError("history writer is closed")
        event.setdefault("time", self._clock())
        line = _dumps(event)  # may raise before anything is written
        op_id = event["id"]
        if event["type"] == "invoke":
            if op_id in self._used:
                raise HistoryError(f"op id {op_id!r} invoked twice")
            self._used.add(op_id)
            keys = {k: event[k] for k in ("key", "keys") if k in event}
            self._pending[op_id] = (event["process"], event.get("f", ""), keys)
        else:
            self._pending.pop(op_id, None)
        self._file.write(line + "\n")

    # -- op lifecycle

    def invoke(
        self,
        process: int,
        f: str,
        key: str | None = None,
        *,
        keys: Iterable[str] | None = None,
        id: int | str | None = None,
        time: int | None = None,
        **fields: Any,
    ) -> int | str:
        """Record an invoke; returns the op id (allocated if not given)."""
        if f not in OP_NAMES:
            raise HistoryError(f"unknown op {f!r}")
        event: dict[str, Any] = {"type": "invoke", "process": process}
        with self._lock:
            if id is None:
                while self._next_id in self._used:  # skip ids the caller chose
                    self._next_id += 1
                id = self._next_id
                self._next_id += 1
            event["id"] = id
            if time is not None:
                event["time"] = time
            event["f"] = f
            if key is not None:
                event["key"] = key
            if keys is not None:
                event["keys"] = list(keys)
            event.update(fields)
            self._write_locked(event)
        return id

    def _complete(self, etype: str, op_id: int | str, time: int | None, fields: dict) -> None:
        with self._lock:
            pending = self._pending.get(op_id)
            if pending is None:
                raise HistoryError(f"completion for unknown or completed op {op_id!r}")
            process, f, keys = pending
            event: dict[str, Any] = {"type": etype, "process": process, "id": op_id}
            if time is not None:
                event["time"] = time
            event["f"] = f
            event.update(keys)
            event.update(fields)
            self._write_locked(event)

    def ok(self, op_id: int | str, *, time: int | None = None, **result: Any) -> None:
        """The op took effect; ``result``: value / revision / succeeded / results ..."""
        self._complete("ok", op_id, time, result)

    def fail(self, op_id: int | str, *, time: int | None = None, **info: Any) -> None:
        """The op definitely did not take effect (e.g. ``error="unavailable"``)."""
        self._complete("fail", op_id, time, info)

    def info(self, op_id: int | str, *, time: int | None = None, **info: Any) -> None:
        """The outcome is unknown (timeout, connection lost)."""
        self._complete("info", op_id, time, info)

    def pending(self) -> list[int | str]:
        """Ids invoked but not completed yet."""
        with self._lock:
            return list(self._pending)

    # -- file handling

    def flush(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._file.flush()
            if self._fsync:
                try:
                    os.fsync(self._file.fileno())
                except (OSError, io.UnsupportedOperation):
                    pass  # not a real file (StringIO): nothing to sync

    def close(self) -> None:
        self.flush()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._owns:
                self._file.close()

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------------------------ reading


def read_events(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Yield the events of a JSONL history file.

    A torn last line (the writer died mid-line) is skipped; a bad line elsewhere raises.
    """
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for lineno, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            event = json.loads(line, object_hook=_decode_hook)
        except json.JSONDecodeError as exc:
            if lineno == last:
                return
            raise HistoryError(f"{path}:{lineno + 1}: not JSON: {exc}") from None
        if not isinstance(event, dict):
            raise HistoryError(f"{path}:{lineno + 1}: not an object")
        yield event


def _op_keys(event: dict[str, Any]) -> tuple[str, ...]:
    keys: list[str] = []
    if "keys" in event and event["keys"] is not None:
        keys.extend(event["keys"])
    if event.get("key") is not None:
        keys.append(event["key"])
    # A txn names its keys in compare/success/failure too; take them all.
    for part in ("compare", "success", "failure"):
        for item in event.get(part) or ():
            if isinstance(item, dict) and item.get("key") is not None:
                keys.append(item["key"])
    return tuple(sorted(set(keys)))


def _validate(op: Op) -> None:
    if op.outcome != "ok":
        return
    if op.f == "get" and "value" not in op.output:
        raise HistoryError(f"op {op.id!r}: ok get without a read value")
    if op.f in ("cas", "txn") and not isinstance(op.output.get("succeeded"), bool):
        raise HistoryError(f"op {op.id!r}: ok {op.f} without a bool 'succeeded'")


def parse_events(events: Iterable[dict[str, Any]]) -> list[Op]:
    """Pair invoke events with their completions into ``Op`` records.

    Returns the ops sorted by invoke time. An invoke without completion becomes an
    ``info`` op (unknown outcome). Raises ``HistoryError`` on completions without an
    invoke, ids invoked twice or completed twice, and ok results missing a needed field.
    """
    invokes: dict[int | str, dict[str, Any]] = {}
    completions: dict[int | str, dict[str, Any]] = {}
    order: list[int | str] = []
    for event in events:
        etype = event.get("type")
        if etype not in EVENT_TYPES:
            raise HistoryError(f"bad event type {etype!r}: {event!r}")
        if "id" not in event:
            raise HistoryError(f"event without id: {event!r}")
        op_id = event["id"]
        if etype == "invoke":
            if op_id in invokes:
                raise HistoryError(f"op id {op_id!r} invoked twice")
            for name in ("process", "time", "f"):
                if name not in event:
                    raise HistoryError(f"invoke of {op_id!r} has no {name!r}")
            invokes[op_id] = event
            order.append(op_id)
        else:
            if op_id not in invokes:
                raise HistoryError(f"{etype} for op {op_id!r} before / without its invoke")
            if op_id in completions:
                raise HistoryError(f"op {op_id!r} completed twice")
            if "time" not in event:
                raise HistoryError(f"completion of {op_id!r} has no time")
            completions[op_id] = event

    ops: list[Op] = []
    for op_id in order:
        inv = invokes[op_id]
        comp = completions.get(op_id)
        outcome: Outcome = "info" if comp is None else comp["type"]
        end_time = None if comp is None else int(comp["time"])
        complete_time: float = math.inf if outcome == "info" else float(end_time)  # type: ignore[arg-type]
        if outcome != "info" and complete_time < inv["time"]:
            raise HistoryError(f"op {op_id!r} completes before it was invoked")
        op = Op(
            id=op_id,
            process=int(inv["process"]),
            f=inv["f"],
            keys=_op_keys(inv),
            invoke_time=int(inv["time"]),
            complete_time=complete_time,
            outcome=outcome,
            input={k: v for k, v in inv.items() if k not in _ENVELOPE},
            output={} if comp is None else {k: v for k, v in comp.items() if k not in _ENVELOPE},
            end_time=end_time,
        )
        _validate(op)
        ops.append(op)
    ops.sort(key=lambda o: o.invoke_time)
    return ops


def read_history(path: str | os.PathLike[str]) -> list[Op]:
    """Read a JSONL history file into ``Op`` records sorted by invoke time."""
    return parse_events(read_events(path))
