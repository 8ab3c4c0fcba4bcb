"""Validation and normalization of protocol ops (docs/protocol.md, "Ops").

Every op is declared once, in its family's module (`SPECS` of node/ops/<family>.py, the kv
ops' `KV_SPECS` here), and joined into `OPS` below: its fields in output order, each an instance of
a field kind from node/ops/fields.py whose attributes are the constraints (required, the
`Limits` attribute bounding it, allowed choices, whether it may appear inside a txn).
`validate_op` runs those declarations; node/openapi/requests.py turns the same declarations
into the request schemas of GET /v1/openapi.json, for the node's own `[limits]`.

`validate_op` checks one op dict and returns a new dict holding only the known fields,
with every default filled in. A request's unknown field (in the op or in an object inside
it) is 400 `unknown_field` (node/ops/known_fields.py); a committed entry's (internal=True,
apply) is dropped, so an entry of another version applies alike everywhere. It is idempotent
(`validate_op(validate_op(x)) == validate_op(x)`), so the HTTP layer can validate before
submitting and the state machine can validate again inside apply (entries must never be
trusted blindly: a failed check there becomes a deterministic error result instead of a
crash).

Values must already be `bytes` (the HTTP layer decodes JSON strings / base64);
`ns`, `key` and range bounds are `str`.

Normalized shapes (`idempotency_key` is None when absent); raft entries carry them, so
their msgpack bytes (key order included) must not change:

    put     {op, ns, key, value, prev_kv, idempotency_key}
    delete  {op, ns, key, prefix, prev_kv, idempotency_key}
    cas     {op, ns, key, value, expect, idempotency_key}
            expect is exactly one of {version: int} {mod_revision: int} {exists: False}
    txn     {op, ns, compare: [cmp], success: [op], failure: [op], idempotency_key}
            cmp = {ns, key, target, op, value}
    compact {op, revision, idempotency_key}
    get     {op, ns, key, revision}
    range   {op, ns, prefix, start, end, limit, continuation, revision, keys_only}
    append, read_stream, stream_info, list_streams: node/ops/streams.py
    merge, crdt_get: node/ops/crdt.py
    retention_*, truncate_stream, and the internal gc: node/ops/retention.py
    archive_plan, archive_seal, archive_restore, archive_list: node/ops/archive.py
    auth_token_create, auth_token_revoke, auth_token_list, auth_whoami: node/ops/auth.py
    lease_*, and put's `lease` / `ttl_ms` (present only when given): node/ops/leases.py
    lock_*, and the `fence` of put, delete, cas, txn, append (present only when given):
            node/ops/locks.py

A range `continuation` is an opaque string that encodes (revision, next key):
the caller passes it back together with the same ns/prefix/start/end, and the
next page is served at the revision of the first page.

Why the declarations are run by this small interpreter and not by msgspec or pydantic.
Measured on this 2-core machine with the chaos suite running (the bodies of
`python -m statekeeper.benchmarks.validate_cost`, each variant in turn): CPU time per call, best of 15
rounds, for a 256 B put with an idempotency key / a get / a txn of 1 compare and 4 ops /
a batch of 16 puts:

    hand-written checks (before)   1.28 / 0.93 / 8.0  / 21.6 us
    this interpreter               1.35 / 0.93 / 10.4 / 23.0 us
    msgspec Structs + our checks   1.55 / 1.35 / (6.0, without the txn's cross-op checks)
                                   / 22 us, before mapping its errors to our messages
    pydantic v2, strict            3.5  / 3.2 us (put / get)

msgspec (`convert` per op class) only takes over the type checks: UTF-8 byte lengths
against runtime `[limits]`, NUL, the txn's ns inheritance and txn-only rules stay ours, and
its error texts would have to be mapped back to the stable messages; pydantic is 2.5-3x
slower. The interpreter costs under 0.1 us on put/get and ~2 us on that txn, next to about
500 us of server CPU per acknowledged put (3 nodes); put throughput at 1 and 64 clients
showed no difference beyond the machine's noise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from statekeeper.node.config import Limits
from statekeeper.node.errors import OpError
from statekeeper.node.ops import archive, auth, crdt, idempotency, leases, locks, retention, streams
from statekeeper.node.ops.fields import (
    CHECK_ABSENT,
    DEFAULT_NS,
    DEFAULT_RANGE_LIMIT,
    MAX_IDEMPOTENCY_KEY_CHARS,
    MAX_NS_BYTES,
    MAX_REVISION,
    Bytes,
    Choice,
    CompareValue,
    Continuation,
    Expect,
    Field,
    Flag,
    Key,
    PageLimit,
    Revision,
    decode_continuation,
    encode_continuation,
    invalid,
)
from statekeeper.node.ops.known_fields import refuse_unknown, refuse_unknown_fields
from statekeeper.node.ops.leases import PUT_LEASE, PUT_LEASE_EXCLUSIVE, PUT_TTL, put_post
from statekeeper.node.ops.locks import fenced
from statekeeper.node.ops.schemas import ref, wire_name
from statekeeper.node.ops.shared import IDEMPOTENCY_KEY, KEY, NS
from statekeeper.node.ops.spec import Checks, OpSpec, bound_checks, plan_checks

__all__ = [
    "ALL_OPS",
    "BATCH_FIELDS",
    "CMP_OPS",
    "CMP_TARGETS",
    "COMPARE_FIELDS",
    "DEFAULT_NS",
    "DEFAULT_RANGE_LIMIT",
    "INTERNAL_OPS",
    "MAX_IDEMPOTENCY_KEY_CHARS",
    "MAX_NS_BYTES",
    "MAX_REVISION",
    "OPS",
    "OpSpec",
    "READ_OPS",
    "TXN_BRANCH_OPS",
    "WRITE_OPS",
    "decode_continuation",
    "encode_continuation",
    "is_write",
    "validate_op",
    "validate_ops",
]


def _fill(checks: Checks, raw: dict, limits: Limits, in_txn: bool, out: dict) -> dict:
    get = raw.get
    for name, check in checks:
        out[name] = check(get(name), limits, in_txn, out)
    return out


def _prefixed(e: OpError, where: str) -> OpError:
    return OpError(e.code, f"{where}: {e.message}", **e.extra)


def is_write(op: dict) -> bool:
    """True for ops that must go through raft (txn counts even if read-only)."""
    return op.get("op") in WRITE_OPS


def validate_op(
    op: Any,
    limits: Limits,
    in_txn: bool = False,
    ns_default: str = DEFAULT_NS,
    internal: bool = False,
) -> dict:
    """Check one op and return its normalized form, or raise OpError. Node-internal ops
    (INTERNAL_OPS: lease_expire, gc) are known only with `internal=True` (the state machine
    validating a committed entry); for every request they are `unknown_op`."""
    if not isinstance(op, dict):
        raise invalid("an op must be an object")
    name = op.get("op")
    plan = _PLANS.get(name) if type(name) is str else None
    if plan is None:
        plan = _INTERNAL_PLANS.get(name) if internal and type(name) is str else None
        if plan is None:
            raise OpError("unknown_op", f"unknown op {name!r}")
    allowed_in_txn, has_ns, pre, checks, post, admit, known, nested = plan
    if not (internal or in_txn) and (nested or not known.issuperset(op)):
        refuse_unknown_fields(op, OPS[name])  # a txn's branch ops: by the txn's Branch
    if in_txn and not allowed_in_txn:
        if name == "txn":
            raise invalid("txns cannot be nested")
        raise invalid(_NOT_IN_TXN.format(name))
    if has_ns:
        out = {"op": name, "ns": ns_default}
        out["ns"] = _check_ns(op.get("ns"), limits, in_txn, out)
    else:
        out = {"op": name}
    if pre is not None:
        pre(op, limits)
    get = op.get
    for field_name, check, absent in checks:
        v = get(field_name)
        if v is None and absent is not CHECK_ABSENT:  # what check(None) would return
            out[field_name] = absent
        else:
            out[field_name] = check(v, limits, in_txn, out)
    if post is not None:
        post(out, limits)
    if admit is not None and not internal:
        admit(out, limits)
    return out


# The fields of a batch's body (POST /v1/batch): its ops and the read options.
BATCH_FIELDS = ("ops", "consistency", "min_revision")


def validate_ops(ops: Any, limits: Limits) -> list[dict]:
    """Validate a batch: all ops or nothing (the first bad op raises)."""
    if not isinstance(ops, list):
        raise invalid("ops must be a list")
    if len(ops) > limits.max_ops_per_request:
        raise OpError("too_many_ops", f"{len(ops)} ops, max {limits.max_ops_per_request}")
    out = []
    for i, op in enumerate(ops):
        try:
            checked = validate_op(op, limits)
            for f in OPS[checked["op"]].batch_refused:
                if checked[f.name]:
                    raise invalid(f.batch_error)
        except OpError as e:
            raise _prefixed(e, f"ops[{i}]") from None
        out.append(checked)
    return out


class OpList(Field):
    """A txn's list field (compares or a branch); its items count towards
    limits.max_ops_per_request (`_txn_size`)."""

    wired = True
    item: str  # component name of one item's schema
    not_a_list: str  # message, formatted with the field's name

    def check(self, v, limits, in_txn, out):
        if v is None:
            return []
        if not isinstance(v, list):
            raise invalid(self.not_a_list.format(self.name))
        check_item, ns, items = self.check_item, out["ns"], []
        for i, raw in enumerate(v):
            try:
                items.append(check_item(raw, limits, True, ns))
            except OpError as e:
                raise _prefixed(e, f"{self.name}[{i}]") from None
        self.check_all(items)
        return items

    @staticmethod
    def check_item(raw: Any, limits: Limits, in_txn: bool, ns: str) -> dict:
        raise NotImplementedError

    def check_all(self, items: list[dict]) -> None:
        """Rules across the items."""

    def refuse_unknown(self, v):
        """Each item's fields (Field.refuse_unknown), a loop of its own per kind: the
        message's `where` is built only for a refusal (per item it was about 1 us of a
        5-item txn, timeit)."""
        raise NotImplementedError

    def schema(self, limits, wire):
        return {
            "type": "array",
            "items": ref(wire_name(self.item, wire)),
            "description": self.doc,
            "default": [],
            "maxItems": limits.max_ops_per_request,
        }


def _compare(raw: Any, limits: Limits, in_txn: bool, ns: str) -> dict:
    if not isinstance(raw, dict):
        raise invalid("each compare must be an object")
    return _fill(_COMPARE_CHECKS, raw, limits, in_txn, {"ns": ns})


class Compares(OpList):
    item = "Compare"
    not_a_list = "txn {} must be a list"
    check_item = staticmethod(_compare)

    def refuse_unknown(self, v):
        if type(v) is list:
            known = _COMPARE_KNOWN
            for i, raw in enumerate(v):
                if type(raw) is dict and not known.issuperset(raw):
                    refuse_unknown(raw, known, _COMPARE_NAMES, f"{self.name}[{i}]")


class Branch(OpList):
    item = "TxnOp"
    not_a_list = "txn {} must be a list of ops"
    check_item = staticmethod(validate_op)

    def check_all(self, items):
        _check_disjoint_writes(items, self.name)

    def refuse_unknown(self, v):
        if type(v) is not list:
            return
        find = OPS.get
        for i, raw in enumerate(v):
            if type(raw) is not dict:
                continue
            name = raw.get("op")
            spec = find(name) if type(name) is str else None
            if spec is None:
                continue  # validate_op says unknown_op
            if not spec.known.issuperset(raw):
                refuse_unknown(raw, spec.known, spec.field_names, f"{self.name}[{i}] ({name})")
            for f in spec.nested:
                try:
                    f.refuse_unknown(raw.get(f.name))
                except OpError as e:
                    raise _prefixed(e, f"{self.name}[{i}]") from None


def _check_disjoint_writes(ops: list[dict], name: str) -> None:
    """One txn may not write a key twice (that includes overlapping prefix deletes; a merge
    writes its key like a put)."""
    keys: set[tuple[str, str]] = set()
    prefixes: list[tuple[str, str]] = []
    for op in ops:
        if op["op"] in _KEY_WRITES or (op["op"] == "delete" and not op["prefix"]):
            k = (op["ns"], op["key"])
            if k in keys:
                raise invalid(f"txn {name} writes key {op['key']!r} twice")
            keys.add(k)
        elif op["op"] == "delete":
            prefixes.append((op["ns"], op["key"]))
    for i, (ns, p) in enumerate(prefixes):
        for ns2, p2 in prefixes[i + 1 :]:
            if ns == ns2 and (p.startswith(p2) or p2.startswith(p)):
                raise invalid(f"txn {name} deletes overlapping prefixes {p!r} and {p2!r}")
        for ns2, k in keys:
            if ns == ns2 and k.startswith(p):
                raise invalid(f"txn {name} writes {k!r}, also deleted by prefix {p!r}")


_KEY_WRITES = frozenset({"put", "merge"})


def _check_exclusive(spec: OpSpec) -> Callable[[dict, Limits], None]:
    one, others = spec.exclusive
    message = f"give either {one} or {'/'.join(others)}, not both"

    def check(out: dict, limits: Limits) -> None:
        if out[one] is not None and any(out[o] is not None for o in others):
            raise invalid(message)

    return check


def _txn_size(raw: dict, limits: Limits) -> None:
    n = 0
    for name in _TXN_LISTS:
        v = raw.get(name)
        if isinstance(v, list):
            n += len(v)
    if n > limits.max_ops_per_request:
        raise OpError(
            "too_many_ops", f"txn has {n} compares and ops, max {limits.max_ops_per_request}"
        )


def _range_post(out: dict, limits: Limits) -> None:
    _RANGE_EXCLUSIVE(out, limits)
    token = out["continuation"]
    if token is not None and out["revision"] is not None:
        if out["revision"] != decode_continuation(token, limits)[0]:
            raise invalid("revision does not match the continuation's revision")


READ_REVISION_IN_TXN = "reads inside a txn see the txn's own revision; revision is not allowed"

CMP_TARGETS_ORDER = (*CompareValue.COUNTERS, "value", "exists")
CMP_OPS_ORDER = ("==", "!=", "<", ">")
COMPARE_FIELDS: tuple[Field, ...] = (
    NS,
    KEY,
    Choice("target", CMP_TARGETS_ORDER, what="compare target", required=True),
    Choice("op", CMP_OPS_ORDER, what="compare op", required=True),
    CompareValue("value", "The operand: integer, bytes or bool, by `target`."),
)
COMPARE_DOC = (
    "A txn compare. A missing key has version 0, revisions 0, no value. `value` is an "
    "integer for version/revisions, bytes for value, a bool for exists (only == and !=)."
)

# The kv ops: declared here, not in a node/ops/kv.py, because txn's branches are validated
# by validate_op itself (Branch below), and the registry's order starts with them.
KV_SPECS = (
    OpSpec(
        "put",
        (
            NS,
            KEY,
            Bytes("value", "the value", required=True),
            Flag("prev_kv", "Return the previous kv in `prev_kv`."),
            IDEMPOTENCY_KEY,
            PUT_LEASE,
            PUT_TTL,
        ),
        "put op.",
        write=True,
        in_txn=True,
        exclusive=PUT_LEASE_EXCLUSIVE,
        post=put_post,
    ),
    OpSpec(
        "delete",
        (
            NS,
            KEY,
            Flag("prefix", "Treat `key` as a prefix: delete every key starting with it."),
            Flag("prev_kv", "Return the deleted kvs in `prev_kvs`."),
            IDEMPOTENCY_KEY,
        ),
        "delete op.",
        write=True,
        grows=False,
        in_txn=True,
    ),
    OpSpec(
        "cas",
        (
            NS,
            KEY,
            Bytes("value", "the value to write when the expectation holds", required=True),
            Expect("expect", required=True),
            IDEMPOTENCY_KEY,
        ),
        "cas op: write `value` if the key matches `expect`.",
        write=True,
    ),
    OpSpec(
        "txn",
        (
            NS,
            Compares("compare", "All must hold for `success` to run."),
            Branch("success", "Ops run when every compare holds."),
            Branch("failure", "Ops run otherwise."),
            IDEMPOTENCY_KEY,
        ),
        "txn op: atomic; all writes share one revision. One txn may not write the same key "
        "twice (`invalid_argument`). Compares and ops together: at most max_ops_per_request.",
        write=True,
        grows=False,  # its branches decide (node/quota/alarm.py)
        pre=_txn_size,
    ),
    OpSpec(
        "compact",
        (
            Revision(
                "revision",
                "Drop history below this revision (at most the current revision, else "
                "`future_revision`).",
                required=True,
            ),
            IDEMPOTENCY_KEY,
        ),
        "compact op.",
        write=True,
        grows=False,
        access="admin",
    ),
    OpSpec(
        "get",
        (
            NS,
            KEY,
            Revision(
                "revision",
                "Read the store as it was right after this revision (default: current).",
                txn_error=READ_REVISION_IN_TXN,
            ),
        ),
        "get op.",
        write=False,
        in_txn=True,
    ),
    OpSpec(
        "range",
        (
            NS,
            Key(
                "prefix",
                "Only keys starting with this prefix (not with start/end).",
                allow_empty=True,
            ),
            Key("start", "First key (inclusive).", allow_empty=True),
            Key(
                "end",
                "Stop before this key (exclusive); default: end of the namespace.",
                allow_empty=True,
            ),
            PageLimit("limit", "At most this many kvs per page"),
            Continuation(
                "continuation",
                "Opaque token from the previous page's answer; send it with the same "
                "ns/prefix/start/end.",
                txn_error="continuation is not allowed inside a txn",
            ),
            Revision(
                "revision",
                "Read at this revision (default: current). With `continuation`, it must equal "
                "the first page's revision (or be omitted).",
                txn_error=READ_REVISION_IN_TXN,
            ),
            Flag("keys_only", "Omit values."),
        ),
        "range op: `prefix`, or `start` and/or `end`, or neither (the whole namespace); keys "
        "come in byte order.",
        write=False,
        in_txn=True,
        exclusive=("prefix", ("start", "end")),
        post=_range_post,
    ),
)
# Every op family but kv, in registry order (the order of the OpenAPI document's paths and
# components). A family module declares SPECS, and INTERNAL_SPECS if the node itself proposes
# some of its ops; tests/unit/test_layout.py checks each has its files in the other layers.
FAMILIES = (streams, leases, locks, crdt, retention, archive, auth, idempotency)
# put, delete, cas, txn and append take a `fence` (node/ops/locks.py)
_SPECS = fenced((*KV_SPECS, *(s for family in FAMILIES for s in family.SPECS)))
OPS: dict[str, OpSpec] = {s.name: s for s in _SPECS}
_INTERNAL_SPECS = tuple(s for family in FAMILIES for s in getattr(family, "INTERNAL_SPECS", ()))
INTERNAL_OPS: dict[str, OpSpec] = {s.name: s for s in _INTERNAL_SPECS}
_RANGE_EXCLUSIVE = _check_exclusive(OPS["range"])
_COMPARE_CHECKS = bound_checks(COMPARE_FIELDS)
_COMPARE_NAMES = tuple(f.name for f in COMPARE_FIELDS)
_COMPARE_KNOWN = frozenset(_COMPARE_NAMES)
_TXN_LISTS = tuple(f.name for f in OPS["txn"].fields if isinstance(f, OpList))

WRITE_OPS = frozenset(s.name for s in _SPECS if s.write)
READ_OPS = frozenset(s.name for s in _SPECS if not s.write)
ALL_OPS = WRITE_OPS | READ_OPS
TXN_BRANCH_OPS = frozenset(s.name for s in _SPECS if s.in_txn)
CMP_TARGETS = frozenset(CMP_TARGETS_ORDER)
CMP_OPS = frozenset(CMP_OPS_ORDER)


# What validate_op runs per op name, unpacked in one go.
def _plan(s: OpSpec) -> tuple:
    checks = plan_checks(s.fields[1:] if s.has_ns else s.fields)  # the fields of s.rest
    return s.in_txn, s.has_ns, s.pre, checks, s.post, s.admit, s.known, bool(s.nested)


_PLANS = {s.name: _plan(s) for s in _SPECS}
_INTERNAL_PLANS = {s.name: _plan(s) for s in _INTERNAL_SPECS}
_check_ns = NS.check
_NOT_IN_TXN = (
    "{} is not allowed inside a txn (only " + ", ".join(s.name for s in _SPECS if s.in_txn) + ")"
)
