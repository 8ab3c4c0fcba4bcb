"""An in-memory stand-in for Client/AsyncClient that runs agent-layer plans with no network
(kv with MVCC revisions, txn with compares, batches, streams with expect/dedup/paging), and
tests that it keeps the server's semantics the agent layer relies on (STREAMS-SPEC A)."""

from __future__ import annotations

import copy

import pytest

from statekeeper.client.errors import (
    Archived,
    Conflict,
    ExpectationFailed,
    FenceMismatch,
    InvalidRequest,
    NotFound,
)
from statekeeper.client.ops import fence_field, stream_events
from statekeeper.client.results import (
    AppendedEvent,
    AppendResult,
    DeleteResult,
    KeyValue,
    RangeResult,
    StreamEvent,
    StreamInfo,
    StreamList,
    StreamPage,
    TxnResult,
    WriteResult,
)

_MISSING = object()


FakeEvent, FakePage, FakeAppended = StreamEvent, StreamPage, AppendResult


def FakeStreamInfo(stream: str, last_seq: int) -> StreamInfo:
    return StreamInfo(stream, 1 if last_seq else 0, last_seq, last_seq, 0, 0, 0)


FakeStreamList = StreamList


class MemoryClient:
    """Client-shaped, in memory. ``calls`` records (method, args, kwargs) per request;
    ``fail`` maps a method name to an exception raised instead of running it; ``holders``
    maps (ns, lock name) to the holder's fence: a write with a ``fence`` of another token
    fails FenceMismatch before anything is applied, as on the server."""

    def __init__(self, ns: str = "default") -> None:
        self.ns = ns
        self.timeout = 10.0
        self.rev = 1
        self.time_ms = 1_000
        self.kv: dict[tuple[str, str], list[tuple[int, bytes | None, int, int]]] = {}
        self.streams: dict[tuple[str, str], list[FakeEvent]] = {}
        self.first: dict[tuple[str, str], int] = {}  # first stored seq after a truncation
        self.calls: list[tuple[str, tuple, dict]] = []
        self.fail: dict[str, BaseException] = {}
        self.holders: dict[tuple[str, str], int] = {}
        self.archived: dict[tuple[str, str], tuple[str, KeyValue]] = {}  # -> (segment, kv)
        self.requests = 0

    # -- plumbing
    def _record(self, name: str, args: tuple, kwargs: dict) -> None:
        self.requests += 1
        self.calls.append((name, args, kwargs))
        if name in self.fail:
            raise self.fail[name]

    def _ns(self, ns: str | None) -> str:
        return self.ns if ns is None else ns

    def _check_fence(self, ns: str | None, fence) -> None:
        if fence is None:
            return
        f = fence_field(fence)
        holder = self.holders.get((self._ns(ns), f["name"]))
        if holder != f["token"]:
            raise FenceMismatch(
                f"lock {f['name']!r} is held with fence {holder}, not {f['token']}",
                code="fence_mismatch", status=409,
                details={**f, "holder_fence": holder},
            )

    def _at(self, ns: str, key: str, revision: int | None) -> KeyValue | None:
        hist = self.kv.get((ns, key), [])
        rev = self.rev if revision is None else revision
        entry = None
        for e in hist:
            if e[0] <= rev:
                entry = e
        if entry is None or entry[1] is None:
            return None
        return KeyValue(key, entry[1], entry[2], entry[3], entry[0], ns, rev)

    def _write(self, ns: str, key: str, value: bytes | None, rev: int) -> None:
        cur = self._at(ns, key, None)
        version = 0 if value is None else (cur.version + 1 if cur else 1)
        create = 0 if value is None else (cur.create_revision if cur else rev)
        self.kv.setdefault((ns, key), []).append((rev, value, version, create))

    def _keys(self, ns: str, revision: int | None) -> list[str]:
        # LangGraph writes from its background threads while a graph step reads: walk a
        # copy ("dictionary changed size during iteration" otherwise, about one run in ten).
        found = (k for (n, k) in list(self.kv) if n == ns)
        return sorted(k for k in found if self._at(ns, k, revision) is not None)

    # -- kv
    def put(self, key, value, *, ns=None, idempotency_key=None, prev_kv=False, fence=None):
        self._record("put", (key,), {"ns": ns, "fence": fence})
        self._check_fence(ns, fence)
        return self._put(self._ns(ns), key, value)

    def _put(self, ns, key, value):
        self.rev += 1
        self._write(ns, key, bytes(value.encode() if isinstance(value, str) else value), self.rev)
        return WriteResult(self.rev)

    def archive(self, keys, segment: str, ns: str | None = None) -> None:
        """Like a seal of ``archive run``: the keys are deleted and leave a tombstone;
        a get of one raises Archived naming ``segment`` (or, with archived="fetch",
        answers the archived KeyValue); a range does not list them."""
        ns = self._ns(ns)
        for key in keys:
            self.archived[(ns, key)] = (segment, self._at(ns, key, None))
            self._delete(ns, key, False, self.rev + 1)
        self.rev += 1

    def get(self, key, *, ns=None, revision=None, consistency=None, min_revision=None,
            default=_MISSING, archived="error"):
        self._record("get", (key,), {"ns": ns, "revision": revision, "archived": archived})
        kv = self._at(self._ns(ns), key, revision)
        gone = self.archived.get((self._ns(ns), key))
        if kv is None and gone is not None and revision is None:
            if archived == "fetch":
                return gone[1]
            raise Archived(
                f"key {key!r} was archived to segment {gone[0]!r}", code="archived", status=410,
                details={"key": key, "segment": gone[0], "url": f"memory://{gone[0]}",
                         "sha256": "0" * 64},
            )
        if kv is None:
            if default is not _MISSING:
                return default
            raise NotFound(f"key {key!r} not found", code="key_not_found", status=404)
        return kv

    def delete(self, key, *, ns=None, prefix=False, idempotency_key=None, prev_kv=False,
               fence=None):
        self._record("delete", (key,), {"ns": ns, "prefix": prefix, "fence": fence})
        self._check_fence(ns, fence)
        self.rev += 1
        return DeleteResult(self.rev, self._delete(self._ns(ns), key, prefix, self.rev))

    def _delete(self, ns, key, prefix, rev):
        keys = [k for k in self._keys(ns, None) if (k.startswith(key) if prefix else k == key)]
        for k in keys:
            self._write(ns, k, None, rev)
        return len(keys)

    def range(self, prefix=None, *, start=None, end=None, limit=None, ns=None, revision=None,
              consistency=None, min_revision=None, keys_only=False, continuation=None):
        self._record("range", (prefix,), {"start": start, "end": end, "revision": revision})
        return self._range(self._ns(ns), prefix, start, end, limit, revision, keys_only, continuation)

    def _range(self, ns, prefix, start, end, limit, revision, keys_only, continuation):
        rev = self.rev if revision is None else revision
        keys = self._keys(ns, rev)
        if prefix is not None:
            keys = [k for k in keys if k.startswith(prefix)]
        if start is not None:
            keys = [k for k in keys if k >= start]
        if end is not None:
            keys = [k for k in keys if k < end]
        if continuation is not None:
            keys = [k for k in keys if k > continuation]
        limit = limit or 1000
        page, more = keys[:limit], len(keys) > limit
        kvs = []
        for k in page:
            kv = self._at(ns, k, rev)
            kvs.append(KeyValue(k, b"" if keys_only else kv.value, kv.version,
                                kv.create_revision, kv.mod_revision, ns, rev))
        return RangeResult(kvs, rev, more, page[-1] if more else None)

    # -- txn
    def _compare(self, ns, c) -> bool:
        kv = self._at(c.get("ns") or ns, c["key"], None)
        t, want = c["target"], c["value"]
        if t == "exists":
            actual = kv is not None
        elif t == "value":
            actual = kv.value if kv else None
        else:
            actual = getattr(kv, t) if kv else 0
        return {"==": actual == want, "!=": actual != want}.get(c["op"], False) if c["op"] in (
            "==", "!=") else (actual < want if c["op"] == "<" else actual > want)

    def txn(self, compare, success, failure=(), *, ns=None, idempotency_key=None, fence=None):
        self._record("txn", (), {"ns": ns, "success": [o["op"] for o in success], "fence": fence})
        self._check_fence(ns, fence)
        return self._txn(self._ns(ns), list(compare), list(success), list(failure))

    def _txn(self, ns, compare, success, failure):
        ok = all(self._compare(ns, c) for c in compare)
        branch = success if ok else failure
        saved = (copy.deepcopy(self.kv), copy.deepcopy(self.streams), self.rev)
        rev = self.rev + 1
        wrote = False
        results = []
        try:
            for op in branch:
                o_ns = op.get("ns") or ns
                if op["op"] == "put":
                    self._write(o_ns, op["key"], bytes(op["value"]), rev)
                    wrote = True
                    results.append(WriteResult(rev))
                elif op["op"] == "delete":
                    n = self._delete(o_ns, op["key"], op.get("prefix", False), rev)
                    wrote = wrote or n > 0
                    results.append(DeleteResult(rev, n))
                elif op["op"] == "get":
                    results.append(self._at(o_ns, op["key"], None))
                elif op["op"] == "append":
                    r = self._append(o_ns, op["stream"], op["events"], op.get("expect", "any"), rev)
                    wrote = wrote or r.first_seq is not None
                    results.append({"revision": rev, "last_seq": r.last_seq, "first_seq": r.first_seq})
                else:
                    raise InvalidRequest(f"op {op['op']} not in a txn", code="invalid_argument")
        except Exception:
            self.kv, self.streams, self.rev = saved
            raise
        if wrote:
            self.rev = rev
        return TxnResult(ok, self.rev, results)

    # -- streams
    def _append(self, ns, stream, events, expect, rev) -> FakeAppended:
        evs = self.streams.setdefault((ns, stream), [])
        last = len(evs)
        lo = self.first.get((ns, stream), 1)
        ids = {x.id for x in evs if x.id and x.seq >= lo}
        all_dups = all(e.get("id") in ids for e in events)
        # As the server (node/store/streams.py): expect is not checked when every event is a
        # duplicate, so a replayed append succeeds.
        if expect not in ("any", None) and not all_dups:
            exists = last > 0
            if (expect == "no_stream" and exists) or (expect == "exists" and not exists) or (
                isinstance(expect, int) and expect != last):
                raise ExpectationFailed("expectation failed", code="expectation_failed",
                                        details={"last_seq": last, "exists": exists})
        out = []
        first = None
        for e in events:
            lo = self.first.get((ns, stream), 1)
            dup = next((x for x in evs if e.get("id") and x.id == e.get("id") and x.seq >= lo),
                       None)
            if dup is not None:
                out.append(AppendedEvent(dup.seq, True))
                continue
            seq = len(evs) + 1
            first = first or seq
            evs.append(FakeEvent(seq, bytes(e["data"]), e.get("type", ""), self.time_ms, rev,
                                 e.get("id"), dict(e.get("meta") or {})))
            out.append(AppendedEvent(seq, False))
        self.time_ms += 1
        return FakeAppended(rev, stream, first, len(evs), out)

    def append(self, stream, events, *, expect="any", ns=None, idempotency_key=None, fence=None):
        self._record("append", (stream,), {"expect": expect, "fence": fence})
        self._check_fence(ns, fence)
        r = self._append(self._ns(ns), stream, stream_events(events), expect, self.rev + 1)
        if r.first_seq is not None:
            self.rev += 1
        return r

    def read_stream(self, stream, *, start=None, direction="forward", limit=None, ns=None,
                    revision=None, consistency=None, min_revision=None, continuation=None,
                    wait=None):
        self._record("read_stream", (stream,), {"start": start, "direction": direction,
                                                "revision": revision, "wait": wait})
        return self._read(self._ns(ns), stream, start, direction, limit, revision, continuation)

    def _read(self, ns, stream, start, direction, limit, revision, continuation):
        rev = self.rev if revision is None else revision
        first_seq = self.first.get((ns, stream), 1)
        stored = self.streams.get((ns, stream), [])
        last = max((e.seq for e in stored if e.revision <= rev), default=0)
        evs = [e for e in stored if e.revision <= rev and e.seq >= first_seq]
        if continuation is not None:
            direction, start = continuation
        limit = limit or 1000
        if direction == "forward":
            sel = [e for e in evs if e.seq >= (start or 1)]
        else:
            sel = [e for e in reversed(evs) if e.seq <= (last if start is None else start)]
        page, more = sel[:limit], len(sel) > limit
        cont = None
        if more:
            nxt = page[-1].seq + 1 if direction == "forward" else page[-1].seq - 1
            cont = (direction, nxt)
        return FakePage(page, rev, last, more, cont, first_seq)

    def truncate_stream(self, stream, before_seq, *, ns=None, idempotency_key=None):
        """Like the server's: events below ``before_seq`` (and their ids) are gone."""
        self._record("truncate_stream", (stream,), {"before_seq": before_seq})
        key = (self._ns(ns), stream)
        if key not in self.streams:
            raise NotFound(f"stream {stream!r} not found", code="stream_not_found", status=404)
        evs = self.streams[key]
        last = evs[-1].seq if evs else 0
        old = self.first.get(key, 1)
        new = max(old, min(before_seq, last + 1))
        self.first[key] = new
        self.rev += 1 if new > old else 0
        return {"revision": self.rev, "stream": stream, "first_seq": new, "last_seq": last,
                "removed": new - old, "more": False}

    def list_streams(self, prefix=None, *, ns=None, limit=None, continuation=None, consistency=None):
        self._record("list_streams", (prefix,), {})
        ns = self._ns(ns)
        names = sorted(s for (n, s) in self.streams if n == ns and s.startswith(prefix or ""))
        infos = [FakeStreamInfo(s, len(self.streams[(ns, s)])) for s in names]
        return FakeStreamList(infos, self.rev, False, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    # -- batch
    def batch(self, *, ns=None, consistency=None):
        return FakeBatch(self, self._ns(ns))


class FakeBatch:
    """Collects calls; execute() runs them as ONE request (per-op errors as instances)."""

    def __init__(self, client: MemoryClient, ns: str) -> None:
        self.client, self.ns, self.ops = client, ns, []

    def __getattr__(self, name):
        def add(*args, **kwargs):
            kwargs.setdefault("ns", self.ns)
            self.ops.append((name, args, kwargs))
            return self

        return add

    def execute(self):
        c = self.client
        c._record("batch", (), {"ops": [o[0] for o in self.ops]})
        out = []
        for name, args, kwargs in self.ops:
            saved = (c.requests, list(c.calls), c.fail)
            c.fail = {}
            try:
                if name == "get":
                    kwargs = {**kwargs, "default": None}
                out.append(getattr(c, name)(*args, **kwargs))
            except Exception as exc:
                out.append(exc)
            finally:
                c.requests, c.calls, c.fail = saved
        self.results = out
        return out


class AsyncMemoryClient:
    """The same store behind coroutine methods (what arun awaits)."""

    def __init__(self, inner: MemoryClient | None = None) -> None:
        self.inner = inner or MemoryClient()
        self.ns, self.timeout = self.inner.ns, self.inner.timeout

    def __getattr__(self, name):
        fn = getattr(self.inner, name)

        async def call(*args, **kwargs):
            return fn(*args, **kwargs)

        if name == "batch":
            def make_batch(**kw):
                b = fn(**kw)
                sync_execute = b.execute

                async def execute():
                    return sync_execute()

                b.__dict__["execute"] = execute
                return b

            return make_batch
        return call


# -- the fake keeps the semantics the agent layer relies on ------------------------------


def test_fake_txn_compare_on_missing_key_mod_revision_zero() -> None:
    c = MemoryClient()
    from statekeeper.client.ops import compare, ops

    r = c.txn([compare.mod_revision("k") == 0], [ops.put("k", b"1")])
    assert r.succeeded and c.get("k").mod_revision == r.revision
    r2 = c.txn([compare.mod_revision("k") == 0], [ops.put("k", b"2")], [ops.get("k")])
    assert not r2.succeeded and r2.results[0].value == b"1"


def test_fake_txn_append_expectation_aborts_everything() -> None:
    c = MemoryClient()
    from statekeeper.client.ops import ops

    c.append("s", [{"data": b"a"}])
    with pytest.raises(Conflict) as err:
        c.txn([], [ops.put("k", b"1"), {"op": "append", "stream": "s", "events": [{"data": b"b"}],
                                         "expect": 0}])
    assert err.value.code == "expectation_failed"
    assert c.get("k", default=None) is None and c.read_stream("s").last_seq == 1


def test_fake_read_at_revision_and_backward_paging() -> None:
    c = MemoryClient()
    for i in range(5):
        c.append("s", [{"data": bytes([i])}])
    rev3 = c.streams[("default", "s")][2].revision
    assert [e.seq for e in c.read_stream("s", revision=rev3).events] == [1, 2, 3]
    page = c.read_stream("s", direction="backward", limit=2)
    assert [e.seq for e in page.events] == [5, 4] and page.more
    nxt = c.read_stream("s", continuation=page.continuation, limit=2)
    assert [e.seq for e in nxt.events] == [3, 2]
