"""The retention ops' declarations: retention_set, retention_delete, retention_list,
retention_status, the stream primitive truncate_stream, and the node-internal `gc`
(docs/protocol.md, "Retention"; applied and read by node/store/retention.py, enforced by
the leader's node/tasks/retention.py).

Like every op they are declared once (`SPECS`, joined into node.ops.core.OPS): the
field kinds below check a field with the protocol's codes and describe it in OpenAPI.

Normalized shapes (raft entries carry the writes', so their msgpack bytes must not change):

    retention_set     {op, ns, prefix, target, keep_last, keep_every, max_age_s, within,
                       idempotency_key}   target "keys" | "streams"; rules and within
                       None when absent (entries logged before `within` existed lack
                       the key: apply reads op.get("within"))
    retention_delete  {op, ns, prefix, target, idempotency_key}
    retention_list    {op, ns, limit, continuation}        ns None: every namespace
    retention_status  {op, ns}                             ns None: every namespace
    truncate_stream   {op, ns, stream, before_seq, idempotency_key}
    gc                {op, ns, deletes: [[key, mod_revision]], truncates: [[stream,
                       before_seq]]}   node-internal (INTERNAL_SPECS), at most
                       MAX_GC_ITEMS items in all

Rules: at least one of keep_last (>= 1), keep_every (>= 2, only with keep_last, only for
target "keys"), max_age_s (>= 1); otherwise 400 `invalid_argument`. `within` (only for
target "keys"): a directory name (non-empty, no "/" or NUL, at most MAX_WITHIN_BYTES UTF-8
bytes); the policy then applies only to the key groups whose directory's last segment is
it (agent/{id}/ckpt/ for "ckpt"), and leaves every other key under its prefix alone. `gc` is refused on
every route (`unknown_op`): validate_op knows it only with internal=True, and apply
re-checks every item (a key is deleted only at the mod_revision named; a stream is only
truncated forward), so even a forged gc could only drop what it names exactly.
"""

from __future__ import annotations

from typing import Any

from statekeeper.node.errors import ErrorCode, OpError, declare
from statekeeper.node.ops.fields import (
    MAX_NS_BYTES,
    MAX_REVISION,
    NO_CONTROL,
    Choice,
    Field,
    Key,
    Namespace,
    PageLimit,
    invalid,
    is_token,
    key_text,
)
from statekeeper.node.ops.schemas import given, int_schema, str_schema
from statekeeper.node.ops.shared import IDEMPOTENCY_KEY, NS
from statekeeper.node.ops.spec import OpSpec
from statekeeper.node.ops.streams import STREAM

# The error codes of the retention ops (node/errors.py has the ones every op shares).
ERRORS = declare(
    ErrorCode(
        "too_many_policies", 413, "retention_set of a new policy in a namespace that holds 1000"
    ),
)

MAX_POLICIES_PER_NS = 1000  # more: 413 `too_many_policies`
MAX_GC_ITEMS = 500  # deletes + truncates of one gc op
MAX_TRUNCATE_EVENTS = 10_000  # events one truncate_stream / gc op removes at most
MAX_AGE_S = 100 * 365 * 86_400
MAX_WITHIN_BYTES = 256
MAX_PAGE_TOKEN_CHARS = 4096
# Unpadded URL-safe base64: groups of 4, then 0, 2 or 3 more chars (never 1).
PAGE_TOKEN_PATTERN = "^(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-]{2,3})?$"
TARGETS = ("keys", "streams")


class Rule(Field):
    """A positive integer rule, minimum..maximum; when not required None if absent (a
    required one let None through to apply: truncate_stream without before_seq was 500)."""

    def __init__(self, name, doc="", *, minimum: int, maximum: int = MAX_REVISION, **kw):
        super().__init__(name, doc, **kw)
        self.minimum, self.maximum = minimum, maximum

    def check(self, v, limits, in_txn, out):
        if v is None and not self.required:
            return None
        if type(v) is not int or not self.minimum <= v <= self.maximum:
            raise invalid(f"{self.name} must be an integer in {self.minimum}..{self.maximum}")
        return v

    def schema(self, limits, wire):
        return int_schema(self.doc, minimum=self.minimum, maximum=self.maximum)


class Within(Field):
    """retention_set's `within`: one directory name (a key segment), None when absent;
    only for target "keys" (the schema says so too)."""

    def check(self, v, limits, in_txn, out):
        if v is None:
            return None
        if type(v) is not str or not v:
            raise invalid(f"{self.name} must be a non-empty string (a directory name)")
        if "/" in v or "\x00" in v:
            raise invalid(f"{self.name} must be one directory name: no '/' or NUL")
        try:
            n = len(v.encode())
        except UnicodeEncodeError:
            raise invalid(f"{self.name} is not valid unicode (lone surrogate?)") from None
        if n > MAX_WITHIN_BYTES:
            raise invalid(f"{self.name} is longer than {MAX_WITHIN_BYTES} UTF-8 bytes")
        return v

    def schema(self, limits, wire):
        return str_schema(
            self.doc, minLength=1, maxLength=MAX_WITHIN_BYTES, pattern="^[^/\\u0000]+$"
        )

    def conditions(self, limits, wire):
        streams = {"properties": {"target": {"const": "streams"}}, "required": ["target"]}
        return [{"if": streams, "then": {"not": given(self.name)}}]


class OptionalNamespace(Field):
    """A namespace filter: absent (None) means every namespace (not a Namespace: ops
    whose first field is one get the default namespace)."""

    _ns = Namespace("ns")

    def check(self, v, limits, in_txn, out):
        if v is None:
            return None
        return self._ns.check(v, limits, in_txn, out)

    def schema(self, limits, wire):
        return str_schema(
            f"Only this namespace (1..{MAX_NS_BYTES} UTF-8 bytes, no control characters); "
            "default: every namespace.",
            minLength=1,
            maxLength=MAX_NS_BYTES,
            pattern=NO_CONTROL,
        )


class GcItems(Field):
    """A list of [name, integer] pairs (gc's deletes / truncates)."""

    def check(self, v, limits, in_txn, out):
        if v is None:
            return []
        if type(v) is not list or len(v) > MAX_GC_ITEMS:
            raise invalid(f"{self.name} must be a list of at most {MAX_GC_ITEMS} pairs")
        items = []
        for i, pair in enumerate(v):
            if type(pair) not in (list, tuple) or len(pair) != 2:
                raise invalid(f"{self.name}[{i}] must be a [name, integer] pair")
            name = key_text(pair[0], limits.max_key_bytes, f"{self.name}[{i}][0]")
            n = pair[1]
            if type(n) is not int or not 0 <= n <= MAX_REVISION:
                raise invalid(f"{self.name}[{i}][1] must be a non-negative integer")
            items.append([name, n])
        return items

    def schema(self, limits, wire):
        pair = {"type": "array", "minItems": 2, "maxItems": 2}
        return {"type": "array", "items": pair, "maxItems": MAX_GC_ITEMS, "description": self.doc}


class Token(Field):
    """An opaque page token (retention_list's continuation)."""

    def check(self, v, limits, in_txn, out):
        if v is None:
            return None
        # URL-safe base64 of a store key (node/store/reads.py page_token): every string
        # of this shape decodes (a length of 4n+1 would not), so any is a valid position.
        if not is_token(v, MAX_PAGE_TOKEN_CHARS) or len(v) % 4 == 1:
            raise invalid(
                f"{self.name} must be a token returned by a previous page (1.."
                f"{MAX_PAGE_TOKEN_CHARS} chars of [A-Za-z0-9_-], not 4n+1 of them)"
            )
        return v

    def schema(self, limits, wire):
        return str_schema(
            f"{self.doc} URL-safe base64 without padding.",
            minLength=1,
            maxLength=MAX_PAGE_TOKEN_CHARS,
            pattern=PAGE_TOKEN_PATTERN,
        )


def check_policy_rules(out: dict, limits: Any) -> None:
    if out["keep_last"] is None and out["keep_every"] is None and out["max_age_s"] is None:
        raise invalid("a retention policy needs at least one of keep_last, keep_every, max_age_s")
    if out["keep_every"] is not None:
        if out["keep_last"] is None:
            raise invalid("keep_every is only allowed together with keep_last")
        if out["target"] == "streams":
            raise invalid("keep_every is only for target 'keys' (a stream is truncated)")
    if out["within"] is not None and out["target"] != "keys":
        raise invalid("within is only for target 'keys' (it names a key directory)")


def _gc_post(out: dict, limits: Any) -> None:
    if len(out["deletes"]) + len(out["truncates"]) > MAX_GC_ITEMS:
        raise OpError("too_many_ops", f"a gc op names at most {MAX_GC_ITEMS} items")


PREFIX = Key(
    "prefix",
    "The policy's key or stream-name prefix (empty: the whole namespace).",
    allow_empty=True,
    required=True,
)
TARGET = Choice(
    "target",
    TARGETS,
    what="target",
    default="keys",
    doc="keys: kv keys (grouped by their last '/'); streams: event streams.",
)
BEFORE_SEQ = Rule(
    "before_seq",
    "Remove the events with seq < before_seq (clamped to last_seq + 1).",
    minimum=1,
    required=True,
)


# The four retention ops and truncate_stream (joined into OPS by node/ops/core.py).
SPECS: tuple[OpSpec, ...] = (
    OpSpec(
        "retention_set",
        (
            NS,
            PREFIX,
            TARGET,
            Rule("keep_last", "Keep the newest N keys per group / events.", minimum=1),
            Rule(
                "keep_every",
                "Of the older keys of a group also keep every Kth: those whose key "
                "ends in a multiple of K (else: position from the oldest); only with "
                "keep_last, only target keys.",
                minimum=2,
            ),
            Rule(
                "max_age_s",
                "Drop what is older than this many seconds (keep_last still protects the "
                "newest N).",
                minimum=1,
                maximum=MAX_AGE_S,
            ),
            Within(
                "within",
                "Only the key groups whose directory's last segment is this name "
                "(e.g. 'ckpt': agent/{id}/ckpt/ and nothing else under the prefix): "
                f"no '/' or NUL, at most {MAX_WITHIN_BYTES} UTF-8 bytes; only target keys.",
            ),
            IDEMPOTENCY_KEY,
        ),
        "retention_set op: create or replace the policy of (ns, target, prefix).",
        write=True,
        post=check_policy_rules,
        path="/v1/retention/set",
    ),
    OpSpec(
        "retention_delete",
        (NS, PREFIX, TARGET, IDEMPOTENCY_KEY),
        "retention_delete op: remove the policy of (ns, target, prefix) (deleted: 0 if none).",
        write=True,
        grows=False,
        path="/v1/retention/delete",
    ),
    OpSpec(
        "retention_list",
        (
            OptionalNamespace("ns"),
            PageLimit("limit", "At most this many policies"),
            Token("continuation", "The `continuation` of the previous page."),
        ),
        "retention_list op: the policies in (ns, target, prefix) order, paged.",
        write=False,
        path="/v1/retention/list",
    ),
    OpSpec(
        "retention_status",
        (OptionalNamespace("ns"),),
        "retention_status op: what each policy holds and would free now, the last gc, "
        "and the store-wide history and idempotency retention.",
        write=False,
        path="/v1/retention/status",
    ),
    OpSpec(
        "truncate_stream",
        (NS, STREAM, BEFORE_SEQ, IDEMPOTENCY_KEY),
        "truncate_stream op: remove a stream's events with seq < before_seq (at most "
        f"{MAX_TRUNCATE_EVENTS} per op: `more` says call again) and their id dedup records.",
        write=True,
        grows=False,
        path="/v1/streams/truncate",
    ),
)


# `gc`: proposed only by the leader's retention task (joined into INTERNAL_OPS).
INTERNAL_SPECS: tuple[OpSpec, ...] = (
    OpSpec(
        "gc",
        (
            NS,
            GcItems("deletes", "[key, mod_revision]: delete the key if still at it."),
            GcItems("truncates", "[stream, before_seq]: truncate forward to it."),
        ),
        "gc op (node-internal): the leader's retention enforcement, one revision.",
        write=True,
        grows=False,
        post=_gc_post,
        path="/internal/gc",
    ),
)
