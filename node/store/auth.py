"""Auth tokens: ops auth_token_create, auth_token_revoke; read auth_token_list
(docs/protocol.md, "Authentication and authorization"; declared in node/ops/auth.py,
checked on every request by node/api/authz.py).

A token is one b"T" token_id record (node/store/keys.py): the SHA-256 of its secret, a
name, its grants, created_ms and expires_ms. Both times come from the entry (`tx.clock`,
the leader-stamped replicated clock): created_ms = clock, expires_ms = clock + ttl_ms (0:
never). Apply never reads a clock; whether a token has expired is decided per request
against the serving node's wall clock (node/api/authz.py). A revoke deletes the record.

Tokens minted by tokens (issue 27, item 6: a 1-hour namespace admin minted a ttl-0 admin
token that outlived its creator's revocation). node/api/authz.py puts the creating token's
id into the op as `parent` (absent for the root token, with auth off, and in entries
written before this); the record keeps it. Apply then
- refuses (unauthenticated) a create whose parent is gone (revoked or expired between the
  request's check and apply),
- caps the new token's expires_ms at its parent's (when the parent expires at all),
- deletes, on a revoke, the token and every token minted from it, transitively, in the
  same entry (etcd's and PostgreSQL's users expect a revoked credential to take what it
  handed out; a cap alone would leave children of a revoked never-expiring admin).

Expired tokens are pruned (issue 27, item 7): each create and revoke deletes, in its
entry, every record whose expires_ms <= the entry's time. The time is the leader-stamped
`tx.clock`, so every node prunes the same records; authz refused them already.

Token records are not kv data: the ops take no revision (they answer the current one), so
no namespace's watchers or history see them, and compaction never touches them.

Invariants:
- The state machine keeps `tokens`, a dict id -> TokenRecord equal to the b"T" records of
  the applied state: built by `load_all` whenever the DB is (re)opened (start, snapshot
  restore) and replaced after every entry that changed a token (`changes`), only once
  that entry's write batch is in RocksDB. So the per-request check reads no RocksDB, and
  a node refuses a revoked token from the moment it applied the revoke.
- The dict is replaced whole, never mutated: a request thread sees one entry's view.
- The hash is never answered by any read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from statekeeper.node.errors import OpError
from statekeeper.node.store.apply import EntryTx, handles, read_op
from statekeeper.node.store.keys import TOKEN, inc, unpack
from statekeeper.node.store.reads import Source


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """One token as the authorizer sees it (grants: (ns_pattern, prefix, role) tuples)."""

    hash: bytes  # SHA-256 of the secret
    name: str
    grants: tuple[tuple[str, str, str], ...]
    created_ms: int
    expires_ms: int  # 0: never
    parent: str | None = None  # the token that created it (None: root, or before parents)

    @classmethod
    def decode(cls, raw: bytes) -> TokenRecord:
        m = unpack(raw)
        return cls(
            bytes.fromhex(m["hash"]),
            m["name"],
            tuple((g[0], g[1], g[2]) for g in m["grants"]),
            m["created_ms"],
            m["expires_ms"],
            m.get("parent"),
        )

    def info(self, token_id: str) -> dict:
        """The token as auth_token_list and auth_whoami show it (no hash)."""
        return {
            "id": token_id,
            "name": self.name,
            "grants": [{"ns": n, "prefix": p, "role": r} for n, p, r in self.grants],
            "created_ms": self.created_ms,
            "expires_ms": self.expires_ms,
        }


def token_key(token_id: str) -> bytes:
    return TOKEN + token_id.encode()


def _records(src: Source) -> Iterable[tuple[str, bytes]]:
    skip = len(TOKEN)
    for k, v in src.scan(TOKEN, inc(TOKEN)):
        yield k[skip:].decode(), v


def load_all(src: Source) -> dict[str, TokenRecord]:
    """Every token of the store (the state machine's `tokens` after opening the DB)."""
    return {tid: TokenRecord.decode(raw) for tid, raw in _records(src)}


def changes(overlay: dict[bytes, bytes | None]) -> dict[str, TokenRecord | None]:
    """The tokens an applied entry's writes created (record) or removed (None)."""
    skip = len(TOKEN)
    return {
        k[skip:].decode(): None if v is None else TokenRecord.decode(v)
        for k, v in overlay.items()
        if k[:skip] == TOKEN
    }


def _prune_expired(tx: EntryTx) -> dict[str, TokenRecord]:
    """Delete every expired token record (expires_ms <= the entry's time); the rest."""
    live = {}
    for tid, raw in _records(tx):
        rec = TokenRecord.decode(raw)
        if rec.expires_ms and rec.expires_ms <= tx.clock:
            tx.stage(token_key(tid), None)
            tx.tokens_changed = True
        else:
            live[tid] = rec
    return live


@handles("auth_token_create")
def auth_token_create(tx: EntryTx, op: dict) -> dict:
    live = _prune_expired(tx)
    key = token_key(op["id"])
    if op["id"] in live:
        raise OpError("token_exists", f"token id {op['id']} exists already; draw a new token")
    expires = tx.clock + op["ttl_ms"] if op["ttl_ms"] else 0
    record = {
        "hash": op["hash"],
        "name": op["name"],
        "grants": [[g["ns"], g["prefix"], g["role"]] for g in op["grants"]],
        "created_ms": tx.clock,
        "expires_ms": expires,
    }
    parent_id = op.get("parent")
    if parent_id is not None:
        parent = live.get(parent_id)
        if parent is None:
            raise OpError(
                "unauthenticated",
                f"token {parent_id}, which creates this token, was revoked or has expired",
            )
        if parent.expires_ms and not 0 < expires <= parent.expires_ms:
            expires = record["expires_ms"] = parent.expires_ms
        record["parent"] = parent_id
    tx.stage(key, tx.pack(record))
    tx.tokens_changed = True
    return {"revision": tx.revision, "id": op["id"], "created_ms": tx.clock, "expires_ms": expires}


@handles("auth_token_revoke")
def auth_token_revoke(tx: EntryTx, op: dict) -> dict:
    everyone = {tid: TokenRecord.decode(raw) for tid, raw in _records(tx)}
    if op["id"] not in everyone:
        raise OpError(
            "not_found", f"token {op['id']} does not exist (never created, or revoked)", id=op["id"]
        )
    children: dict[str, list[str]] = {}
    for tid, rec in everyone.items():
        if rec.parent is not None:
            children.setdefault(rec.parent, []).append(tid)
    revoked, todo = [], [op["id"]]
    while todo:  # a parent is always created before its children: no cycles
        tid = todo.pop()
        revoked.append(tid)
        tx.stage(token_key(tid), None)
        todo.extend(children.get(tid, ()))
    tx.tokens_changed = True
    _prune_expired(tx)
    return {"revision": tx.revision, "id": op["id"], "revoked": sorted(revoked)}


@read_op("auth_token_list")
def auth_token_list(src: Source, limits: Any, op: dict) -> dict:
    tokens = [TokenRecord.decode(raw).info(tid) for tid, raw in _records(src)]
    return {"revision": src.revision, "tokens": tokens}


@read_op("auth_whoami")
def auth_whoami(src: Source, limits: Any, op: dict) -> dict:
    # Answered by the HTTP layer, which knows the caller; inside a batch nobody does.
    raise OpError("invalid_argument", "auth_whoami is only served by POST /v1/auth/whoami")
