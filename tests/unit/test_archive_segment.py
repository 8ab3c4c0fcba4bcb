"""The archive segment format (client/archive/segment.py) and manifest entries
(client/archive/manifest.py): round trips, the checksum check, ids, orphans."""

from __future__ import annotations

import zlib

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekeeper.client.archive import manifest
from statekeeper.client.archive.segment import (
    KeyItem,
    StreamItem,
    checksum,
    decode,
    encode,
    new_segment_id,
    valid_segment_id,
)
from statekeeper.client.errors import ArchiveCorrupt, StatekeeperError

names = st.text(min_size=1, max_size=20)
meta_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.text(max_size=10),
    st.floats(allow_nan=False),
)
key_items = st.builds(
    KeyItem,
    names,
    st.binary(max_size=200),
    st.integers(1, 10**6),
    st.integers(1, 10**9),
    st.integers(1, 10**9),
)


@st.composite
def stream_items(draw):
    first = draw(st.integers(1, 10**6))
    n = draw(st.integers(1, 20))
    events = [
        [
            first + i,
            draw(st.binary(max_size=50)),
            draw(st.text(max_size=8)),
            draw(st.integers(0, 2**45)),
            draw(st.integers(1, 10**9)),
            draw(st.one_of(st.none(), st.text(min_size=1, max_size=12))),
            draw(st.dictionaries(st.text(max_size=5), meta_values, max_size=3)),
        ]
        for i in range(n)
    ]
    return StreamItem(draw(names), events)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(key_items, max_size=8),
    st.lists(stream_items(), max_size=4),
    st.text(max_size=10),
    st.integers(0, 2**45),
    st.integers(0, 10**9),
)
def test_round_trip(keys, streams, ns, created, revision) -> None:
    data = encode("20261201T005300Z-0a1b2c3d", ns, created, revision, keys, streams)
    seg = decode(data, checksum(data), "20261201T005300Z-0a1b2c3d")
    assert (seg.id, seg.ns, seg.created_ms, seg.revision) == (
        "20261201T005300Z-0a1b2c3d",
        ns,
        created,
        revision,
    )
    assert seg.keys == keys
    assert [(s.stream, s.events) for s in seg.streams] == [(s.stream, s.events) for s in streams]
    assert seg.events == sum(len(s.events) for s in streams)


@settings(max_examples=40, deadline=None)
@given(st.lists(key_items, min_size=1, max_size=5), st.data())
def test_any_flipped_byte_is_refused_naming_the_segment(keys, data) -> None:
    raw = encode("seg-1", "ns", 1, 2, keys, [])
    sha = checksum(raw)
    i = data.draw(st.integers(0, len(raw) - 1))
    bad = bytearray(raw)
    bad[i] ^= data.draw(st.integers(1, 255))
    with pytest.raises(ArchiveCorrupt, match="seg-1") as info:
        decode(bytes(bad), sha, "seg-1")
    assert info.value.segment == "seg-1" and "sha256" in str(info.value)
    assert isinstance(info.value, StatekeeperError)
    with pytest.raises(ArchiveCorrupt, match="seg-1"):
        decode(raw[:-1], sha, "seg-1")  # truncated


def test_file_layout_and_other_failures() -> None:
    raw = encode(
        "seg-2",
        "agents",
        5,
        9,
        [KeyItem("k", b"v", 1, 2, 3)],
        [StreamItem("s", [[4, b"d", "", 7, 8, None, {}]])],
    )
    magic, version, header, items = msgpack.unpackb(zlib.decompress(raw), raw=False)
    assert (magic, version) == (b"skarchive", 1)
    assert header == {
        "segment": "seg-2",
        "ns": "agents",
        "created_ms": 5,
        "revision": 9,
        "keys": 1,
        "events": 1,
    }
    assert items == [["k", "k", b"v", 1, 2, 3], ["s", "s", [[4, b"d", "", 7, 8, None, {}]]]]
    with pytest.raises(ArchiveCorrupt, match="holds segment 'seg-2'"):
        decode(raw, checksum(raw), "seg-3")
    v2 = zlib.compress(msgpack.packb([b"skarchive", 2, header, items]))
    with pytest.raises(ArchiveCorrupt, match="format version 2"):
        decode(v2, checksum(v2), "seg-2")
    junk = zlib.compress(b"not msgpack \xc1")
    with pytest.raises(ArchiveCorrupt, match="seg-x"):
        decode(junk, checksum(junk), "seg-x")


def test_segment_ids_sort_by_time_and_follow_the_wire_rule() -> None:
    a = new_segment_id(1_796_086_380_000, lambda n: b"\x0a\x1b\x2c\x3d"[:n])
    assert a == "20261201T005300Z-0a1b2c3d"
    b = new_segment_id(1_796_086_381_000, lambda n: b"\x00" * n)
    assert a < b and valid_segment_id(a) and valid_segment_id(b)
    assert (
        not valid_segment_id("a/b") and not valid_segment_id("") and not valid_segment_id("x" * 129)
    )


def test_manifest_entry_round_trip_and_orphans() -> None:
    e = manifest.entry(
        "s1", "segments/ns/s1.skseg", "ab" * 32, 10, "ns", 1, 2, ["k"], [("st", 1, 5)]
    )
    assert manifest.decode_entry(manifest.encode_entry(e)) == e
    with pytest.raises(ValueError):
        manifest.decode_entry(b'{"segment": "x"}')
    m2 = dict(e, segment="s2")
    found = manifest.orphans(
        [e, m2],
        [("ns", "s1"), ("ns", "s2"), ("ns", "s3"), ("ns", "s5")],
        [{"ns": "ns", "id": "s1"}, {"ns": "ns", "id": "s4"}, {"ns": "ns", "id": "s5"}],
    )
    assert [(o["segment"], o["kind"]) for o in found] == [
        ("s2", "unsealed"),
        ("s3", "stray_file"),
        ("s4", "missing_file"),
        ("s5", "missing_manifest"),
    ]
