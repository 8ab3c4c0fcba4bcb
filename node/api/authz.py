"""Who is asking, and may they: bearer-token authentication and per-namespace authorization
(docs/protocol.md, "Authentication and authorization"). Sans-IO: node/api/routes.py calls
`authenticate` with the Authorization header of every request outside the open routes, and
`authorize` with each validated op before anything is proposed or read.

Invariants:
- `authenticate` answers a Principal or raises OpError `unauthenticated` (401); its message
  says why (missing, malformed, unknown id, wrong secret, expired) and never echoes the
  token. Secrets are compared by their SHA-256 with hmac.compare_digest.
- `authorize` raises OpError `permission_denied` (403) unless EVERY part of the op is
  covered by one of the principal's grants: each op of a txn (its compares need read), each
  lease a lease op names (looked up by `lease_ns`), each grant a token create hands out
  (the caller needs admin over it; `authorize` then records the caller as the new token's
  `parent`, see node/store/auth.py). A grant covers (ns, touched keys, access) when its ns pattern matches ns, its
  role allows the access (reader: read; writer: read, write; admin: everything) and every
  key or prefix the op touches starts with its prefix; an op whose keys cannot be told
  (a whole-namespace range, a lease op) needs a grant with prefix "". Cluster-wide ops
  (compact, lease_list, token list, retention/archive listing without ns) need admin on
  `*` with prefix "".
- An op naming a lease or a token by id is checked against that object's namespace /
  grants. An id this node does not know (after the read barrier the HTTP layer passes
  when `unknown_ids` says so) is answered here with the op's own not-found error
  (lease_not_found; not_found for a token), not proposed: otherwise a lagging node could
  let through a revoke of an object created elsewhere in a namespace the caller may not
  touch. A keepalive answers unknown ids per lease, as before (renewing is harmless).
- Expiry is checked against `clock()` (the serving node's wall clock, ms) at request time;
  expires_ms was stamped from the leader's clock when the token was created. A node whose
  clock runs ahead refuses a token early by its skew, one running behind accepts it late by
  as much: keep node clocks in NTP sync (skew of seconds only matters for TTLs of seconds).
- The token view is the state machine's dict (replaced whole on each change), so a check
  never touches RocksDB and a revoke is effective on a node once that node applied it.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from statekeeper.client.auth.tokens import ROOT_PREFIX, parse_token
from statekeeper.node.errors import OpError
from statekeeper.node.ops.core import OPS

# (ns or None for cluster-wide, touched or None for the whole namespace, access)
# touched: ("key", text) for a key or a prefix (covered when it starts with the grant's
# prefix), ("range", start, end) for [start, end).
Scope = tuple[str | None, tuple | None, str]

ROLE_ALLOWS = {
    "reader": frozenset({"read"}),
    "writer": frozenset({"read", "write"}),
    "admin": frozenset({"read", "write", "admin"}),
}
ROOT = (("*", "", "admin"),)


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller."""

    id: str  # "root" for the root token
    name: str
    grants: tuple[tuple[str, str, str], ...]  # (ns pattern, key prefix, role)
    expires_ms: int  # 0: never
    created_ms: int = 0

    def info(self) -> dict:
        """What auth_whoami answers."""
        return {
            "id": self.id,
            "name": self.name,
            "grants": [{"ns": n, "prefix": p, "role": r} for n, p, r in self.grants],
            "created_ms": self.created_ms,
            "expires_ms": self.expires_ms,
        }


ROOT_PRINCIPAL = Principal("root", "root (derived from the cluster secret)", ROOT, 0)


def unauthenticated(message: str) -> OpError:
    return OpError("unauthenticated", message)


def lease_not_found(lease: int) -> OpError:
    """What the lease ops answer for an unknown lease (node/store/lease_state.py)."""
    return OpError(
        "lease_not_found",
        f"lease {lease} does not exist (never granted, revoked, or expired)",
        lease=lease,
    )


def ns_matches(pattern: str, ns: str) -> bool:
    if pattern.endswith("*"):
        return ns.startswith(pattern[:-1])
    return pattern == ns


def pattern_covers(outer: str, inner: str) -> bool:
    """Every namespace `inner` matches is matched by `outer`."""
    if outer.endswith("*"):
        return inner.startswith(outer[:-1])
    return outer == inner


def _inc(b: bytes) -> bytes:
    """The first byte string after every string starting with b (b non-empty)."""
    return b[:-1] + bytes([b[-1] + 1]) if b[-1] < 0xFF else _inc(b[:-1]) if b[:-1] else b"\xff"


def touched_within(prefix: str, touched: tuple | None) -> bool:
    """Every key `touched` stands for starts with `prefix`."""
    if not prefix:
        return True
    if touched is None:
        return False
    if touched[0] == "key":
        return touched[1].startswith(prefix)
    start, end = touched[1], touched[2]
    return (
        start is not None
        and start.startswith(prefix)
        and end is not None
        and end.encode() <= _inc(prefix.encode())
    )


def allowed(grants: tuple[tuple[str, str, str], ...], scope: Scope) -> bool:
    ns, touched, access = scope
    for pattern, prefix, role in grants:
        if access not in ROLE_ALLOWS[role]:
            continue
        if ns is None:  # cluster-wide
            if pattern == "*" and not prefix and role == "admin":
                return True
        elif ns_matches(pattern, ns) and touched_within(prefix, touched):
            return True
    return False


def _key(v: str | None) -> tuple | None:
    return None if v is None else ("key", v)


def _range(op: dict) -> tuple | None:
    if op.get("prefix"):
        return ("key", op["prefix"])
    if op.get("key") is not None:  # a watch of one key
        return ("key", op["key"])
    if op.get("start") is None and op.get("end") is None:
        return None
    return ("range", op.get("start") or "", op.get("end"))


class Authorizer:
    """Authentication and authorization of requests (see the module docstring).

    tokens: the state machine's token view (id -> record with hash, name, grants,
    created_ms, expires_ms); root_hash: SHA-256 of the root token; clock: wall clock in ms;
    lease_ns: a lease's namespace, None if it does not exist.
    """

    def __init__(
        self,
        tokens: Callable[[], Mapping[str, Any]],
        root_hash: bytes,
        clock: Callable[[], int],
        lease_ns: Callable[[int], str | None] = lambda lease: None,
    ) -> None:
        self.tokens = tokens
        self.root_hash = root_hash
        self.clock = clock
        self.lease_ns = lease_ns

    # -- authentication ------------------------------------------------------------------

    def authenticate(self, header: str | None) -> Principal:
        if not header:
            raise unauthenticated("no Authorization header: send 'Authorization: Bearer <token>'")
        scheme, _, token = header.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise unauthenticated("malformed Authorization header: expected 'Bearer <token>'")
        if token.startswith(ROOT_PREFIX):
            digest = hashlib.sha256(token.encode("utf-8", "replace")).digest()
            if hmac.compare_digest(digest, self.root_hash):
                return ROOT_PRINCIPAL
            raise unauthenticated("wrong root token (it is derived from this cluster's secret)")
        parsed = parse_token(token)
        if parsed is None:
            raise unauthenticated("malformed token: expected sk_<16 hex id>_<secret>")
        token_id, secret = parsed
        rec = self.tokens().get(token_id)
        if rec is None:
            raise unauthenticated(f"unknown token {token_id} (never created, or revoked)")
        if not hmac.compare_digest(hashlib.sha256(secret.encode()).digest(), rec.hash):
            raise unauthenticated(f"wrong secret for token {token_id}")
        if rec.expires_ms and self.clock() >= rec.expires_ms:
            at = datetime.fromtimestamp(rec.expires_ms / 1000, UTC).isoformat(timespec="seconds")
            raise unauthenticated(f"token {token_id} expired at {at}")
        return Principal(token_id, rec.name, rec.grants, rec.expires_ms, rec.created_ms)

    def standing(self, principal: Principal) -> OpError | None:
        """None while the token `principal` authenticated with still stands; else the
        `unauthenticated` error that ends a stream it opened (node/api/stream_auth.py)."""
        if principal is ROOT_PRINCIPAL:
            return None
        rec = self.tokens().get(principal.id)
        if rec is None or rec.created_ms != principal.created_ms:
            return unauthenticated(f"token {principal.id} was revoked")
        if principal.expires_ms and self.clock() >= principal.expires_ms:
            at = datetime.fromtimestamp(principal.expires_ms / 1000, UTC)
            return unauthenticated(
                f"token {principal.id} expired at {at.isoformat(timespec='seconds')}"
            )
        return None

    # -- authorization -------------------------------------------------------------------

    def authorize(self, principal: Principal, op_name: str, op: dict) -> None:
        """Raise `permission_denied` unless the principal may run the validated op."""
        grants = principal.grants
        self._hide_foreign_leases(grants, op_name, op)
        for scope in self.scopes(op_name, op):
            if not allowed(grants, scope):
                raise self.denied(principal, op_name, scope)
        if op_name == "auth_token_create":
            for g in op["grants"]:
                if not any(
                    role == "admin" and pattern_covers(p, g["ns"]) and g["prefix"].startswith(pre)
                    for p, pre, role in grants
                ):
                    raise OpError(
                        "permission_denied",
                        f"op auth_token_create: token {principal.id} may not hand out "
                        f"{g['role']} on ns {g['ns']!r} prefix {g['prefix']!r}: it needs admin "
                        "over every grant it creates",
                    )
            # Bind the new token to its creator (whatever the client sent): apply caps its
            # expiry at the creator's and a revoke of the creator takes it too (issue 27,
            # item 6). The root token is no record: nothing to cap or cascade from.
            if principal.id == ROOT_PRINCIPAL.id:
                op.pop("parent", None)
            else:
                op["parent"] = principal.id
        elif op_name == "auth_token_revoke":
            rec = self.tokens().get(op["id"])
            if rec is None:
                raise OpError(
                    "not_found",
                    f"token {op['id']} does not exist (never created, or revoked)",
                    id=op["id"],
                )
            for p, pre, _ in rec.grants:
                if not any(
                    role == "admin" and pattern_covers(gp, p) and pre.startswith(gpre)
                    for gp, gpre, role in grants
                ):
                    raise OpError(
                        "permission_denied",
                        f"op auth_token_revoke: token {principal.id} needs admin over every "
                        f"grant of token {op['id']} (ns {p!r} prefix {pre!r})",
                    )

    def _hide_foreign_leases(self, grants: tuple, op_name: str, op: dict) -> None:
        """A lease in a namespace none of the caller's grants names is not found, as an
        unknown id is: a 403 naming its namespace told any tenant, for sequential ids,
        which namespace holds each lease (issue 27, item 11)."""
        if op_name in ("lease_keepalive", "lease_revoke", "lease_info"):
            ids = op["leases"] if op_name == "lease_keepalive" else (op["lease"],)
        elif op_name == "lock_acquire" and op.get("lease") is not None:
            ids = (op["lease"],)
        else:
            return
        for lease in ids:
            ns = self.lease_ns(lease)
            if ns is not None and not any(ns_matches(p, ns) for p, _, _ in grants):
                raise lease_not_found(lease)

    def unknown_ids(self, name: str, op: dict) -> bool:
        """The op names a lease or a token this node does not know. It may only lag: the
        HTTP layer then passes a read barrier before `authorize`, which answers the op's
        not-found error for an id still unknown, so no op on an object whose namespace
        was never checked is proposed."""
        if name in ("lease_keepalive", "lease_revoke", "lease_info"):
            ids = op["leases"] if name == "lease_keepalive" else (op["lease"],)
            return any(self.lease_ns(lease) is None for lease in ids)
        if name == "lock_acquire" and op.get("lease") is not None:
            return self.lease_ns(op["lease"]) is None
        if name == "auth_token_revoke":
            return op["id"] not in self.tokens()
        return False

    def denied(self, principal: Principal, op_name: str, scope: Scope) -> OpError:
        ns, touched, access = scope
        if ns is None:
            what = "cluster-wide (admin on ns '*')"
        elif touched is None:
            what = f"on ns {ns!r} (whole namespace)"
        elif touched[0] == "key":
            what = f"on ns {ns!r} key {touched[1]!r}"
        else:
            what = f"on ns {ns!r} keys [{touched[1]!r}, {touched[2]!r})"
        return OpError(
            "permission_denied",
            f"op {op_name} needs {access} access {what}; token {principal.id} has no grant for it",
            op=op_name,
            ns=ns,
        )

    def scopes(self, name: str, op: dict) -> Iterator[Scope]:
        """What the op touches, and the access each part needs."""
        spec = OPS.get(name)
        access = spec.access if spec is not None else "read" if name == "watch" else "admin"
        if access == "none":
            return
        if name == "txn":  # every compare (read) and every op of both branches
            if not (op["compare"] or op["success"] or op["failure"]):
                yield op["ns"], None, "write"
            for c in op["compare"]:
                yield c["ns"], ("key", c["key"]), "read"
            for inner in (*op["success"], *op["failure"]):
                yield from self.scopes(inner["op"], inner)
            return
        if name in ("lease_keepalive", "lease_revoke", "lease_info"):
            for lease in op["leases"] if name == "lease_keepalive" else (op["lease"],):
                ns = self.lease_ns(lease)
                if ns is not None:
                    yield ns, None, access
                elif name != "lease_keepalive":  # (keepalive answers each unknown id)
                    raise lease_not_found(lease)
            return
        if name == "lock_acquire" and op.get("lease") is not None:
            ns = self.lease_ns(op["lease"])
            if ns is None:
                raise lease_not_found(op["lease"])
            yield ns, ("key", op["name"]), "write"  # its waiter key goes on the lease
        if name in ("compact", "lease_list", "auth_token_list"):
            yield None, None, "admin"
            return
        if name in ("auth_token_create", "auth_token_revoke"):
            return  # checked grant by grant (authorize)
        ns = op.get("ns")
        if ns is None:  # retention_list / retention_status / archive_list of every ns
            yield None, None, "admin"
            return
        yield ns, _touched(name, op), access


def _touched(name: str, op: dict) -> tuple | None:
    """The keys a namespaced op touches (None: cannot tell / the whole namespace)."""
    if "key" in op and name not in ("watch",):
        return ("key", op["key"])  # put, delete (also a prefix delete), cas, get, merge...
    if "stream" in op:
        return ("key", op["stream"])
    if "name" in op:
        return ("key", op["name"])  # locks
    if name in ("archive_seal", "archive_restore"):
        items = [k[0] for k in op.get("keys") or ()] + [s[0] for s in op.get("streams") or ()]
        if not items:
            return None
        common = items[0]
        for it in items[1:]:
            while not it.startswith(common):
                common = common[:-1]
        return ("key", common)
    if name in (
        "range",
        "watch",
        "list_streams",
        "lock_list",
        "retention_set",
        "retention_delete",
        "archive_plan",
    ):
        return _range(op)
    return None
