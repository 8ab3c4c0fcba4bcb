"""Stored bytes as the console shows them, and the diff between two of them: what the Keys
page shows for a key's value or revisions and the Agents page for a checkpoint's state.

Decoding (:func:`decode_value`) tries, in order: an agent envelope (the ``SKE`` magic,
decoded without the schema registry as ``statekeeper agent show`` does:
client/agent/codec.py's ``show_envelope``), JSON, msgpack whose first byte is a map or an
array (any byte is some msgpack value, a single-byte text is a msgpack int: only the
container types say "this is msgpack"), UTF-8 text, else the bytes as base64 with their
size. The shown text is cut at :data:`SHOW_LIMIT` characters (``truncated``).

Diffs (:func:`diff_values`): a line diff (difflib) of the pretty-printed forms, and, when
both sides are JSON-able data, a structural one as RFC 6902 JSON Patch operations
(jsonpatch, without "move" ops) with each path's old value. jsonpatch rather than a
hand-written walk: it finds list insertions and removals (``[1,2,3] -> [0,1,2,3]`` is ONE
``add /0``, where an index-by-index walk reports four changes), and its paths are the
standard JSON Pointers any JSON Patch tool applies.
"""

from __future__ import annotations

import base64
import copy
import difflib
import json
from dataclasses import dataclass
from typing import Any

import jsonpatch
import jsonpointer
import msgpack

from statekeeper.client.agent.codec import jsonable, show_envelope
from statekeeper.client.agent.envelope import MAGIC, EnvelopeError

__all__ = [
    "MAX_CHANGES",
    "SHOW_LIMIT",
    "Change",
    "DecodedValue",
    "ValueDiff",
    "decode_value",
    "diff_data",
    "diff_values",
]

SHOW_LIMIT = 256 * 1024
"""Characters of a value's shown text (a value is at most 1 MiB; base64 of 1 MiB is 1.4 M)."""
MAX_CHANGES = 500
"""Structural changes listed per diff (``ValueDiff.truncated`` past it)."""
MAX_DIFF_LINES = 2000
"""Lines of the line diff (the rest is cut, ``ValueDiff.truncated``)."""
MSGPACK_CONTAINER_FIRST = frozenset([*range(0x80, 0xA0), 0xDC, 0xDD, 0xDE, 0xDF])


@dataclass(frozen=True, slots=True)
class DecodedValue:
    """A stored value as shown.

    Attributes:
        format: "envelope" | "json" | "msgpack" | "text" | "binary" | "empty".
        size: bytes stored.
        data: JSON-able data (bytes as {"$bytes": base64}) for envelope/json/msgpack; None
            for text and binary.
        text: what the page prints: pretty JSON (indent 2, sorted keys), the text, or the
            base64 of the bytes; cut at SHOW_LIMIT characters.
        header: an envelope's header (schema, version, format, compression), else None.
        truncated: ``text`` was cut.
    """

    format: str
    size: int
    data: Any
    text: str
    header: dict[str, Any] | None = None
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class Change:
    """One structural change: ``op`` "add" | "remove" | "replace" at JSON Pointer ``path``;
    ``old`` / ``new`` the values (None when the op has none: add / remove)."""

    op: str
    path: str
    old: Any = None
    new: Any = None


@dataclass(frozen=True, slots=True)
class ValueDiff:
    """Two values and what changed from ``left`` to ``right``: ``lines`` a unified diff
    (difflib) of their shown texts, ``changes`` the structural diff (empty when a side is
    not data: text or binary), ``same`` when the bytes are equal."""

    left: DecodedValue
    right: DecodedValue
    lines: tuple[str, ...]
    changes: tuple[Change, ...]
    same: bool
    structural: bool
    truncated: bool = False


def _shown(text: str) -> tuple[str, bool]:
    return (text, False) if len(text) <= SHOW_LIMIT else (text[:SHOW_LIMIT], True)


def _data(fmt: str, size: int, data: Any, header: dict[str, Any] | None = None) -> DecodedValue:
    text, cut = _shown(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False))
    return DecodedValue(fmt, size, data, text, header, cut)


def decode_value(raw: bytes) -> DecodedValue:
    """``raw`` decoded for display (see the module docstring for the order tried)."""
    raw = bytes(raw)
    size = len(raw)
    if not raw:
        return DecodedValue("empty", 0, None, "")
    if raw[:3] == MAGIC:
        try:
            shown = show_envelope(raw)
            return _data("envelope", size, shown["data"], shown["header"])
        except (EnvelopeError, ValueError):
            pass  # "SKE" that is no envelope: shown as what else it is
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None:
        try:
            return _data("json", size, json.loads(text))
        except ValueError:
            pass
    if raw[0] in MSGPACK_CONTAINER_FIRST:
        try:
            return _data(
                "msgpack", size, jsonable(msgpack.unpackb(raw, raw=False, strict_map_key=False))
            )
        except Exception:  # noqa: BLE001 - any bytes may be offered; not msgpack then
            pass
    if text is not None:
        shown, cut = _shown(text)
        return DecodedValue("text", size, None, shown, None, cut)
    shown, cut = _shown(base64.b64encode(raw[: SHOW_LIMIT * 3 // 4]).decode("ascii"))
    return DecodedValue("binary", size, None, shown, None, cut or size > SHOW_LIMIT * 3 // 4)


def diff_data(old: Any, new: Any, limit: int = MAX_CHANGES) -> tuple[tuple[Change, ...], bool]:
    """The structural diff of two JSON-able values as JSON Patch operations with their old
    values (module docstring), at most ``limit`` of them: (changes, truncated)."""
    # optimization=False: no "move" ops. With it, a removed key whose value equals an added
    # list item showed as "move /d -> /a/0": a correct patch, a confusing diff.
    patch = jsonpatch.JsonPatch.from_diff(old, new, optimization=False).patch
    doc = copy.deepcopy(old)
    out: list[Change] = []
    for op in patch[:limit]:
        name, path = op["op"], op["path"]
        before = jsonpointer.resolve_pointer(doc, path, None) if name != "add" else None
        out.append(Change(name, path, before, op.get("value")))
        doc = jsonpatch.apply_patch(doc, [op])
    return tuple(out), len(patch) > limit


def diff_values(
    left: DecodedValue, right: DecodedValue, names: tuple[str, str] = ("a", "b")
) -> ValueDiff:
    """What changed from ``left`` to ``right`` (``names`` label the line diff's sides)."""
    lines = list(
        difflib.unified_diff(
            left.text.splitlines(), right.text.splitlines(), names[0], names[1], lineterm=""
        )
    )
    cut = len(lines) > MAX_DIFF_LINES
    structural = left.data is not None and right.data is not None
    changes: tuple[Change, ...] = ()
    if structural:
        changes, more = diff_data(left.data, right.data)
        cut = cut or more
    same = (
        left.format == right.format
        and left.text == right.text
        and not (left.truncated or right.truncated)
    )
    return ValueDiff(left, right, tuple(lines[:MAX_DIFF_LINES]), changes, same, structural, cut)
