"""Typed-state schemas for envelopes: the allowlist registry, upcasters and the errors.

A class is encodable only once it is registered under a schema name and a version (a
strict allowlist: nothing is ever looked up by a name found in the data, and nothing is
imported while decoding)::

    registry = SchemaRegistry()

    @registry.schema("ChatState", version=3)
    class ChatState: ...

    @registry.upcaster("ChatState", 2, 3)      # fn(dict) -> dict, v2 data -> v3 data
    def v2_to_v3(d): ...

Rules
- One class per schema name and one name per class; versions start at 1 (0 is plain data).
- Supported kinds: ``dataclass``, ``msgspec`` (``msgspec.Struct``, not ``array_like``),
  ``pydantic`` (v2 ``BaseModel``) and ``protobuf`` (``google.protobuf`` messages). The
  libraries are never imported here unless the class being handled already comes from
  them, so a client-only install (msgpack, urllib3, httptools, zstandard) works.
- A typed object is stored as a map of plain data (see :func:`to_plain`): dataclass
  fields by name (nested dataclasses become maps, tuples and sets lists, enums their
  value, datetime/date/time ISO 8601 strings, UUID and Decimal strings); msgspec via
  ``msgspec.to_builtins`` (bytes kept); pydantic via ``model_dump(round_trip=True,
  by_alias=True)``;
  protobuf via ``json_format.MessageToDict(preserving_proto_field_name=True)``.
  Decoding rebuilds dataclasses from their type hints, msgspec with ``msgspec.convert``,
  pydantic with ``model_validate`` and protobuf with ``json_format.ParseDict`` (unknown
  fields refused). Data that does not fit the class is an :class:`EnvelopeError`; so is
  a stored field the class does not have (no silent drop: remove it in an upcaster),
  checked at the top level for msgspec (unless ``forbid_unknown_fields``, which checks all
  levels) and pydantic (when ``extra`` is "ignore"); a field missing from the data takes
  the class default, if it has one.
- Upcasters run in a chain from the stored version up to the registered one; each takes
  and returns a dict. At most one upcaster per (schema, from-version); it may skip
  versions (v1 -> v3) but never past the registered version.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import sys
import threading
import types
import typing
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from statekeeper.client.errors import StatekeeperError

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
KINDS = ("plain", "dataclass", "msgspec", "pydantic", "protobuf")


class EnvelopeError(StatekeeperError):
    """The data is not a valid envelope, or the value cannot be encoded or decoded."""

    def __init__(self, message: str = "", *, code: str = "invalid_envelope", **kw: Any) -> None:
        super().__init__(message, code=code, **kw)


class UnknownSchema(EnvelopeError):
    """The class (encode) or the stored schema name (decode) is not registered."""

    def __init__(self, message: str, *, schema: str | None = None) -> None:
        super().__init__(message, code="unknown_schema", details={"schema": schema})
        self.schema = schema


class SchemaTooNew(EnvelopeError):
    """The stored version is newer than the registered one: upgrade the reader."""

    def __init__(self, schema: str, stored: int, current: int) -> None:
        super().__init__(
            f"stored {schema} v{stored} is newer than this reader's v{current}; upgrade the reader",
            code="schema_too_new",
            details={"schema": schema, "stored": stored, "current": current},
        )
        self.schema, self.stored, self.current = schema, stored, current


class MissingUpcaster(EnvelopeError):
    """The upcaster chain from the stored version to the registered one has a gap."""

    def __init__(self, schema: str, from_version: int, to_version: int, stored: int) -> None:
        super().__init__(
            f"no upcaster for {schema} from v{from_version} (stored v{stored}, this reader's "
            f"v{to_version}); register one with @upcaster({schema!r}, {from_version}, "
            f"{from_version + 1})",
            code="missing_upcaster",
            details={"schema": schema, "from": from_version, "to": to_version, "stored": stored},
        )
        self.schema, self.from_version, self.to_version = schema, from_version, to_version
        self.stored = stored


class PickleRefused(EnvelopeError):
    """The payload looks like a Python pickle; statekeeper never unpickles."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="pickle_refused")


def _loaded(module: str, attr: str) -> Any:
    """``module.attr`` if the module is already imported (never imports it), else None."""
    mod = sys.modules.get(module)
    return getattr(mod, attr, None) if mod is not None else None


def kind_of_class(cls: Any) -> str | None:
    """The envelope kind of a class, or None when it is not a supported typed class."""
    if not isinstance(cls, type):
        return None
    for module, attr, kind in (
        ("msgspec", "Struct", "msgspec"),
        ("pydantic", "BaseModel", "pydantic"),
        ("google.protobuf.message", "Message", "protobuf"),
    ):
        base = _loaded(module, attr)
        if base is not None and issubclass(cls, base) and cls is not base:
            return kind
    return "dataclass" if dataclasses.is_dataclass(cls) else None


@dataclasses.dataclass(frozen=True)
class _Entry:
    name: str
    version: int
    cls: type
    kind: str


class SchemaRegistry:
    """The allowlist: registered classes by schema name, and the upcasters between versions."""

    def __init__(self) -> None:
        self._by_name: dict[str, _Entry] = {}
        self._by_class: dict[type, _Entry] = {}
        self._upcasters: dict[tuple[str, int], tuple[int, Upcaster]] = {}
        self._lock = threading.Lock()

    def register(self, cls: type, name: str, version: int = 1) -> type:
        """Allow ``cls`` as schema ``name`` at ``version`` (>= 1); returns ``cls``."""
        _check_name(name)
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise EnvelopeError(f"schema {name}: version must be an int >= 1, got {version!r}")
        kind = kind_of_class(cls)
        if kind is None:
            raise EnvelopeError(
                f"cannot register {_qualname(cls)} as {name}: not a dataclass, msgspec.Struct, "
                "pydantic BaseModel or protobuf Message"
            )
        if kind == "msgspec" and getattr(getattr(cls, "__struct_config__", None), "array_like", False):
            raise EnvelopeError(f"cannot register {_qualname(cls)}: array_like Structs are not supported")
        entry = _Entry(name, version, cls, kind)
        with self._lock:
            old = self._by_name.get(name) or self._by_class.get(cls)
            if old is not None and old != entry and not _is_reload(old, entry):
                raise EnvelopeError(
                    f"cannot register {_qualname(cls)} as {name} v{version}: "
                    f"{_qualname(old.cls)} is already registered as {old.name} v{old.version}"
                )
            if old is not None:
                self._by_name.pop(old.name, None)
                self._by_class.pop(old.cls, None)
            self._by_name[name] = entry
            self._by_class[cls] = entry
        return cls

    def schema(self, name: str, version: int = 1) -> Callable[[type], type]:
        """Class decorator: ``@registry.schema("ChatState", version=3)``."""
        return lambda cls: self.register(cls, name, version)

    def add_upcaster(self, name: str, from_version: int, to_version: int, fn: Upcaster) -> Upcaster:
        """Register ``fn`` to migrate ``name`` data from ``from_version`` to ``to_version``."""
        _check_name(name)
        if not (isinstance(from_version, int) and isinstance(to_version, int)) or not (
            0 < from_version < to_version
        ):
            raise EnvelopeError(
                f"upcaster {name}: need 0 < from_version < to_version, got "
                f"{from_version!r} -> {to_version!r}"
            )
        if not callable(fn):
            raise EnvelopeError(f"upcaster {name} v{from_version}: {fn!r} is not callable")
        with self._lock:
            old = self._upcasters.get((name, from_version))
            if old is not None and old != (to_version, fn):
                raise EnvelopeError(f"an upcaster for {name} from v{from_version} is already registered")
            self._upcasters[(name, from_version)] = (to_version, fn)
        return fn

    def upcaster(self, name: str, from_version: int, to_version: int) -> Callable[[Upcaster], Upcaster]:
        """Decorator: ``@registry.upcaster("ChatState", 2, 3)`` on ``fn(dict) -> dict``."""
        return lambda fn: self.add_upcaster(name, from_version, to_version, fn)

    # -- look-ups ---------------------------------------------------------------------------
    def entry_for_class(self, cls: type) -> _Entry:
        entry = self._by_class.get(cls)
        if entry is None:
            raise UnknownSchema(
                f"{_qualname(cls)} is not a registered schema; register it with "
                f"@schema(name, version=...) (only registered classes are encoded or decoded)"
            )
        return entry

    def entry(self, name: str) -> _Entry:
        entry = self._by_name.get(name)
        if entry is None:
            raise UnknownSchema(f"schema {name!r} is not registered with this reader", schema=name)
        return entry

    def class_of(self, name: str) -> type:
        """The class registered as ``name`` (UnknownSchema if none)."""
        return self.entry(name).cls

    def version_of(self, name: str) -> int:
        """The registered (current) version of ``name`` (UnknownSchema if none)."""
        return self.entry(name).version

    def schema_of(self, cls: type) -> tuple[str, int]:
        """``(name, version)`` of a registered class (UnknownSchema if not registered)."""
        entry = self.entry_for_class(cls)
        return entry.name, entry.version

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def __contains__(self, item: object) -> bool:
        return item in self._by_name or item in self._by_class

    def upcast(self, name: str, version: int, data: Any) -> Any:
        """Migrate ``data`` stored as ``name`` v``version`` to the registered version."""
        current = self.version_of(name)
        if version > current:
            raise SchemaTooNew(name, version, current)
        v = version
        while v < current:
            step = self._upcasters.get((name, v))
            if step is None:
                raise MissingUpcaster(name, v, current, version)
            to, fn = step
            if to > current:
                raise EnvelopeError(
                    f"upcaster {name} v{v} -> v{to} goes past this reader's v{current}"
                )
            try:
                data = fn(data)
            except Exception as exc:  # a bug in user code; keep the error contract
                raise EnvelopeError(f"upcaster {name} v{v} -> v{to} failed: {exc!r}") from exc
            if not isinstance(data, dict):
                raise EnvelopeError(
                    f"upcaster {name} v{v} -> v{to} returned {type(data).__name__}, not a dict"
                )
            v = to
        return data


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not 0 < len(name) <= 200 or not name.isprintable():
        raise EnvelopeError(f"schema name must be 1..200 printable characters, got {name!r}")


def _is_reload(old: _Entry, new: _Entry) -> bool:
    """The same class defined again (a module reload): same name, version and qualname."""
    same = (old.name, old.version, _qualname(old.cls)) == (new.name, new.version, _qualname(new.cls))
    return same and old.cls is not new.cls


def _qualname(cls: Any) -> str:
    cls = cls if isinstance(cls, type) else type(cls)
    return f"{cls.__module__}.{cls.__qualname__}"


# -- typed objects <-> plain data ----------------------------------------------------------
_SCALARS = (str, int, float, bool, type(None), bytes)


def to_plain(value: Any) -> Any:
    """Plain data (dict/list/str/int/float/bool/None/bytes) for a typed value, recursively."""
    if isinstance(value, enum.Enum):
        return to_plain(value.value)
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, dict):
        return {_plain_key(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [to_plain(v) for v in value]
        try:
            return sorted(items)  # deterministic bytes for equal sets
        except TypeError:
            return items
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, (uuid.UUID, Decimal)):
        return str(value)
    kind = kind_of_class(type(value))
    if kind == "dataclass":
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if kind is not None:
        return _typed_to_plain(value, kind)
    raise UnknownSchema(
        f"cannot encode a value of type {_qualname(value)}: not plain data and not a supported "
        "typed class"
    )


def _plain_key(key: Any) -> Any:
    key = key.value if isinstance(key, enum.Enum) else key
    if isinstance(key, (str, int, float, bool, bytes, type(None))):
        return key
    if isinstance(key, (uuid.UUID, Decimal, _dt.date, _dt.time)):
        return to_plain(key)
    raise EnvelopeError(f"cannot encode a map key of type {_qualname(key)}")


def _typed_to_plain(value: Any, kind: str) -> Any:
    if kind == "msgspec":
        import msgspec

        return msgspec.to_builtins(value, builtin_types=(bytes, bytearray, memoryview))
    if kind == "pydantic":
        secret = tuple(t for t in (_loaded("pydantic", "SecretStr"), _loaded("pydantic", "SecretBytes")) if t)
        dumped = value.model_dump(mode="python", round_trip=True, by_alias=True)
        return _pydantic_leaves(dumped, secret)
    from google.protobuf import json_format

    return json_format.MessageToDict(value, preserving_proto_field_name=True)


def _pydantic_leaves(value: Any, secret: tuple[type, ...]) -> Any:
    if isinstance(value, dict):
        return {_plain_key(k): _pydantic_leaves(v, secret) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_pydantic_leaves(v, secret) for v in value]
    if secret and isinstance(value, secret):
        raise EnvelopeError(f"cannot encode {type(value).__name__}: it would be stored masked")
    try:
        return to_plain(value)
    except UnknownSchema:
        import pydantic_core  # Path, AnyUrl, IP addresses, ...: their JSON form

        return pydantic_core.to_jsonable_python(value)


def from_plain(cls: type, kind: str, data: Any) -> Any:
    """An instance of the registered ``cls`` built from its plain data."""
    if kind == "dataclass":
        return _build(cls, data)
    if kind == "msgspec":
        import msgspec

        config = cls.__struct_config__
        if not config.forbid_unknown_fields:
            _no_unknown(cls, data, {*cls.__struct_encode_fields__, config.tag_field} - {None})
        return msgspec.convert(data, cls, strict=False)
    if kind == "pydantic":
        if cls.model_config.get("extra") in (None, "ignore"):
            fields = cls.model_fields.items()
            _no_unknown(cls, data, {n for n, _ in fields} | {f.alias for _, f in fields if f.alias})
        return cls.model_validate(data, strict=False)
    from google.protobuf import json_format

    return json_format.ParseDict(data, cls(), ignore_unknown_fields=False)


def _no_unknown(cls: type, data: Any, known: set[str]) -> None:
    """Refuse stored fields the class would silently drop (a schema change without a new
    version, or an upcaster that forgot to remove a field)."""
    unknown = [k for k in _expect(data, dict, cls) if k not in known]
    if unknown:
        raise EnvelopeError(f"{_qualname(cls)} has no field(s) {unknown!r}")


def check_hints(cls: type, _seen: set[type] | None = None) -> None:
    """Resolve the type hints of a dataclass and of the dataclasses it nests (cached), so a
    class whose hints cannot be resolved fails when it is encoded, not when it is read."""
    seen = set() if _seen is None else _seen
    if cls in seen:
        return
    seen.add(cls)
    stack = list(_hints(cls).values())
    while stack:
        tp = stack.pop()
        stack.extend(typing.get_args(tp))
        if isinstance(tp, type) and kind_of_class(tp) == "dataclass":
            check_hints(tp, seen)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        try:
            hints = typing.get_type_hints(cls, include_extras=False)
        except Exception as exc:
            raise EnvelopeError(f"cannot resolve the type hints of {_qualname(cls)}: {exc!r}") from exc
        _HINTS[cls] = hints
    return hints


def _build(tp: Any, value: Any) -> Any:
    """Rebuild ``value`` (plain data) as type ``tp`` where the hint says how; else as is."""
    origin = typing.get_origin(tp)
    if origin is None:
        return _build_leaf(tp, value)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return _build(args[0], value)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _build(arg, value)
            except Exception as exc:  # try the next member of the union
                errors.append(exc)
        raise EnvelopeError(f"{value!r} fits no member of {tp}: {errors!r}")
    if origin in (list, set, frozenset) or (origin is tuple and args[-1:] == (Ellipsis,)):
        item = args[0] if args else Any
        return origin(_build(item, v) for v in _expect(value, list, tp))
    if origin is tuple:
        seq = _expect(value, list, tp)
        if len(seq) != len(args):
            raise EnvelopeError(f"expected {len(args)} items for {tp}, got {len(seq)}")
        return tuple(_build(a, v) for a, v in zip(args, seq, strict=True))
    if origin is dict:
        kt, vt = args if args else (Any, Any)
        return {_build(kt, k): _build(vt, v) for k, v in _expect(value, dict, tp).items()}
    return value  # Literal, ClassVar, abstract collections, ...: the plain value


def _build_leaf(tp: Any, value: Any) -> Any:
    if not isinstance(tp, type) or tp in _SCALARS or tp is object:
        return value
    if tp is bytearray:
        return bytearray(value)
    if issubclass(tp, enum.Enum):
        return tp(value)
    if issubclass(tp, (_dt.datetime, _dt.date, _dt.time)):
        return value if isinstance(value, tp) else tp.fromisoformat(value)
    if tp in (uuid.UUID, Decimal):
        return tp(value)
    if tp in (list, set, frozenset, tuple):
        return tp(_expect(value, list, tp))
    kind = kind_of_class(tp)
    if kind == "dataclass":
        return _build_dataclass(tp, value)
    if kind is not None:
        return from_plain(tp, kind, value)
    return value


def _build_dataclass(cls: type, value: Any) -> Any:
    data = _expect(value, dict, cls)
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [k for k in data if k not in fields]
    if unknown:
        raise EnvelopeError(f"{_qualname(cls)} has no field(s) {unknown!r}")
    kwargs = {
        name: _build(hints.get(name, Any), v)
        for name, v in data.items()
        if fields[name].init
    }
    return cls(**kwargs)


def _expect(value: Any, tp: type, hint: Any) -> Any:
    if not isinstance(value, tp):
        raise EnvelopeError(f"expected {tp.__name__} for {hint}, got {type(value).__name__}")
    return value
