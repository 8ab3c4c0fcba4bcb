"""JSON Schema building blocks for the op declarations (node/ops/fields.py's field kinds and
the op families' own schemas): references, nullable wrappers, objects, typed scalars, the
value / value_b64 pair per wire. Split from node/ops/fields.py (size); op_fields re-exports
them.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]
MAX_REVISION = 2**63 - 1
# Standard base64 with its padding, what the server decodes (b64decode(validate=True)).
BASE64_PATTERN = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


NULL: Schema = {"type": "null"}


def nullable(s: Schema) -> Schema:
    """`s` or null: an optional field sent as null reads as absent (docs/protocol.md)."""
    t = s.get("type")
    if "$ref" in s or "const" in s or t is None:
        return {"anyOf": [s, NULL]}
    out = dict(s)
    if isinstance(t, str):
        out["type"] = [t, "null"]
    elif "null" not in t:
        out["type"] = [*t, "null"]
    if "enum" in out and None not in out["enum"]:
        out["enum"] = [*out["enum"], None]
    return out


def given(name: str) -> Schema:
    """`name` is present and not null (null reads as absent)."""
    return {"required": [name], "properties": {name: {"not": NULL}}}


def wire_name(name: str, wire: str) -> str:
    """Component name of a value-carrying schema for one wire encoding."""
    return name if wire == "json" else f"{name}Msgpack"


def wired_ref(name: str, wire: str) -> Schema:
    """A $ref to the component `name` in its form for one wire encoding."""
    return ref(wire_name(name, wire))


def replayed_schema() -> Schema:
    """The `replayed` flag of a write's result."""
    return bool_schema("Present (true) when an idempotency_key replay returned the stored result.")


def obj(
    properties: dict[str, Schema],
    required: tuple[str, ...] = (),
    description: str | None = None,
) -> Schema:
    s: Schema = {"type": "object", "properties": properties}
    if required:
        s["required"] = list(required)
    if description:
        s["description"] = description
    return s


def int_schema(description: str, minimum: int | None = 0, **extra: Any) -> Schema:
    s: Schema = {"type": "integer", "description": description, **extra}
    if minimum is not None:
        s["minimum"] = minimum
    return s


def rev_schema(description: str) -> Schema:
    return int_schema(description, maximum=MAX_REVISION)


def str_schema(description: str, **extra: Any) -> Schema:
    return {"type": "string", "description": description, **extra}


def bool_schema(description: str, **extra: Any) -> Schema:
    return {"type": "boolean", "description": description, **extra}


def bytes_schema(wire: str, description: str, **extra: Any) -> Schema:
    if wire == "json":
        return str_schema(f"{description} (UTF-8 text)", **extra)
    return str_schema(
        f"{description} (msgpack bin)", contentMediaType="application/octet-stream", **extra
    )


def value_props(wire: str, what: str, max_bytes: int | None = None) -> dict[str, Schema]:
    """`value` (and, in JSON, `value_b64`) carrying bytes; text never has more chars than
    bytes and base64 takes 4 chars per 3 bytes, so the length bounds follow `max_bytes`."""
    text_max = {} if max_bytes is None else {"maxLength": max_bytes}
    props = {"value": bytes_schema(wire, what, **text_max)}
    if wire == "json":
        b64_max = {} if max_bytes is None else {"maxLength": 4 * -(-max_bytes // 3)}
        props["value_b64"] = str_schema(
            f"{what}, base64 (for bytes that are not UTF-8)",
            contentEncoding="base64",
            pattern=BASE64_PATTERN,
            **b64_max,
        )
    return props


def value_required(wire: str) -> Schema:
    """A request must carry the value: `value` (or, in JSON, `value_b64`)."""
    if wire == "json":
        return {"anyOf": [{"required": ["value"]}, {"required": ["value_b64"]}]}
    return {"required": ["value"]}


# -- field kinds -----------------------------------------------------------------------------
