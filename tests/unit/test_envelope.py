"""client/agent/envelope.py: round trips of every supported kind in both formats, schema
evolution (upcaster chains), the allowlist errors, and that every bad payload (pickle,
garbage, truncation, a crafted header or body) raises EnvelopeError and nothing else."""

from __future__ import annotations

import datetime as dt
import enum
import json
import math
import random
import struct
import subprocess
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekeeper.client.agent import envelope as E
from statekeeper.client.agent.envelope import (
    EnvelopeError,
    Header,
    MissingUpcaster,
    PickleRefused,
    SchemaRegistry,
    SchemaTooNew,
    UnknownSchema,
    decode,
    decode_raw,
    encode,
    peek,
)
from statekeeper.client.errors import StatekeeperError

try:
    import msgspec
except ImportError:  # a client-only install
    msgspec = None
try:
    import pydantic
except ImportError:
    pydantic = None

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FORMATS = st.sampled_from(["msgpack", "json"])
COMPRESS = st.sampled_from(["auto", True, False])
REG = SchemaRegistry()


# -- the registered classes -----------------------------------------------------------------
class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass
class Point:
    x: int
    y: float


@REG.schema("Note", version=1)
@dataclass
class Note:
    title: str
    body: bytes
    tags: list[str]
    points: list[Point]
    origin: Point | None
    by_name: dict[str, Point]
    pair: tuple[int, str]
    ids: set[int]
    color: Color
    when: dt.datetime
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Counter:
    value: int
    trail: list[int]


if msgspec is not None:

    class Turn(msgspec.Struct):
        role: str
        text: str
        tokens: int = 0

    @REG.schema("Convo", version=2)
    class Convo(msgspec.Struct):
        id: str
        turns: list[Turn]
        blob: bytes
        meta: dict[str, int]
        score: float | None = None


if pydantic is not None:

    class Tool(pydantic.BaseModel):
        name: str
        args: dict[str, int | str]

    @REG.schema("Plan", version=1)
    class Plan(pydantic.BaseModel):
        goal: str
        steps: list[str]
        tools: list[Tool]
        raw: bytes
        deadline: dt.datetime | None = None


needs_msgspec = pytest.mark.skipif(msgspec is None, reason="msgspec is not installed")
needs_pydantic = pytest.mark.skipif(pydantic is None, reason="pydantic is not installed")


# -- strategies ---------------------------------------------------------------------------------
INTS = st.integers(min_value=-(2**63), max_value=2**64 - 1)
FLOATS = st.floats(allow_nan=False)
TEXT = st.text(max_size=20)
KEYS = st.one_of(TEXT, INTS, st.binary(max_size=8), st.sampled_from(["$bytes", "$map", "$float"]))
SCALARS = st.one_of(st.none(), st.booleans(), INTS, FLOATS, TEXT, st.binary(max_size=40))
PLAIN = st.recursive(
    SCALARS,
    lambda ch: st.lists(ch, max_size=5) | st.dictionaries(KEYS, ch, max_size=5),
    max_leaves=30,
)
POINTS = st.builds(Point, x=st.integers(-(2**40), 2**40), y=FLOATS)
NOTES = st.builds(
    Note,
    title=TEXT,
    body=st.binary(max_size=64),
    tags=st.lists(TEXT, max_size=4),
    points=st.lists(POINTS, max_size=3),
    origin=st.none() | POINTS,
    by_name=st.dictionaries(TEXT, POINTS, max_size=3),
    pair=st.tuples(st.integers(-1000, 1000), TEXT),
    ids=st.sets(st.integers(-1000, 1000), max_size=5),
    color=st.sampled_from(Color),
    when=st.datetimes(timezones=st.none() | st.just(dt.UTC)),
    extra=st.dictionaries(TEXT, PLAIN, max_size=3),
)


def frame(header: Any, body: bytes, *, raw_header: bytes | None = None) -> bytes:
    """An envelope with a valid CRC around any header and body (to reach the later checks)."""
    h = raw_header if raw_header is not None else msgpack.packb(header, use_bin_type=True)
    rest = struct.pack(">H", len(h)) + h + body
    return b"SKE\x01" + struct.pack(">I", zlib.crc32(rest)) + rest


def good_header(**over: Any) -> dict[str, Any]:
    h = {"schema": None, "version": 0, "kind": "plain", "format": "msgpack",
         "compression": None, "size": 0}
    h.update(over)
    return h


# -- round trips --------------------------------------------------------------------------------
@SETTINGS
@given(value=PLAIN, fmt=FORMATS, compress=COMPRESS)
def test_plain_round_trip(value, fmt, compress):
    data = encode(value, REG, format=fmt, compress=compress)
    assert decode(data, REG) == value
    h = peek(data)
    assert (h.schema, h.version, h.kind, h.format) == (None, 0, "plain", fmt)
    assert h.compression == ("zstd" if compress is True else h.compression)
    if compress is False:
        assert h.compression is None


@SETTINGS
@given(note=NOTES, fmt=FORMATS, compress=COMPRESS)
def test_dataclass_round_trip(note, fmt, compress):
    data = encode(note, REG, format=fmt, compress=compress)
    back = decode(data, REG)
    assert type(back) is Note and back == note
    assert type(back.origin) in (Point, type(None)) and isinstance(back.pair, tuple)
    assert peek(data) == Header("Note", 1, fmt, peek(data).compression, "dataclass", peek(data).size)
    assert decode(data, REG, into=Note) == note
    plain = decode(data, REG, into=dict)
    assert plain["title"] == note.title and plain["color"] == note.color.value


@needs_msgspec
@SETTINGS
@given(data=st.data(), fmt=FORMATS, compress=COMPRESS)
def test_msgspec_round_trip(data, fmt, compress):
    turns = st.builds(Turn, role=TEXT, text=TEXT, tokens=st.integers(0, 10**6))
    convo = data.draw(st.builds(
        Convo, id=TEXT, turns=st.lists(turns, max_size=4), blob=st.binary(max_size=64),
        meta=st.dictionaries(TEXT, st.integers(-(2**63), 2**63 - 1), max_size=4),
        score=st.none() | FLOATS,
    ))
    env = encode(convo, REG, format=fmt, compress=compress)
    assert decode(env, REG) == convo
    assert (peek(env).schema, peek(env).version, peek(env).kind) == ("Convo", 2, "msgspec")


@needs_pydantic
@SETTINGS
@given(data=st.data(), fmt=FORMATS, compress=COMPRESS)
def test_pydantic_round_trip(data, fmt, compress):
    tools = st.builds(Tool, name=TEXT, args=st.dictionaries(TEXT, st.integers(-99, 99) | TEXT, max_size=3))
    plan = data.draw(st.builds(
        Plan, goal=TEXT, steps=st.lists(TEXT, max_size=4), tools=st.lists(tools, max_size=3),
        raw=st.binary(max_size=64), deadline=st.none() | st.datetimes(timezones=st.just(dt.UTC)),
    ))
    env = encode(plan, REG, format=fmt, compress=compress)
    assert decode(env, REG) == plan
    assert peek(env).kind == "pydantic"


def _proto_class():
    pb = pytest.importorskip("google.protobuf", reason="protobuf is not installed")
    del pb
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fdp = descriptor_pb2.FileDescriptorProto(name="sk_envelope_test.proto", package="sktest")
    msg = fdp.message_type.add(name="Memo")
    F = descriptor_pb2.FieldDescriptorProto
    for number, (name, typ, label) in enumerate([
        ("title", F.TYPE_STRING, F.LABEL_OPTIONAL), ("count", F.TYPE_INT64, F.LABEL_OPTIONAL),
        ("blob", F.TYPE_BYTES, F.LABEL_OPTIONAL), ("tags", F.TYPE_STRING, F.LABEL_REPEATED),
        ("score", F.TYPE_DOUBLE, F.LABEL_OPTIONAL),
    ], start=1):
        msg.field.add(name=name, number=number, type=typ, label=label)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    desc = pool.FindMessageTypeByName("sktest.Memo")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


@SETTINGS
@given(data=st.data(), fmt=FORMATS, compress=COMPRESS)
def test_protobuf_round_trip(data, fmt, compress):
    Memo = _proto_class()
    reg = SchemaRegistry()
    reg.register(Memo, "Memo", 1)
    memo = Memo(
        title=data.draw(TEXT), count=data.draw(st.integers(-(2**63), 2**63 - 1)),
        blob=data.draw(st.binary(max_size=64)), tags=data.draw(st.lists(TEXT, max_size=3)),
        score=data.draw(FLOATS),
    )
    env = encode(memo, reg, format=fmt, compress=compress)
    assert decode(env, reg) == memo
    assert peek(env).kind == "protobuf"


def test_non_finite_floats_and_tuples():
    value = {"nan": float("nan"), "inf": float("inf"), "neg": float("-inf"), "t": (1, (2, b"x"))}
    for fmt in ("msgpack", "json"):
        back = decode(encode(value, format=fmt))
        assert math.isnan(back["nan"]) and back["inf"] == math.inf and back["neg"] == -math.inf
        assert back["t"] == [1, [2, b"x"]]


def test_json_body_is_strict_readable_json():
    value = {"text": "héllo", "blob": b"\x00\xff", 1: None, "f": float("inf"), "$map": "x"}
    data = encode(value, format="json", compress=False)
    h = peek(data)
    body = data[-h.size:].decode("utf-8")
    doc = json.loads(body, parse_constant=lambda c: pytest.fail(f"non-strict JSON {c}"))
    assert "héllo" in body
    assert doc == {"$map": [["text", "héllo"], ["blob", {"$bytes": "AP8="}], [1, None],
                            ["f", {"$float": "inf"}], ["$map", "x"]]}
    assert decode(data) == value
    only_str = decode_raw(encode({"a": b"hi"}, format="json", compress=False))
    assert only_str[1] == {"a": b"hi"}


# -- compression ----------------------------------------------------------------------------------
def test_compression_auto_only_when_it_pays():
    assert peek(encode({"a": "x" * 100})).compression is None  # below 1 KiB
    big = encode({"a": "x" * 5000})
    assert peek(big).compression == "zstd" and len(big) < 500 and peek(big).size > 5000
    rand = random.Random(0).randbytes(4096)  # incompressible: zstd saves < 10%
    assert peek(encode(rand)).compression is None
    assert peek(encode(rand, compress=True)).compression == "zstd"
    assert peek(encode({"a": "x" * 5000}, compress=False)).compression is None
    assert decode(encode(rand, compress=True)) == rand


def test_zstd_frame_larger_than_its_header_size_is_refused():
    zstandard = pytest.importorskip("zstandard")
    body = msgpack.packb("x" * 100_000)
    packed = zstandard.ZstdCompressor().compress(body)
    for size in (0, 10, len(body) - 1, len(body) + 1):
        with pytest.raises(EnvelopeError, match="body is"):
            decode(frame(good_header(compression="zstd", size=size), packed))
    assert decode(frame(good_header(compression="zstd", size=len(body)), packed)) == "x" * 100_000


# -- schema evolution -------------------------------------------------------------------------------
def _affine(a: int, b: int, version: int):
    def up(d):
        return {"value": d["value"] * a + b, "trail": [*d["trail"], version]}
    return up


@SETTINGS
@given(
    start=st.integers(1, 4),
    steps=st.lists(st.tuples(st.integers(-5, 5), st.integers(-100, 100)), min_size=1, max_size=5),
    value=st.integers(-1000, 1000), fmt=FORMATS, data=st.data(),
)
def test_upcaster_chains_compose_in_order(start, steps, value, fmt, data):
    old, new = SchemaRegistry(), SchemaRegistry()
    old.register(Counter, "Counter", start)
    new.register(Counter, "Counter", start + len(steps))
    expected = Counter(value, [])
    for i, (a, b) in enumerate(steps):
        new.add_upcaster("Counter", start + i, start + i + 1, _affine(a, b, start + i))
        expected = Counter(expected.value * a + b, [*expected.trail, start + i])
    env = encode(Counter(value, []), old, format=fmt)
    assert peek(env).version == start
    assert decode(env, new) == expected
    assert decode(env, new, into=dict) == {"value": expected.value, "trail": expected.trail}
    assert decode(encode(expected, new), new) == expected  # current version: no upcasting

    gap = data.draw(st.integers(0, len(steps) - 1))
    holey = SchemaRegistry()
    holey.register(Counter, "Counter", start + len(steps))
    for i, (a, b) in enumerate(steps):
        if i != gap:
            holey.add_upcaster("Counter", start + i, start + i + 1, _affine(a, b, start + i))
    with pytest.raises(MissingUpcaster) as ei:
        decode(env, holey)
    assert (ei.value.schema, ei.value.from_version, ei.value.to_version) == (
        "Counter", start + gap, start + len(steps))
    assert f"Counter from v{start + gap}" in str(ei.value)
    assert f"v{start + len(steps)}" in str(ei.value)


def test_upcaster_may_skip_versions_but_not_overshoot():
    old, new = SchemaRegistry(), SchemaRegistry()
    old.register(Counter, "Counter", 1)
    new.register(Counter, "Counter", 4)
    new.add_upcaster("Counter", 1, 3, lambda d: {**d, "trail": [13]})
    new.add_upcaster("Counter", 3, 4, lambda d: {**d, "trail": [*d["trail"], 34]})
    assert decode(encode(Counter(1, []), old), new) == Counter(1, [13, 34])
    over = SchemaRegistry()
    over.register(Counter, "Counter", 2)
    over.add_upcaster("Counter", 1, 3, lambda d: d)
    with pytest.raises(EnvelopeError, match="past this reader's v2"):
        decode(encode(Counter(1, []), old), over)


def test_schema_too_new_names_both_versions():
    v4, v3 = SchemaRegistry(), SchemaRegistry()
    v4.register(Counter, "ChatState", 4)
    v3.register(Counter, "ChatState", 3)
    with pytest.raises(SchemaTooNew) as ei:
        decode(encode(Counter(1, [2]), v4), v3)
    assert "stored ChatState v4 is newer than this reader's v3; upgrade the reader" in str(ei.value)
    assert (ei.value.stored, ei.value.current) == (4, 3)


def test_upcaster_bugs_become_envelope_errors():
    old, new = SchemaRegistry(), SchemaRegistry()
    old.register(Counter, "C", 1)
    new.register(Counter, "C", 2)
    new.add_upcaster("C", 1, 2, lambda d: [d])
    env = encode(Counter(1, []), old)
    with pytest.raises(EnvelopeError, match="returned list, not a dict"):
        decode(env, new)
    boom = SchemaRegistry()
    boom.register(Counter, "C", 2)
    boom.add_upcaster("C", 1, 2, lambda d: d["missing"])
    with pytest.raises(EnvelopeError, match="upcaster C v1 -> v2 failed"):
        decode(env, boom)
    dropped = SchemaRegistry()  # an upcaster that forgot a field: an error, not a silent default
    dropped.register(Counter, "C", 2)
    dropped.add_upcaster("C", 1, 2, lambda d: {"value": 1, "extra": 2, "trail": []})
    with pytest.raises(EnvelopeError, match="no field"):
        decode(env, dropped)


# -- the allowlist -----------------------------------------------------------------------------------
@dataclass
class Unregistered:
    a: int = 1


def test_unknown_schema_on_encode_and_decode():
    with pytest.raises(UnknownSchema, match="Unregistered is not a registered schema"):
        encode(Unregistered(), REG)
    with pytest.raises(UnknownSchema, match="object"):
        encode({"x": object()})
    with pytest.raises(UnknownSchema, match="Unregistered"):
        encode({"x": [Unregistered()]}, format="json")
    with pytest.raises(UnknownSchema, match="tuple"):
        encode({(1, 2): "tuple key"})
    other = SchemaRegistry()
    other.register(Unregistered, "Mystery", 1)
    with pytest.raises(UnknownSchema, match="'Mystery' is not registered") as ei:
        decode(encode(Unregistered(), other), REG)
    assert ei.value.schema == "Mystery"
    with pytest.raises(UnknownSchema):
        decode(encode(Unregistered(), other), REG, into=dict)  # into=dict needs the schema too
    assert decode_raw(encode(Unregistered(7), other))[1] == {"a": 7}  # tools: no classes made


def test_into_must_match_the_stored_schema():
    note_env = encode({"plain": True})
    with pytest.raises(EnvelopeError, match="plain dict data"):
        decode(note_env, REG, into=Note)
    with pytest.raises(EnvelopeError, match="plain list data"):
        decode(encode([1]), REG, into=dict)
    reg = SchemaRegistry()
    reg.register(Counter, "Counter", 1)
    reg.register(Unregistered, "U", 1)
    with pytest.raises(EnvelopeError, match="holds Counter, not U"):
        decode(encode(Counter(1, []), reg), reg, into=Unregistered)
    with pytest.raises(UnknownSchema):
        decode(encode(Counter(1, []), reg), reg, into=Point)


def test_registry_rules():
    reg = SchemaRegistry()
    reg.register(Counter, "Counter", 2)
    reg.register(Counter, "Counter", 2)  # idempotent
    for bad in (lambda: reg.register(Point, "Counter", 1), lambda: reg.register(Counter, "Other", 1),
                lambda: reg.register(dict, "D", 1), lambda: reg.register(Point, "P", 0),
                lambda: reg.register(Point, "", 1), lambda: reg.add_upcaster("Counter", 2, 2, dict),
                lambda: reg.add_upcaster("Counter", 0, 1, dict)):
        with pytest.raises(EnvelopeError):
            bad()
    reg.add_upcaster("Counter", 1, 2, dict)
    with pytest.raises(EnvelopeError, match="already registered"):
        reg.add_upcaster("Counter", 1, 2, list)
    assert reg.schema_of(Counter) == ("Counter", 2) and reg.class_of("Counter") is Counter
    assert reg.version_of("Counter") == 2 and "Counter" in reg and Counter in reg


def test_module_level_decorators_use_the_default_registry():
    @E.schema("test_envelope.Memory", version=2)
    @dataclass
    class Memory:
        facts: list

    @E.upcaster("test_envelope.Memory", 1, 2)
    def v1_to_v2(d):
        return {"facts": d["notes"]}

    assert E.default_registry.schema_of(Memory) == ("test_envelope.Memory", 2)
    env = frame({**good_header(schema="test_envelope.Memory", version=1, kind="dataclass",
                               size=len(msgpack.packb({"notes": ["a"]})))},
                msgpack.packb({"notes": ["a"]}))
    assert decode(env) == Memory(["a"])
    assert decode(encode(Memory(["b"]))) == Memory(["b"])


def test_errors_are_statekeeper_errors():
    for cls in (UnknownSchema, SchemaTooNew, MissingUpcaster, PickleRefused):
        assert issubclass(cls, EnvelopeError)
    assert issubclass(EnvelopeError, StatekeeperError)


# -- more typed-class rules ---------------------------------------------------------------------

def test_import_is_lazy_and_pickle_free():
    code = (
        "import sys, client, client.agent.envelope as e; "
        "e.decode(e.encode({'a': b'x' * 4096})); "
        "bad = [m for m in ('msgspec', 'pydantic', 'google.protobuf') if m in sys.modules]; "
        "assert not bad, bad"
    )
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=root)
    src = open(E.__file__).read() + open(sys.modules["statekeeper.client.agent.schemas"].__file__).read()
    assert "import pickle" not in src and "pickle.load" not in src


@needs_pydantic
def test_pydantic_aliases_round_trip_and_secrets_are_not_stored_masked():
    class Creds(pydantic.BaseModel):
        token: pydantic.SecretStr

    class Aliased(pydantic.BaseModel):
        user_id: int = pydantic.Field(alias="userId")

    reg = SchemaRegistry()
    reg.register(Creds, "Creds", 1)
    reg.register(Aliased, "Aliased", 1)
    with pytest.raises(EnvelopeError, match="masked"):
        encode(Creds(token="s3cret"), reg)
    assert decode(encode(Aliased(userId=7), reg), reg) == Aliased(userId=7)


@pytest.mark.parametrize("schema", [
    "Note",
    pytest.param("Convo", marks=needs_msgspec),
    pytest.param("Plan", marks=needs_pydantic),
])
def test_stored_fields_the_class_lacks_are_refused_not_dropped(schema):
    cls, v = REG.class_of(schema), REG.version_of(schema)
    reg = SchemaRegistry()
    reg.register(cls, schema, v + 1)  # the stored data is upcast by adding a field the class lacks
    reg.add_upcaster(schema, v, v + 1, lambda d: {**d, "renamed_in_v2": 1})
    if schema == "Note":
        good = encode(Note("t", b"", [], [], None, {}, (1, "a"), set(), Color.RED,
                           dt.datetime(2020, 1, 1)), REG)
    elif schema == "Convo":
        good = encode(Convo(id="c", turns=[], blob=b"", meta={}), REG)
    else:
        good = encode(Plan(goal="g", steps=[], tools=[], raw=b""), REG)
    with pytest.raises(EnvelopeError, match="no field.*renamed_in_v2"):
        decode(good, reg)


@dataclass
class Broken:
    x: NoSuchType  # noqa: F821


def test_unresolvable_hints_fail_at_encode_not_at_read():
    reg = SchemaRegistry()
    reg.register(Broken, "Broken", 1)
    with pytest.raises(EnvelopeError, match="type hints of .*Broken"):
        encode(Broken(1), reg)

