"""Request schemas of the OpenAPI document, generated from node/ops/core.py's op declarations.

Nothing here restates a constraint: each property, its bounds (from the node's `Limits`),
its default and whether it is required come from the field kinds in node/ops/fields.py,
which are also what `validate_op` runs. Ops that carry values get one schema per wire
(`PutRequest` for JSON, `PutRequestMsgpack` for msgpack); the rest are shared.
"""

from __future__ import annotations

from statekeeper.node.config import Limits
from statekeeper.node.ops.core import COMPARE_DOC, COMPARE_FIELDS, OPS, OpSpec
from statekeeper.node.ops.fields import Field, Schema
from statekeeper.node.ops.schemas import given, nullable, obj, ref, wire_name

WIRES = ("json", "msgpack")
# Optional, so null reads as absent (node/reads.py read_options).
READ_OPTIONS = {
    "consistency": nullable(ref("Consistency")),
    "min_revision": nullable(ref("MinRevision")),
}


def request_name(spec: OpSpec, wire: str) -> str:
    """Component name of the body of the op's route for one wire (PutRequest,
    ReadStreamRequest, ...)."""
    name = f"{spec.title}Request"
    return wire_name(name, wire) if spec.wired else name


def fields_object(
    fields: tuple[Field, ...], limits: Limits, wire: str, description: str | None = None
) -> Schema:
    """An object schema for these fields: properties, required ones, conditions; no other
    property (a request carrying one is 400 unknown_field, node/ops/known_fields.py)."""
    props: dict[str, Schema] = {}
    required: list[str] = []
    clauses: list[Schema] = []
    for f in fields:
        own = f.properties(limits, wire)
        if not f.required and f.nullable:  # null reads as absent: the schema allows it
            own = {name: nullable(s) for name, s in own.items()}
        props.update(own)
        if f.required:
            clause = f.requirement(wire)
            if clause is None:
                required.append(f.name)
            else:
                clauses.append(clause)
        clauses += f.conditions(limits, wire)
    s = obj(props, tuple(required), description)
    s["additionalProperties"] = False
    if clauses:
        s["allOf"] = clauses
    return s


def op_object(
    spec: OpSpec,
    limits: Limits,
    wire: str,
    *,
    in_txn: bool = False,
    in_batch: bool = False,
    description: str | None = None,
    extra: dict[str, Schema] | None = None,
) -> Schema:
    """One op's fields (without `op`); inside a txn, the fields a txn forbids are left out
    and refused; in a batch, the fields a batch refuses may only take their zero value."""
    forbidden = [f.name for f in spec.fields if in_txn and f.txn_error]
    fields = tuple(f for f in spec.fields if f.name not in forbidden)
    s = fields_object(fields, limits, wire, description)
    # `op` names the op: required in a txn or a batch (_tagged), optional on its own route.
    s["properties"] = {"op": {"const": spec.name, "description": "Op name."}, **s["properties"]}
    s["properties"].update(extra or {})
    if in_batch:
        for f in spec.batch_refused:
            s["properties"][f.name] = {"enum": [0, None], "description": f.batch_error}
    if spec.exclusive:
        one, others = spec.exclusive
        s["not"] = {**given(one), "anyOf": [given(o) for o in others]}
    if forbidden:
        refused = {"not": {"anyOf": [given(name) for name in forbidden]}}
        s.setdefault("allOf", []).append(refused)
    s.setdefault("allOf", []).extend(_OP_RULES.get(spec.name, ()))
    if not s["allOf"]:
        del s["allOf"]
    return s


def _given(name: str) -> Schema:
    return {"required": [name], "properties": {name: {"type": "integer"}}}


# Cross-field rules the op's post-check enforces (node/ops/retention.py check_policy_rules, which
# archive_plan shares).
_POLICY_RULES: list[Schema] = [
    {"anyOf": [_given(k) for k in ("keep_last", "keep_every", "max_age_s")]},
    {
        "if": _given("keep_every"),
        "then": {
            **_given("keep_last"),
            "not": {"required": ["target"], "properties": {"target": {"const": "streams"}}},
        },
    },
]
# node/ops/streams.py _read_stream_post: a long poll only reads forward at the current revision.
_LONG_POLL_RULES: list[Schema] = [
    {
        "if": {
            "required": ["wait_ms"],
            "properties": {"wait_ms": {"type": "integer", "minimum": 1}},
        },
        "then": {
            "not": {
                "anyOf": [
                    given("revision"),
                    given("continuation"),
                    {"required": ["direction"], "properties": {"direction": {"const": "backward"}}},
                ]
            }
        },
    }
]
_OP_RULES: dict[str, list[Schema]] = {
    "retention_set": _POLICY_RULES,
    "archive_plan": _POLICY_RULES,
    "read_stream": _LONG_POLL_RULES,
}


def _tagged(name: str, base: Schema) -> Schema:
    """`base` (which lists `op`, so its additionalProperties: false allows it) with
    `op: <name>` required."""
    tag = obj({"op": {"const": name, "description": "Op name."}}, ("op",))
    return {"allOf": [base, tag]}


def _txn_op(limits: Limits, wire: str) -> Schema:
    allowed = [s for s in OPS.values() if s.in_txn]
    return {
        "description": "An op inside a txn branch: "
        + ", ".join(s.name for s in allowed)
        + " (no idempotency_key, no nested txn). `ns` defaults to the txn's.",
        "oneOf": [_tagged(s.name, op_object(s, limits, wire, in_txn=True)) for s in allowed],
    }


def _batch_op(limits: Limits, wire: str) -> Schema:
    def variant(spec: OpSpec) -> Schema:
        if spec.write:  # the same body as POST /v1/kv/{op}
            return ref(request_name(spec, wire))
        return op_object(spec, limits, wire, in_batch=True)  # without the read options

    return {
        "description": "One op of a batch, with its `op` field.",
        "oneOf": [_tagged(s.name, variant(s)) for s in OPS.values()],
    }


def _batch_request(limits: Limits, wire: str) -> Schema:
    n = limits.max_ops_per_request
    ops = {
        "type": "array",
        "items": ref(wire_name("BatchOp", wire)),
        "description": f"At most max_ops_per_request ({n} on this node).",
        "maxItems": n,
    }
    s = obj(
        {"ops": ops, **READ_OPTIONS},
        ("ops",),
        "Many independent ops in one request: not atomic (use txn). Validated whole before "
        "anything is submitted. Reads are served after the batch's writes.",
    )
    s["additionalProperties"] = False
    return s


def _shared_components(limits: Limits) -> dict[str, Schema]:
    """Schemas of fields declared with a `component` (Namespace, Key, ...)."""
    out: dict[str, Schema] = {}
    for fields in (*(s.fields for s in OPS.values()), COMPARE_FIELDS):
        for f in fields:
            if f.component and f.component not in out:
                out[f.component] = f.schema(limits, "json")
    return out


def request_schemas(limits: Limits) -> dict[str, Schema]:
    """Every request schema (both wires) and the components they refer to."""
    out = _shared_components(limits)
    for wire in WIRES:
        for spec in OPS.values():
            extra = None if spec.write else READ_OPTIONS
            out[request_name(spec, wire)] = op_object(
                spec, limits, wire, description=spec.doc, extra=extra
            )
        out[wire_name("Compare", wire)] = fields_object(COMPARE_FIELDS, limits, wire, COMPARE_DOC)
        out[wire_name("TxnOp", wire)] = _txn_op(limits, wire)
        out[wire_name("BatchOp", wire)] = _batch_op(limits, wire)
        out[wire_name("BatchRequest", wire)] = _batch_request(limits, wire)
    return out
