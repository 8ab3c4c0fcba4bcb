"""Auth tokens: ops auth_token_create, auth_token_revoke; read auth_token_list
(docs/protocol.md, "Authentication and authorization"; declared in node/auth_ops.py,
checked on every request by node/authz.py).

A token is one b"T" token_id record (node/store/keys.py): the SHA-256 of its secret, a
name, its grants, created_ms and expires_ms. Both times come from the entry (`tx.clock`,
the leader-stamped replicated clock): created_ms = clock, expires_ms = clock + ttl_ms (0:
never). Apply never reads a clock; whether a token has expired is decided per request
against the serving node's wall clock (node/authz.py). A revoke deletes the record.

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

from node.errors import OpError
from node.store.apply import EntryTx, handles, read_op
from node.store.keys import TOKEN, inc, unpack
from node.store.reads import Source


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """One token as the authorizer sees it (grants: (ns_pattern, prefix, role) tuples)."""

    hash: bytes  # SHA-256 of the secret
    name: str
    grants: tuple[tuple[str, str, str], ...]
    created_ms: int
    expires_ms: int  # 0: never

    @classmethod
    def decode(cls, raw: bytes) -> TokenRecord:
        m = unpack(raw)
        return cls(
            bytes.fromhex(m["hash"]),
            m["name"],
            tuple((g[0], g[1], g[2]) for g in m["grants"]),
            m["created_ms"],
            m["expires_ms"],
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


@handles("auth_token_create")
def auth_token_create(tx: EntryTx, op: dict) -> dict:
    key = token_key(op["id"])
    if tx.point(key) is not None:
        raise OpError("token_exists", f"token id {op['id']} exists already; draw a new token")
    expires = tx.clock + op["ttl_ms"] if op["ttl_ms"] else 0
    record = {
        "hash": op["hash"],
        "name": op["name"],
        "grants": [[g["ns"], g["prefix"], g["role"]] for g in op["grants"]],
        "created_ms": tx.clock,
        "expires_ms": expires,
    }
    tx.stage(key, tx.pack(record))
    tx.tokens_changed = True
    return {"revision": tx.revision, "id": op["id"], "created_ms": tx.clock, "expires_ms": expires}


@handles("auth_token_revoke")
def auth_token_revoke(tx: EntryTx, op: dict) -> dict:
    key = token_key(op["id"])
    if tx.point(key) is None:
        raise OpError(
            "not_found", f"token {op['id']} does not exist (never created, or revoked)", id=op["id"]
        )
    tx.stage(key, None)
    tx.tokens_changed = True
    return {"revision": tx.revision, "id": op["id"]}


@read_op("auth_token_list")
def auth_token_list(src: Source, limits: Any, op: dict) -> dict:
    tokens = [TokenRecord.decode(raw).info(tid) for tid, raw in _records(src)]
    return {"revision": src.revision, "tokens": tokens}


@read_op("auth_whoami")
def auth_whoami(src: Source, limits: Any, op: dict) -> dict:
    # Answered by the HTTP layer, which knows the caller; inside a batch nobody does.
    raise OpError("invalid_argument", "auth_whoami is only served by POST /v1/auth/whoami")
