"""The auth ops' declarations and field kinds: auth_token_create, auth_token_revoke,
auth_token_list, auth_whoami (docs/protocol.md, "Authentication and authorization";
applied and read by node/store/auth.py, enforced by node/api/authz.py).

Tokens are opaque random bearer tokens stored hashed (client/auth/tokens.py has the format),
not signed JWTs: revocation has to be replicated state anyway, so a signature's stateless
check would buy nothing; a copy of the DB or a backup holds only SHA-256 hashes; there is
no signing key to distribute or rotate. The creator draws the token and sends only its id
and hash, so a retried create (same idempotency_key) stands for the same token.

Normalized shapes (raft entries carry the writes', so their msgpack bytes must not change):

    auth_token_create  {op, id, hash, name, grants: [{ns, prefix, role}], ttl_ms,
                        idempotency_key[, parent]}  ttl_ms 0: never expires; parent: the
                        creating token's id, set by node/api/authz.py (absent: root / auth off)
    auth_token_revoke  {op, id, idempotency_key}
    auth_token_list    {op}
    auth_whoami        {op}                   answered by the HTTP layer (the caller's token)

Bounds of a token record (issue 27, item 7: 64 grants of 4 KiB prefixes made a ~270 KB
record held in every node's memory): a request may carry at most MAX_GRANTS_PER_TOKEN
grants, prefixes of at most MAX_GRANT_PREFIX_BYTES, and a record of at most
MAX_TOKEN_RECORD_BYTES (`check_token_bounds`). They are checked for requests only, not
when apply validates a committed entry: a journal written under the older, looser bounds
(MAX_GRANTS, max_key_bytes) must replay to the state it produced then.

A grant's `ns` is a namespace name, a name ending in `*` (`agent-*`: every namespace
starting with `agent-`) or `*` alone; `prefix` ("" = the whole namespace) restricts it to
keys (streams, lock names...) starting with it; `role` is reader, writer or admin.
"""

from __future__ import annotations

import re

import msgpack

from statekeeper.node.errors import ErrorCode, OpError, declare
from statekeeper.node.ops.fields import (
    MAX_NS_BYTES,
    MAX_REVISION,
    NO_NUL_OR_EMPTY,
    Field,
    invalid,
    key_text,
    utf8,
)
from statekeeper.node.ops.schemas import int_schema, nullable, obj, str_schema
from statekeeper.node.ops.shared import IDEMPOTENCY_KEY
from statekeeper.node.ops.spec import OpSpec

# The error codes of the auth ops (node/errors.py has the ones every op shares).
ERRORS = declare(
    ErrorCode(
        "token_exists",
        409,
        "auth_token_create of a token id that exists already (with another idempotency_key): draw a new token",
    ),
    ErrorCode("too_many_grants", 400, "auth_token_create with more than 16 grants"),
    ErrorCode(
        "grant_prefix_too_long", 400, "auth_token_create with a grant prefix over 256 UTF-8 bytes"
    ),
    ErrorCode(
        "token_too_large", 400, "auth_token_create whose stored record would exceed 4096 bytes"
    ),
)

ROLES = ("reader", "writer", "admin")
MAX_GRANTS = 64  # what apply accepts (entries written before the bounds below)
MAX_GRANTS_PER_TOKEN = 16
MAX_GRANT_PREFIX_BYTES = 256
# The packed record (hash, name, grants, times, parent): 16 grants of a 255-byte ns and a
# 256-byte prefix would be ~8 KiB, so this bound is the one that binds for long names.
MAX_TOKEN_RECORD_BYTES = 4096
MAX_TOKEN_NAME = 200
_TOKEN_ID = re.compile(r"^[0-9a-f]{16}$")
_HASH = re.compile(r"^[0-9a-f]{64}$")
NS_PATTERN = "^[^*\\u0000]*\\*?$"  # '*' only at the end, no NUL


class Pattern(Field):
    """A text field matching a regular expression (a token id, a hash)."""

    def __init__(self, name, doc, pattern: re.Pattern, what: str, **kw) -> None:
        super().__init__(name, doc, **kw)
        self.pattern, self.what = pattern, what

    def check(self, v, limits, in_txn, out):
        if type(v) is not str or not self.pattern.match(v):
            raise invalid(f"{self.name} must be {self.what}")
        return v

    def schema(self, limits, wire):
        return str_schema(self.doc, pattern=self.pattern.pattern)


class TokenName(Field):
    """A token's label: 0..MAX_TOKEN_NAME chars, default ""."""

    def check(self, v, limits, in_txn, out):
        if v is None:
            return ""
        if type(v) is not str or len(v) > MAX_TOKEN_NAME or "\x00" in v:
            raise invalid(f"{self.name} must be a string of at most {MAX_TOKEN_NAME} chars")
        utf8(v, self.name)
        return v

    def schema(self, limits, wire):
        return str_schema(self.doc, maxLength=MAX_TOKEN_NAME, default="", pattern=NO_NUL_OR_EMPTY)


def check_ns_pattern(v: object, where: str) -> str:
    """A grant's ns: a namespace, a namespace prefix followed by `*`, or `*`."""
    if type(v) is not str or "\x00" in v or not 1 <= len(utf8(v, where)) <= MAX_NS_BYTES:
        raise invalid(
            f"{where} must be a namespace, a prefix ending in '*', or '*' "
            f"(1..{MAX_NS_BYTES} UTF-8 bytes, no NUL)"
        )
    if "*" in v[:-1]:
        raise invalid(f"{where}: '*' may only end the pattern")
    return v


class Grants(Field):
    """1..MAX_GRANTS grants {ns, prefix, role}, normalized with prefix "" when absent."""

    def check(self, v, limits, in_txn, out):
        if type(v) is not list or not 1 <= len(v) <= MAX_GRANTS:
            raise invalid(f"{self.name} must be a list of 1..{MAX_GRANTS} grants")
        grants = []
        for i, g in enumerate(v):
            where = f"{self.name}[{i}]"
            if not isinstance(g, dict) or set(g) - {"ns", "prefix", "role"}:
                raise invalid(f"{where} must be an object with ns, prefix (optional), role")
            ns = check_ns_pattern(g.get("ns"), f"{where}.ns")
            prefix = g.get("prefix")
            prefix = (
                ""
                if prefix is None
                else key_text(prefix, limits.max_key_bytes, f"{where}.prefix", allow_empty=True)
            )
            if g.get("role") not in ROLES:
                raise invalid(f"{where}.role must be one of {', '.join(ROLES)}")
            grants.append({"ns": ns, "prefix": prefix, "role": g["role"]})
        return grants

    def schema(self, limits, wire):
        item = obj(
            {
                "ns": str_schema(
                    "A namespace, a prefix of namespaces ending in `*`, or `*` (all).",
                    minLength=1,
                    maxLength=MAX_NS_BYTES,
                    pattern=NS_PATTERN,
                ),
                # Null reads as absent, as for every optional field (docs/protocol.md).
                "prefix": nullable(
                    str_schema(
                        "Only keys (streams, lock names) starting with this; '' = all.",
                        default="",
                        maxLength=MAX_GRANT_PREFIX_BYTES,
                        pattern=NO_NUL_OR_EMPTY,
                    )
                ),
                "role": {"type": "string", "enum": list(ROLES), "description": "The role."},
            },
            ("ns", "role"),
            "One grant: a role over a namespace pattern and key prefix.",
        )
        item["additionalProperties"] = False
        return {
            "type": "array",
            "items": item,
            "minItems": 1,
            "maxItems": MAX_GRANTS_PER_TOKEN,
            "description": self.doc,
        }


class TokenTTL(Field):
    """A token's time to live in ms; 0 or absent: it never expires."""

    def check(self, v, limits, in_txn, out):
        if v is None:
            return 0
        if type(v) is not int or not 0 <= v <= MAX_REVISION:
            raise invalid(f"{self.name} must be an integer >= 0 (ms; 0: never expires)")
        return v

    def schema(self, limits, wire):
        return int_schema(self.doc, minimum=0, maximum=MAX_REVISION, default=0)


class Creator(Field):
    """The creating token's id; never sent by a client (node/api/authz.py sets or removes it
    after authorizing), so it is left out of the request schema."""

    requested = False

    def check(self, v, limits, in_txn, out):
        if v is None:
            return None
        if type(v) is not str or not _TOKEN_ID.match(v):
            raise invalid(f"{self.name} must be 16 lowercase hex digits")
        return v

    def properties(self, limits, wire):
        return {}


def _drop_absent_parent(out: dict, limits) -> None:
    """A create without a parent keeps the shape (and op digest) it had before parents."""
    if out.get("parent") is None:
        out.pop("parent", None)


def check_token_bounds(op: dict, limits=None) -> None:
    """Refuse (400) a create whose record would exceed the bounds of the module docstring."""
    grants = op["grants"]
    if len(grants) > MAX_GRANTS_PER_TOKEN:
        raise OpError(
            "too_many_grants",
            f"a token holds at most {MAX_GRANTS_PER_TOKEN} grants, not {len(grants)}",
        )
    for i, g in enumerate(grants):
        if len(g["prefix"].encode()) > MAX_GRANT_PREFIX_BYTES:
            raise OpError(
                "grant_prefix_too_long",
                f"grants[{i}].prefix: at most {MAX_GRANT_PREFIX_BYTES} UTF-8 bytes",
            )
    widest = 2**63  # times and parent at their widest: the bound holds whatever apply adds
    record = {
        "hash": op["hash"],
        "name": op["name"],
        "grants": [[g["ns"], g["prefix"], g["role"]] for g in grants],
        "created_ms": widest,
        "expires_ms": widest,
        "parent": op["id"],
    }
    size = len(msgpack.packb(record, use_bin_type=True))
    if size > MAX_TOKEN_RECORD_BYTES:
        raise OpError(
            "token_too_large",
            f"the token's record would take {size} bytes, at most {MAX_TOKEN_RECORD_BYTES} "
            "(shorter names, namespaces or prefixes, or fewer grants)",
        )


TOKEN_ID = Pattern(
    "id",
    "The token's id: 16 lowercase hex digits (the `<id>` of `sk_<id>_<secret>`).",
    _TOKEN_ID,
    "16 lowercase hex digits",
    required=True,
)


# The four auth ops (joined into OPS by node/ops/core.py).
SPECS: tuple[OpSpec, ...] = (
    OpSpec(
        "auth_token_create",
        (
            TOKEN_ID,
            Pattern(
                "hash",
                "SHA-256 of the token's secret, 64 lowercase hex digits (the token "
                "itself is never sent).",
                _HASH,
                "64 lowercase hex digits (SHA-256 of the secret)",
                required=True,
            ),
            TokenName("name", "A label for people (listed, logged)."),
            Grants("grants", "What the token may do.", required=True),
            TokenTTL(
                "ttl_ms",
                "Expires this long after creation (leader time); 0: never. Never "
                "after the creating token expires.",
            ),
            IDEMPOTENCY_KEY,
            Creator("parent", "The creating token (set by the node)."),
        ),
        "auth_token_create op: store a new token (its hash). The caller needs admin over "
        "every grant it hands out.",
        write=True,
        # A token record is up to 4 KiB held in every node's memory: not exempt from the
        # storage alarm, 40 fat tokens were accepted while NOSPACE refused puts (issue
        # 27, item 7). The root token, derived from the cluster secret, needs no record
        # to run a compaction.
        grows=True,
        access="admin",
        path="/v1/auth/tokens/create",
        post=_drop_absent_parent,
        admit=check_token_bounds,
    ),
    OpSpec(
        "auth_token_revoke",
        (TOKEN_ID, IDEMPOTENCY_KEY),
        "auth_token_revoke op: delete a token; every node refuses it once it applied this.",
        write=True,
        grows=False,
        access="admin",
        path="/v1/auth/tokens/revoke",
    ),
    OpSpec(
        "auth_token_list",
        (),
        "auth_token_list op: every token's id, name, grants and expiry (never its hash).",
        write=False,
        access="admin",
        path="/v1/auth/tokens/list",
    ),
    OpSpec(
        "auth_whoami",
        (),
        "auth_whoami op: the caller's own token: id, name, grants, expiry.",
        write=False,
        access="none",
        path="/v1/auth/whoami",
    ),
)
