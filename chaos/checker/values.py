"""Values as the checks see them: frozen (hashable) and formatted, and the verdicts."""

from __future__ import annotations

from typing import Any, Literal

__all__ = ["UNKNOWN", "Verdict", "fmt_value", "freeze"]

UNKNOWN: Literal["unknown"] = "unknown"
Verdict = bool | Literal["unknown"]


def freeze(value: Any) -> Any:
    """A hashable, comparable stand-in for a JSON value (lists/dicts become tuples)."""
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    if isinstance(value, dict):
        return ("\0dict", tuple(sorted((str(k), freeze(v)) for k, v in value.items())))
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value


def fmt_value(value: Any) -> str:
    if value is None:
        return "absent"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)
