"""client/agent/envelope.py: every bad payload (pickle, garbage, truncation, a flipped
byte, a crafted header or body) raises EnvelopeError, never another exception or a silent
None; peek reads only the header. The classes and strategies are test_envelope.py's."""

from __future__ import annotations

import json
import struct

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekeeper.client.agent import envelope as E
from statekeeper.client.agent.envelope import (
    EnvelopeError,
    Header,
    PickleRefused,
    decode,
    decode_raw,
    encode,
    peek,
)

from .test_envelope import (
    COMPRESS,
    FORMATS,
    INTS,
    PLAIN,
    REG,
    SETTINGS,
    TEXT,
    frame,
    good_header,
)

# -- bad payloads ------------------------------------------------------------------------------------
PICKLES = [
    b"\x80\x04}\x94.",  # pickle.dumps({}, protocol=4)
    b"\x80\x02}q\x00.",  # protocol 2
    b"\x80\x05\x95\x0b\x00\x00\x00\x00\x00\x00\x00]\x94(K\x01K\x02e.",  # [1, 2], protocol 5
]


@pytest.mark.parametrize("payload", PICKLES)
def test_pickles_are_refused(payload):
    for fn in (decode, peek, decode_raw):
        with pytest.raises(PickleRefused, match="never unpickles"):
            fn(payload)


@SETTINGS
@given(proto=st.integers(2, 5), rest=st.binary(max_size=64))
def test_anything_pickle_shaped_is_refused(proto, rest):
    with pytest.raises(PickleRefused):
        decode(b"\x80" + bytes([proto]) + rest, REG)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200) | st.binary(max_size=200).map(lambda b: b"SKE\x01" + b))
def test_garbage_always_raises_envelope_error(data):
    with pytest.raises(EnvelopeError):
        decode(data, REG)
    try:
        peek(data)
    except EnvelopeError:
        pass


@SETTINGS
@given(value=PLAIN, fmt=FORMATS, compress=COMPRESS, data=st.data())
def test_corruption_and_truncation_are_detected(value, fmt, compress, data):
    env = encode(value, format=fmt, compress=compress)
    cut = data.draw(st.integers(0, len(env) - 1))
    with pytest.raises(EnvelopeError):
        decode(env[:cut])
    pos = data.draw(st.integers(0, len(env) - 1))
    flip = data.draw(st.integers(1, 255))
    bad = bytearray(env)
    bad[pos] ^= flip
    with pytest.raises(EnvelopeError):
        decode(bytes(bad))


HEADER_VALUES = st.one_of(st.none(), INTS, TEXT, st.binary(max_size=4), st.booleans(),
                          st.sampled_from(["zstd", "json", "msgpack", "Note", "plain",
                                           "dataclass", "Convo", "lz4"]))


@settings(max_examples=300, deadline=None)
@given(
    header=st.dictionaries(st.sampled_from(["schema", "version", "kind", "format",
                                            "compression", "size", "x"]), HEADER_VALUES),
    body=st.binary(max_size=64) | PLAIN.map(lambda v: msgpack.packb(v)),
    fix_size=st.booleans(),
)
def test_crafted_headers_and_bodies_never_escape_envelope_error(header, body, fix_size):
    if fix_size:
        header["size"] = len(body)
    try:
        decode(frame(header, body), REG)
    except EnvelopeError:
        pass


@settings(max_examples=200, deadline=None)
@given(body=PLAIN, schema=st.sampled_from(["Note", "Convo", "Plan"]), fmt=FORMATS)
def test_bodies_that_do_not_fit_the_class_raise_envelope_error(body, schema, fmt):
    raw = msgpack.packb(body) if fmt == "msgpack" else json.dumps(E._tag_json(body)).encode()
    env = frame(good_header(schema=schema, version=1, kind="dataclass", format=fmt,
                            size=len(raw)), raw)
    try:
        decode(env, REG)
    except EnvelopeError:
        pass


def test_specific_bad_envelopes():
    body = msgpack.packb(1)
    cases = {
        "not a statekeeper envelope": b'{"json": 1}',
        "format v2": b"SKE\x02" + frame(good_header(size=1), body)[4:],
        "CRC mismatch": frame(good_header(size=1), body)[:-1] + b"\x02",
        "invalid compression": frame(good_header(size=1, compression="lz4"), body),
        "invalid version": frame(good_header(size=1, version=1), body),
        "lacks 'size'": frame({k: v for k, v in good_header().items() if k != "size"}, body),
        "ext type": frame(good_header(size=3), msgpack.packb(msgpack.ExtType(5, b"x"))),
        "not a map": frame(None, body, raw_header=msgpack.packb([1, 2])),
        "truncated": b"SKE\x01\x00",
        "an envelope is bytes": "SKE",
    }
    for message, payload in cases.items():
        with pytest.raises(EnvelopeError, match=message):
            decode(payload)


def test_peek_needs_only_the_header():
    env = encode({"a": "x" * 10_000}, compress=False)
    hlen = struct.unpack_from(">H", env, 8)[0]
    h = peek(env[: 10 + hlen])
    assert h == peek(env) and h.size > 10_000 and h.to_dict()["size"] == h.size
    assert Header.from_dict(h.to_dict()) == h
    with pytest.raises(EnvelopeError, match="truncated"):
        peek(env[: 9 + hlen])
    with pytest.raises(EnvelopeError):
        decode(env[: 10 + hlen])


def test_bad_encode_arguments():
    for kw in ({"format": "xml"}, {"compress": "yes"}):
        with pytest.raises(EnvelopeError):
            encode({}, **kw)
    with pytest.raises(EnvelopeError, match="outside"):
        encode([2**64], format="json")
    with pytest.raises(EnvelopeError):
        encode([2**64])
    with pytest.raises(EnvelopeError):
        encode("\ud800")  # a lone surrogate is not UTF-8
    cycle: list = []
    cycle.append(cycle)
    for fmt in ("msgpack", "json"):
        with pytest.raises(EnvelopeError):
            encode({"a": cycle}, format=fmt)
