"""Envelopes: typed agent state <-> self-describing bytes (schema, version, format, zstd).

::

    from statekeeper.client.agent.envelope import encode, decode, peek, schema, upcaster

    @schema("ChatState", version=3)
    @dataclass
    class ChatState: ...

    @upcaster("ChatState", 2, 3)
    def v2_to_v3(d: dict) -> dict: ...

    data = encode(ChatState(...))                  # msgpack body, zstd when it pays
    state = decode(data)                           # a ChatState (v2 data upcast first)
    peek(data)                                     # Header(schema="ChatState", version=3, ...)

What can be encoded: plain data (dict, list/tuple, str, int in [-2**63, 2**64), float,
bool, None, bytes/bytearray/memoryview; schema None, version 0, kind "plain"), and
instances of classes registered in a :class:`SchemaRegistry` (dataclasses, msgspec
Structs, pydantic v2 models, protobuf messages; see client/agent/schemas.py for how each
becomes a map of plain data). ``registry=None`` means :data:`default_registry`, which the
module-level :func:`schema` and :func:`upcaster` decorators fill. Tuples come back as
lists and bytearray/memoryview as bytes; everything else comes back as it went in.

Byte format (format version 1; all integers big-endian)::

    offset  size  field
    0       3     magic b"SKE"
    3       1     format version, 0x01
    4       4     CRC-32 (zlib.crc32) of every byte from offset 8 to the end
    8       2     H: length of the header
    10      H     header: a msgpack map with str keys
    10+H    ...   body (to the end of the data)

Header keys (a reader ignores keys it does not know; a new meaning needs a new format
version byte):

- ``schema``: str, 1..200 printable characters, or nil for plain data
- ``version``: int, >= 1 for a schema, 0 for plain data
- ``kind``: "plain" | "dataclass" | "msgspec" | "pydantic" | "protobuf" (informative: a
  reader decodes into whatever class it registered under ``schema``)
- ``format``: "msgpack" | "json" (how the body is written)
- ``compression``: nil, or "zstd" (the body is one zstd frame)
- ``size``: int, length of the uncompressed body in bytes (at most 1 GiB)

Body, after decompression: the plain data of the value (a map for a typed value).

- msgpack: msgpack 2.0 with the bin type for bytes and str for text; map keys may be
  str, int, float, bool, nil or bin. No ext types: a body holding one is refused, except
  the spec's timestamp (-1), which msgpack-python decodes as ``msgpack.Timestamp`` (a
  value object; this writer never produces it).
- json: UTF-8 JSON (RFC 8259, compact, strict: no NaN literals) so a person can read it.
  Values JSON cannot hold are tagged as one-key objects: bytes ``{"$bytes": base64}``
  (RFC 4648 standard alphabet, padded); a non-finite float ``{"$float": "nan" | "inf" |
  "-inf"}``; a map with a non-str key, or whose only key is ``"$bytes"``, ``"$float"`` or
  ``"$map"``, ``{"$map": [[key, value], ...]}``. A reader untags exactly these.

Compression: ``compress="auto"`` (default) uses zstd (level 3) when the body is at least
1 KiB and the frame saves at least 10%; ``True`` always compresses, ``False`` never.

Decoding: the stored schema name picks the registered class (a strict allowlist: nothing
is imported, nothing is unpickled); stored v < registered v runs the upcasters v -> ... ->
current; stored v > registered v raises :class:`SchemaTooNew`; a gap in the chain raises
:class:`MissingUpcaster`; an unregistered name raises :class:`UnknownSchema`. ``into=dict``
returns the upcast plain data instead of an instance; :func:`decode_raw` returns the
stored plain data and the header with no registry (for tools that show any envelope).
Every failure (pickle, garbage, truncation, a bad CRC or header, data that does not fit
the class, a stored field the class lacks) raises an
:class:`EnvelopeError` (a :class:`~client.errors.StatekeeperError`); decode never returns
a silent None. :func:`peek` reads only the prefix and the header (so the first chunk of a
large envelope is enough) and does not check the CRC.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import math
import struct
import zlib
from collections.abc import Callable
from typing import Any

import msgpack

from .schemas import (
    KINDS,
    EnvelopeError,
    MissingUpcaster,
    PickleRefused,
    SchemaRegistry,
    SchemaTooNew,
    UnknownSchema,
    Upcaster,
    check_hints,
    from_plain,
    kind_of_class,
    to_plain,
)

__all__ = [
    "EnvelopeError",
    "FORMATS",
    "Header",
    "MAGIC",
    "MissingUpcaster",
    "PickleRefused",
    "SchemaRegistry",
    "SchemaTooNew",
    "UnknownSchema",
    "decode",
    "decode_raw",
    "default_registry",
    "encode",
    "peek",
    "schema",
    "upcaster",
]

MAGIC = b"SKE"
FORMAT_VERSION = 1
FORMATS = ("msgpack", "json")
COMPRESSIONS = (None, "zstd")
MAX_BODY_SIZE = 1 << 30
COMPRESS_MIN_BYTES = 1024
COMPRESS_MIN_SAVING = 0.10
ZSTD_LEVEL = 3
_PREFIX = struct.Struct(">3sBIH")  # magic, format version, crc32, header length
_JSON_TAGS = frozenset(("$bytes", "$float", "$map"))
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1

default_registry = SchemaRegistry()


def schema(name: str, version: int = 1) -> Callable[[type], type]:
    """Class decorator registering the class in :data:`default_registry`."""
    return default_registry.schema(name, version)


def upcaster(name: str, from_version: int, to_version: int) -> Callable[[Upcaster], Upcaster]:
    """Decorator registering ``fn(dict) -> dict`` in :data:`default_registry`."""
    return default_registry.upcaster(name, from_version, to_version)


@dataclasses.dataclass(frozen=True)
class Header:
    """What an envelope says about itself (see the module docstring for each field)."""

    schema: str | None
    version: int
    format: str
    compression: str | None
    kind: str
    size: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Any) -> Header:
        """Validate a header map (as stored in an envelope or a manifest)."""
        if not isinstance(d, dict):
            raise EnvelopeError(f"envelope header is {type(d).__name__}, not a map")
        try:
            h = cls(**{f.name: d[f.name] for f in dataclasses.fields(cls)})
        except KeyError as exc:
            raise EnvelopeError(f"envelope header lacks {exc.args[0]!r}") from None
        h._check()
        return h

    def _check(self) -> None:
        plain = self.kind == "plain"
        checks = (
            (self.format in FORMATS, "format"),
            (self.compression in COMPRESSIONS, "compression"),
            (self.kind in KINDS, "kind"),
            (_is_int(self.size) and 0 <= self.size <= MAX_BODY_SIZE, "size"),
            (_is_int(self.version) and (self.version == 0) == plain and self.version >= 0, "version"),
            ((self.schema is None) == plain, "schema"),
            (self.schema is None or (isinstance(self.schema, str) and 0 < len(self.schema) <= 200), "schema"),
        )
        for ok, field in checks:
            if not ok:
                raise EnvelopeError(
                    f"envelope header has an invalid {field}: {getattr(self, field)!r} "
                    f"(kind {self.kind!r}); a newer writer, or corrupt data"
                )


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# -- encode ------------------------------------------------------------------------------
def encode(
    obj: Any,
    registry: SchemaRegistry | None = None,
    format: str = "msgpack",
    compress: bool | str = "auto",
) -> bytes:
    """Envelope bytes for ``obj`` (plain data or an instance of a registered class)."""
    reg = default_registry if registry is None else registry
    if format not in FORMATS:
        raise EnvelopeError(f"format must be one of {FORMATS}, got {format!r}")
    if not (compress == "auto" or isinstance(compress, bool)):
        raise EnvelopeError(f"compress must be 'auto', True or False, got {compress!r}")
    name, version, kind, plain = _describe(obj, reg)
    body = _dump_body(plain, format)
    if len(body) > MAX_BODY_SIZE:
        raise EnvelopeError(f"body is {len(body)} bytes; the limit is {MAX_BODY_SIZE}")
    stored, compression = body, None
    if compress is True or (compress == "auto" and len(body) >= COMPRESS_MIN_BYTES):
        packed = _zstd().ZstdCompressor(level=ZSTD_LEVEL).compress(body)
        if compress is True or len(packed) <= len(body) * (1 - COMPRESS_MIN_SAVING):
            stored, compression = packed, "zstd"
    header = msgpack.packb(
        {"schema": name, "version": version, "kind": kind, "format": format,
         "compression": compression, "size": len(body)},
        use_bin_type=True,
    )
    hlen = struct.pack(">H", len(header))
    crc = zlib.crc32(stored, zlib.crc32(header, zlib.crc32(hlen)))
    return b"".join((_PREFIX.pack(MAGIC, FORMAT_VERSION, crc, len(header)), header, stored))


def _describe(obj: Any, reg: SchemaRegistry) -> tuple[str | None, int, str, Any]:
    """(schema, version, kind, plain data) of the value to encode."""
    cls = type(obj)
    if cls in reg:
        name, version = reg.schema_of(cls)
        entry = reg.entry(name)
        try:
            if entry.kind == "dataclass":
                check_hints(cls)
            plain = to_plain(obj)
        except EnvelopeError:
            raise
        except Exception as exc:
            raise EnvelopeError(f"cannot encode {name} v{version}: {exc!r}") from exc
        if not isinstance(plain, dict):
            raise EnvelopeError(f"{name} encodes to {type(plain).__name__}; a schema needs a map")
        return name, version, entry.kind, plain
    plain_types = (dict, list, tuple, str, int, float, bool, type(None), bytes, bytearray, memoryview)
    if isinstance(obj, plain_types) and kind_of_class(cls) is None:
        return None, 0, "plain", obj
    reg.entry_for_class(cls)  # raises UnknownSchema naming the class
    raise AssertionError("unreachable")


def _dump_body(plain: Any, fmt: str) -> bytes:
    try:
        if fmt == "json":
            text = json.dumps(_tag_json(plain), ensure_ascii=False, allow_nan=False,
                              separators=(",", ":"))
            return text.encode("utf-8")
        body = msgpack.packb(plain, use_bin_type=True)  # first: it refuses cycles (depth)
        _check_keys(plain)
        return body
    except EnvelopeError:
        raise
    except TypeError as exc:  # msgpack: "can not serialize 'set' object"
        raise UnknownSchema(f"cannot encode the value as {fmt}: {exc} (plain data holds only "
                            "dict, list, str, int, float, bool, None and bytes)") from exc
    except (ValueError, OverflowError, RecursionError) as exc:
        raise EnvelopeError(f"cannot encode the value as {fmt}: {exc}") from exc


_KEY_TYPES = (str, int, float, bytes)
_CONTAINERS = (dict, list, tuple)


def _check_keys(value: Any) -> None:
    """Refuse map keys msgpack would write but could not read back (e.g. tuples).

    Run after packb succeeded (so there is no cycle); iterative, and only the containers
    are visited: packb checks the scalars itself.
    """
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            for k, x in v.items():
                if not (k is None or isinstance(k, _KEY_TYPES)):
                    raise UnknownSchema(f"cannot encode a map key of type {type(k).__name__}")
                if isinstance(x, _CONTAINERS):
                    stack.append(x)
        elif isinstance(v, (list, tuple)):
            stack.extend(x for x in v if isinstance(x, _CONTAINERS))


def _tag_json(value: Any) -> Any:
    """The JSON-tagged copy of plain data (see the module docstring); refuses anything else."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise EnvelopeError(f"int {value} is outside [-2**63, 2**64)")
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return {"$float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
        return float(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dict):
        for k in value:
            if not (k is None or isinstance(k, _KEY_TYPES)):
                raise UnknownSchema(f"cannot encode a map key of type {type(k).__name__}")
        lone_tag = len(value) == 1 and next(iter(value)) in _JSON_TAGS
        if all(isinstance(k, str) for k in value) and not lone_tag:
            return {str(k): _tag_json(v) for k, v in value.items()}
        return {"$map": [[_tag_json(k), _tag_json(v)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return [_tag_json(v) for v in value]
    raise UnknownSchema(
        f"cannot encode a value of type {type(value).__module__}.{type(value).__qualname__} "
        "inside plain data: plain data holds only dict, list, str, int, float, bool, None and "
        "bytes (register the class and encode it on its own)"
    )


# -- decode ------------------------------------------------------------------------------
def peek(data: bytes | bytearray | memoryview) -> Header:
    """The header of an envelope; reads only the prefix and the header (no CRC check)."""
    return _open(data, full=False)[0]


def decode(data: bytes | bytearray | memoryview, registry: SchemaRegistry | None = None,
           into: Any = None) -> Any:
    """The value in an envelope: plain data, or an instance of the registered class.

    ``into``: None (the registered class for the stored schema, or the plain data), ``dict``
    (the upcast plain data), or a registered class (which must be the stored schema's).
    """
    reg = default_registry if registry is None else registry
    header, plain = decode_raw(data)
    if header.kind == "plain":
        if into is None or (into is dict and isinstance(plain, dict)):
            return plain
        raise EnvelopeError(
            f"the envelope holds plain {type(plain).__name__} data (no schema), not {_name(into)}"
        )
    name = header.schema
    assert name is not None
    entry = reg.entry(name)
    if into is not None and into is not dict:
        wanted = reg.entry_for_class(into)
        if wanted.name != name:
            raise EnvelopeError(f"the envelope holds {name}, not {wanted.name} ({_name(into)})")
    if not isinstance(plain, dict):
        raise EnvelopeError(f"stored {name} v{header.version} body is {type(plain).__name__}, not a map")
    upcast = reg.upcast(name, header.version, plain)
    if into is dict:
        return upcast
    try:
        return from_plain(entry.cls, entry.kind, upcast)
    except EnvelopeError:
        raise
    except Exception as exc:  # validation errors of dataclass/msgspec/pydantic/protobuf
        raise EnvelopeError(
            f"stored {name} v{header.version} data does not fit {_name(entry.cls)} "
            f"(v{entry.version}): {exc}"
        ) from exc


def decode_raw(data: bytes | bytearray | memoryview) -> tuple[Header, Any]:
    """(header, stored plain data) without a registry: no upcasting, no classes.

    For tools that show any envelope (e.g. as JSON); the data is as stored, at the stored
    version.
    """
    header, body = _open(data, full=True)
    try:
        if header.format == "json":
            plain = json.loads(body.decode("utf-8"), object_pairs_hook=_untag,
                               parse_constant=_refuse_constant)
        else:
            plain = msgpack.unpackb(body, raw=False, strict_map_key=False, use_list=True,
                                    ext_hook=_refuse_ext)
    except EnvelopeError:
        raise
    except Exception as exc:  # msgpack/json/unicode errors, unhashable keys, deep nesting
        raise EnvelopeError(f"corrupt {header.format} body: {exc!r}") from exc
    return header, plain


def _open(data: Any, *, full: bool) -> tuple[Header, bytes]:
    """Check the prefix and header; with ``full``, also the CRC, and return the body."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise EnvelopeError(f"an envelope is bytes, got {type(data).__name__}")
    data = bytes(data)
    if data[:1] == b"\x80" and len(data) > 1 and 2 <= data[1] <= 5:
        raise PickleRefused(
            f"the payload looks like a Python pickle (protocol {data[1]}); statekeeper never "
            "unpickles: re-encode the state with client.agent.envelope.encode"
        )
    if data[:3] != MAGIC:
        raise EnvelopeError(f"not a statekeeper envelope: starts with {data[:8]!r}, not {MAGIC!r}")
    if len(data) < _PREFIX.size:
        raise EnvelopeError(f"truncated envelope: {len(data)} bytes")
    _, fmt_version, crc, hlen = _PREFIX.unpack_from(data)
    if fmt_version != FORMAT_VERSION:
        raise EnvelopeError(
            f"envelope format v{fmt_version} is not this reader's v{FORMAT_VERSION}; "
            "upgrade the reader (or the data is corrupt)"
        )
    end = _PREFIX.size + hlen
    if len(data) < end:
        raise EnvelopeError(f"truncated envelope: header needs {end} bytes, have {len(data)}")
    if full and zlib.crc32(memoryview(data)[8:]) != crc:
        raise EnvelopeError("envelope CRC mismatch: the data is corrupt or truncated")
    try:
        fields = msgpack.unpackb(data[_PREFIX.size:end], raw=False, ext_hook=_refuse_ext)
    except Exception as exc:
        raise EnvelopeError(f"corrupt envelope header: {exc!r}") from exc
    header = Header.from_dict(fields)
    if not full:
        return header, b""
    return header, _body(header, data[end:])


def _body(header: Header, stored: bytes) -> bytes:
    body = stored
    if header.compression == "zstd":
        try:
            reader = _zstd().ZstdDecompressor().stream_reader(io.BytesIO(stored))
            parts, have = [], 0
            while have <= header.size:  # read at most size + 1 bytes: no zstd bomb
                chunk = reader.read(min(1 << 20, header.size + 1 - have))
                if not chunk:
                    break
                parts.append(chunk)
                have += len(chunk)
            body = b"".join(parts)
        except EnvelopeError:
            raise
        except Exception as exc:
            raise EnvelopeError(f"corrupt zstd body: {exc!r}") from exc
    if len(body) != header.size:
        raise EnvelopeError(f"body is {len(body)} bytes, the header says {header.size}")
    return body


def _zstd() -> Any:
    try:
        import zstandard
    except ImportError as exc:
        raise EnvelopeError("zstd compression needs the zstandard package") from exc
    return zstandard


def _untag(pairs: list[tuple[str, Any]]) -> Any:
    if len(pairs) == 1 and pairs[0][0] in _JSON_TAGS:
        tag, v = pairs[0]
        if tag == "$bytes" and isinstance(v, str):
            return base64.b64decode(v.encode("ascii"), validate=True)
        if tag == "$float" and v in ("nan", "inf", "-inf"):
            return float(v)
        if tag == "$map" and isinstance(v, list) and all(isinstance(p, list) and len(p) == 2 for p in v):
            out = dict((k, val) for k, val in v)
            if len(out) != len(v):
                raise EnvelopeError("duplicate key in a JSON $map")
            return out
        raise EnvelopeError(f"bad JSON tag {tag!r}: {v!r:.80}")
    out = dict(pairs)
    if len(out) != len(pairs):
        raise EnvelopeError("duplicate key in a JSON object")
    return out


def _refuse_constant(name: str) -> Any:
    raise EnvelopeError(f"JSON body holds {name}; non-finite floats are written as $float")


def _refuse_ext(code: int, data: bytes) -> Any:
    raise EnvelopeError(f"msgpack ext type {code} in an envelope; ext types are refused")


def _name(cls: Any) -> str:
    return getattr(cls, "__qualname__", repr(cls))
