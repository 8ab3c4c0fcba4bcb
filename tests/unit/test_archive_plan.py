"""The archiver's plans (client/archive/archiver.py) driven by client/plan.py's
``run`` over a fake exchange: a scripted cluster and an in-memory archive, no network.
Checks the order of the steps (segment durable, manifest durable, then seal), that items
changed between plan and read are left out, that a seal keeps its idempotency key across
retries, the seal and restore chunking, and the archived reads."""

from __future__ import annotations

from typing import Any

import pytest

from statekeeper.client.archive import manifest, restore
from statekeeper.client.archive.archiver import run_plan, seal_parts
from statekeeper.client.archive.restore import fetch_key, restore_plan
from statekeeper.client.archive.segment import KeyItem, StreamItem, checksum, decode, encode
from statekeeper.client.errors import ArchiveCorrupt, Archived, NotFound, Timeout
from statekeeper.client.plan import run
from statekeeper.client.results import KeyValue, StreamEvent, StreamInfo, StreamPage

URL = "memory://arch"


class FakeBatch:
    def __init__(self, owner: FakeCluster) -> None:
        self.owner, self.keys = owner, []

    def get(self, key: str) -> FakeBatch:
        self.keys.append(key)
        return self

    def execute(self) -> list[Any]:
        self.owner.log.append(("batch_get", tuple(self.keys)))
        return [self.owner.kv.get(k) for k in self.keys]


class FakeCluster:
    """Scripted answers; ``log`` records every step the plan took, in order."""

    def __init__(self) -> None:
        self.log: list[tuple] = []
        self.plans: list[dict[str, Any]] = []
        self.kv: dict[str, KeyValue] = {}
        self.events: dict[str, list[StreamEvent]] = {}
        self.files: dict[str, bytes] = {}
        self.seal_failures = 0
        self.seals: list[dict[str, Any]] = []
        self.restores: list[dict[str, Any]] = []

    # client calls
    def archive_plan(self, prefix: str, **kw: Any) -> dict[str, Any]:
        self.log.append(("archive_plan", prefix, kw))
        return (
            self.plans.pop(0)
            if self.plans
            else {"revision": 50, "keys": [], "streams": [], "more": False}
        )

    def batch(self, ns: str | None = None, consistency: str | None = None) -> FakeBatch:
        return FakeBatch(self)

    def read_stream(self, stream: str, *, ns: str, start: int, limit: int) -> StreamPage:
        self.log.append(("read_stream", stream, start, limit))
        evs = self.events[stream]
        page = [e for e in evs if e.seq >= start][:limit]
        return StreamPage(page, 50, evs[-1].seq, False, None, evs[0].seq)

    def archive_seal(self, segment: dict, **kw: Any) -> dict[str, Any]:
        self.log.append(("archive_seal", kw["idempotency_key"]))
        self.seals.append({"segment": segment, **kw})
        if self.seal_failures:
            self.seal_failures -= 1
            raise Timeout("lost", code="timeout")
        return {
            "revision": 51,
            "segment": segment["id"],
            "sealed_keys": len(kw["keys"]),
            "sealed_events": sum(b - a for _, a, b in kw["streams"]),
            "skipped": [],
        }

    def archive_restore_op(self, segment: str, **kw: Any) -> dict[str, Any]:
        self.log.append(("archive_restore_op", segment))
        self.restores.append(kw)
        return {
            "revision": 60,
            "segment": segment,
            "restored_keys": len(kw["keys"]),
            "restored_events": sum(len(e) for _, e in kw["streams"]),
            "skipped": [],
        }

    def get(self, key: str, **kw: Any) -> Any:
        self.log.append(("get", key))
        kv = self.kv.get(key)
        if kv is None:
            raise self.archived_error
        return kv

    def stream_info(self, stream: str, **kw: Any) -> StreamInfo:
        return StreamInfo(stream, 30, 40, 11, 0, 1, 2, 70)

    # archive steps (the Driver's)
    def store_put(self, path: str, data: bytes) -> None:
        self.log.append(("store_put", path))
        self.files[path] = data

    def store_delete(self, path: str) -> None:
        self.log.append(("store_delete", path))
        self.files.pop(path, None)

    def store_read_url(self, url: str, size: int | None = None) -> bytes:
        self.log.append(("store_read_url", url))
        return self.files[url.removeprefix(URL + "/")]

    def progress(self, step: str, info: dict) -> None:
        self.log.append(("progress", step))


def kv(key: str, value: bytes, mod: int) -> KeyValue:
    return KeyValue(key, value, 1, mod, mod, "ns", 50)


def events(stream_first: int, n: int) -> list[StreamEvent]:
    return [
        StreamEvent(
            s,
            b"e%d" % s,
            "t" if s % 2 else "",
            1000 + s,
            10 + s,
            f"id{s}" if s % 3 else None,
            {"n": s} if s % 4 == 0 else {},
        )
        for s in range(stream_first, stream_first + n)
    ]


def archive(c: FakeCluster, **kw: Any) -> dict[str, Any]:
    plan = run_plan(
        ns="ns",
        target=kw.pop("target", "keys"),
        prefix="agent/",
        rules={"keep_last": 10},
        store_url=lambda p: f"{URL}/{p}",
        clock_ms=lambda: 1_796_086_380_000,
        random_bytes=lambda n: b"\x01" * n,
        **kw,
    )
    return run(c, plan)


def steps(c: FakeCluster) -> list[str]:
    return [s[0] if s[0] != "progress" else "progress:" + s[1] for s in c.log]


def test_steps_in_order_segment_then_manifest_then_seal() -> None:
    c = FakeCluster()
    c.kv = {f"agent/a/ckpt/{i}": kv(f"agent/a/ckpt/{i}", b"v%d" % i, i) for i in range(1, 4)}
    c.events = {"log": events(1, 5)}
    c.plans = [
        {
            "revision": 50,
            "keys": [[k, v.mod_revision, len(v.value)] for k, v in c.kv.items()],
            "streams": [["log", 1, 5]],
            "more": False,
        }
    ]
    out = archive(c)
    assert steps(c) == [
        "archive_plan",
        "progress:planned",
        "batch_get",
        "read_stream",
        "store_put",
        "progress:segment-written",
        "store_put",
        "progress:manifest-written",
        "archive_seal",
        "progress:sealed",
        "archive_plan",
        "progress:planned",
    ]
    seg_id = "20261201T005300Z-01010101"
    assert c.log[4][1] == f"segments/ns/{seg_id}.skseg"
    assert c.log[6][1] == f"manifest/ns/{seg_id}.json"
    assert c.log[8][1] == f"archive-seal:{seg_id}:0"
    seal = c.seals[0]
    data = c.files[f"segments/ns/{seg_id}.skseg"]
    assert seal["segment"] == {
        "id": seg_id,
        "url": f"{URL}/segments/ns/{seg_id}.skseg",
        "sha256": checksum(data),
        "bytes": len(data),
    }
    assert seal["keys"] == [[k, v.mod_revision] for k, v in c.kv.items()]
    assert seal["streams"] == [["log", 1, 5]]  # before_seq 5: events 1..4
    seg = decode(data, checksum(data), seg_id)
    assert [(k.key, k.value, k.mod_revision) for k in seg.keys] == [
        (k, v.value, v.mod_revision) for k, v in c.kv.items()
    ]
    assert seg.streams[0].events == [
        [e.seq, e.data, e.type, e.time_ms, e.revision, e.id, e.meta] for e in c.events["log"][:4]
    ]
    entry = manifest.decode_entry(c.files[f"manifest/ns/{seg_id}.json"])
    assert entry["sha256"] == checksum(data) and entry["streams"] == [["log", 1, 5]]
    assert out["sealed_keys"] == 3 and out["sealed_events"] == 4 and out["skipped"] == []
    assert out["bytes"] == len(data) and len(out["segments"]) == 1


def test_items_changed_between_plan_and_read_are_left_out() -> None:
    c = FakeCluster()
    c.kv = {"a": kv("a", b"1", 5), "b": kv("b", b"2", 9)}  # b changed: planned at 6
    c.events = {"moved": events(3, 7), "ok": events(1, 3)}  # "moved" now starts at 3
    c.plans = [
        {
            "revision": 50,
            "keys": [["a", 5, 1], ["b", 6, 1], ["gone", 3, 1]],
            "streams": [["moved", 2, 5], ["ok", 1, 3]],
            "more": False,
        }
    ]
    out = archive(c)
    seal = c.seals[0]
    assert seal["keys"] == [["a", 5]] and seal["streams"] == [["ok", 1, 3]]
    assert sorted(out["skipped"]) == [["b", "changed"], ["gone", "missing"], ["moved", "moved"]]
    seg_id = seal["segment"]["id"]
    data = c.files[f"segments/ns/{seg_id}.skseg"]
    seg = decode(data, checksum(data), seg_id)
    assert [k.key for k in seg.keys] == ["a"] and [s.stream for s in seg.streams] == ["ok"]


def test_seal_keeps_its_idempotency_key_across_retries() -> None:
    c = FakeCluster()
    c.kv = {"a": kv("a", b"1", 5)}
    c.plans = [{"revision": 50, "keys": [["a", 5, 1]], "streams": [], "more": False}]
    c.seal_failures = 2
    out = archive(c)
    keys = [s[1] for s in c.log if s[0] == "archive_seal"]
    assert len(keys) == 3 and len(set(keys)) == 1 and keys[0].startswith("archive-seal:")
    assert keys[0].endswith(":0") and out["sealed_keys"] == 1
    c2 = FakeCluster()
    c2.kv = {"a": kv("a", b"1", 5)}
    c2.plans = [{"revision": 50, "keys": [["a", 5, 1]], "streams": [], "more": False}]
    c2.seal_failures = 3  # gives up: the outcome is unknown, raised
    with pytest.raises(Timeout):
        archive(c2)
    assert [s[0] for s in c2.log][-1] == "archive_seal"
    assert "progress" not in [s[0] for s in c2.log[-3:]]


def test_segment_sealing_nothing_is_deleted_and_the_run_stops() -> None:
    c = FakeCluster()
    c.kv = {"a": kv("a", b"1", 5)}
    c.plans = [{"revision": 50, "keys": [["a", 5, 1]], "streams": [], "more": False}] * 3
    c.archive_seal = lambda segment, **kw: {  # type: ignore[method-assign]
        "revision": 50,
        "segment": segment["id"],
        "sealed_keys": 0,
        "sealed_events": 0,
        "skipped": [["a", "changed"]],
    }
    out = archive(c)
    assert c.files == {} and [s[0] for s in c.log].count("archive_plan") == 1
    assert out["skipped"] == [["a", "changed"]] and out["sealed_keys"] == 0
    assert out["segments"] == [] and out["bytes"] == 0


def test_max_segments_bounds_a_run() -> None:
    c = FakeCluster()
    c.kv = {"a": kv("a", b"1", 5), "b": kv("b", b"1", 6)}
    c.plans = [
        {"revision": 50, "keys": [["a", 5, 1]], "streams": [], "more": True},
        {"revision": 51, "keys": [["b", 6, 1]], "streams": [], "more": False},
    ]
    out = archive(c, max_segments=1)
    assert len(out["segments"]) == 1 and len(c.plans) == 1


def test_seal_parts_respect_items_and_events_limits() -> None:
    keys = [KeyItem(f"k{i}", b"", 1, 1, i + 1) for i in range(600)]
    streams = [
        StreamItem(f"s{i}", [[j, b"", "", 0, 1, None, {}] for j in range(1, 6001)])
        for i in range(3)
    ]
    parts = seal_parts(keys, streams)
    assert [len(k) for k, _ in parts] == [500, 100, 0, 0]
    assert [sum(b - a for _, a, b in s) for _, s in parts] == [0, 6000, 6000, 6000]
    for k, s in parts:
        assert len(k) + len(s) <= 500 and sum(b - a for _, a, b in s) <= 10_000


def test_restore_reads_verifies_and_chunks_streams_newest_first(monkeypatch) -> None:
    monkeypatch.setattr(restore, "RESTORE_MAX_BYTES", 1000)
    big = [[s, b"x" * 100, "", s, s, None, {}] for s in range(1, 21)]  # 20 x 164 B
    data = encode(
        "seg",
        "ns",
        1,
        2,
        [KeyItem("k", b"v", 3, 1, 4)],
        [
            StreamItem("s", big[10:]),
            StreamItem("s", big[:10]),
            StreamItem("t", [[5, b"y", "", 1, 1, None, {}]]),
        ],
    )
    c = FakeCluster()
    c.files["seg.skseg"] = data
    rec = {"ns": "ns", "id": "seg", "url": f"{URL}/seg.skseg", "sha256": checksum(data)}
    c.archive_list = lambda **kw: {"segments": [rec], "more": False}  # type: ignore[attr-defined]
    out = run(c, restore_plan("seg", ns=None))
    assert out["restored_keys"] == 1 and out["restored_events"] == 21 and out["ns"] == "ns"
    ranges = [(s, e[0][0], e[-1][0] + 1) for r in c.restores for s, e in r["streams"]]
    s_ranges = [r for r in ranges if r[0] == "s"]
    # newest first, each chunk a suffix of what is still archived, contiguous downwards
    assert s_ranges[0][2] == 21 and s_ranges[-1][1] == 1
    for (_, lo, _), (_, _, hi) in zip(s_ranges, s_ranges[1:], strict=False):
        assert hi == lo
    for r in c.restores:
        assert len({s for s, _ in r["streams"]}) == len(r["streams"])
    c.files["seg.skseg"] = data[:-3] + b"zzz"
    with pytest.raises(ArchiveCorrupt, match="seg"):
        run(c, restore_plan("seg", ns=None))
    c.archive_list = lambda **kw: {"segments": [], "more": False}  # type: ignore[attr-defined]
    with pytest.raises(NotFound, match="no archive segment"):
        run(c, restore_plan("seg", ns="ns"))


def test_fetch_and_restore_of_an_archived_key() -> None:
    data = encode("seg", "ns", 1, 2, [KeyItem("k", b"old", 3, 1, 4)], [])
    c = FakeCluster()
    c.files["seg.skseg"] = data
    c.archived_error = Archived(
        "archived",
        code="archived",
        status=410,
        details={
            "segment": "seg",
            "url": f"{URL}/seg.skseg",
            "sha256": checksum(data),
            "key": "k",
            "archived_revision": 9,
            "revision": 12,
        },
    )
    got = run(c, fetch_key("k", "ns", "fetch", {}))
    assert got.archived and got.segment == "seg"
    assert (got.value, got.version, got.create_revision, got.mod_revision) == (b"old", 3, 1, 4)
    assert not KeyValue("k", b"", 1, 1, 1).archived
    c.archive_restore_op = lambda seg, **kw: (  # type: ignore[method-assign]
        c.kv.__setitem__("k", kv("k", b"old", 13)) or {"restored_keys": 1, "skipped": []}
    )
    got = run(c, fetch_key("k", "ns", "restore", {}))
    assert got == kv("k", b"old", 13) and not got.archived
    c.kv.clear()
    c.files["seg.skseg"] = b"tampered"
    with pytest.raises(ArchiveCorrupt):
        run(c, fetch_key("k", "ns", "fetch", {}))
