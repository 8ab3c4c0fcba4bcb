"""The lock ops' declarations and field kinds: lock_acquire, lock_release, lock_list, and the
`fence` that every fenced write carries (docs/protocol.md, "Locks and fencing"; applied and
read by node/store/locks.py, the fence checked by node/store/apply.py before the handler).

Like every op they are declared once (`SPECS`, joined into node.ops.core.OPS); `fenced`
adds the `fence` field to the write ops that take one (put, delete, cas, txn, append).

Normalized shapes (raft entries carry the writes', so their msgpack bytes must not change):

    lock_acquire  {op, ns, name, lease, owner, wait, idempotency_key}
                  owner: str | None; wait: bool (false: only if the lock is free)
    lock_release  {op, ns, name, fence, idempotency_key}     fence: the waiter's token (int)
    lock_list     {op, ns, prefix, after, limit}
    put, delete, cas, txn, append: their old shape, plus `fence: {name, token}` only when
                  given (an op without it keeps its old bytes: old raft entries validate to
                  exactly what they validated to before locks existed). Inside a txn branch
                  no op takes a fence: the txn's own `fence` covers all of them.

A lock is a queue of waiter keys in the namespace: "__lock/{name}/{rev:020d}", one per
lock_acquire, named by the revision that wrote it (node/store/locks.py). A name is 1..
max_key_bytes - 28 UTF-8 bytes without NUL (the key adds 28 bytes); it may contain "/".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from statekeeper.node.config import Limits
from statekeeper.node.errors import ErrorCode, declare
from statekeeper.node.ops.fields import (
    MAX_REVISION,
    NO_NUL,
    NO_NUL_OR_EMPTY,
    Field,
    Key,
    PageLimit,
    invalid,
    key_text,
)
from statekeeper.node.ops.leases import LeaseId
from statekeeper.node.ops.schemas import int_schema, obj, str_schema
from statekeeper.node.ops.shared import IDEMPOTENCY_KEY, NS
from statekeeper.node.ops.spec import OpSpec

# The error codes of the lock ops (node/errors.py has the ones every op shares).
ERRORS = declare(
    ErrorCode(
        "lock_not_held",
        404,
        "lock_release of a waiter that is gone (released, or its lease expired or was revoked)",
    ),
    ErrorCode(
        "fence_mismatch",
        409,
        "a fenced write's token is not the fence of the lock's holder (`error` has `name`, `token`, `holder_fence`: the holder's fence or null); nothing applied",
    ),
    ErrorCode(
        "lock_held",
        409,
        "lock_acquire with `wait: false` of a lock someone holds (`error` has `holder_fence`); nothing written",
    ),
)

LOCK_PREFIX = "__lock/"
TOKEN_DIGITS = 20  # a waiter key ends in its revision, zero-padded: byte order = rev order
KEY_OVERHEAD = len(LOCK_PREFIX) + 1 + TOKEN_DIGITS  # "__lock/" name "/" 20 digits
MAX_OWNER_CHARS = 256
FENCED_OPS = frozenset({"put", "delete", "cas", "txn", "append"})


def waiter_key(name: str, token: int) -> str:
    """The kv key of the waiter of lock `name` whose fence (revision) is `token`."""
    return f"{LOCK_PREFIX}{name}/{token:0{TOKEN_DIGITS}d}"


def waiter_prefix(name: str) -> str:
    """Every waiter key of lock `name` starts with this (so may keys of a lock named
    `name/...`: a waiter key is the prefix followed by exactly TOKEN_DIGITS digits)."""
    return f"{LOCK_PREFIX}{name}/"


def max_name_bytes(limits: Limits) -> int:
    return limits.max_key_bytes - KEY_OVERHEAD


class LockName(Key):
    """A lock's name: 1..max_key_bytes - 28 UTF-8 bytes, no NUL ("/" allowed)."""

    def check(self, v, limits, in_txn, out):
        if v is None and not self.required:
            return None
        most = max_name_bytes(limits)
        if type(v) is str and 0 < len(v) <= most and v.isascii() and "\x00" not in v:
            return v  # the common case, cheaply
        return key_text(v, most, self.name, allow_empty=self.allow_empty)

    def schema(self, limits, wire):
        n = max_name_bytes(limits)
        return str_schema(
            f"{self.doc} 1..{n} UTF-8 bytes (max_key_bytes - {KEY_OVERHEAD}), no NUL; may "
            "contain '/'.",
            minLength=1 if not self.allow_empty else 0,
            maxLength=n,
            pattern=NO_NUL_OR_EMPTY if self.allow_empty else NO_NUL,
        )


class Token(Field):
    """A fencing token: a waiter's revision, 1..2**63-1."""

    def check(self, v, limits, in_txn, out):
        if v is None and not self.required:
            return None
        if type(v) is not int or not 1 <= v <= MAX_REVISION:
            raise invalid(f"{self.name} must be a fencing token (a positive integer)")
        return v

    def schema(self, limits, wire):
        return int_schema(self.doc, minimum=1, maximum=MAX_REVISION)


class Fence(Field):
    """A write's fence: {name, token}; the write applies only while the lock `name` of the
    write's namespace is held by the waiter with that token. Absent: None (left out of
    the op by `fence_post`). Not inside a txn branch (the txn carries it)."""

    component = "Fence"
    _name = LockName("name", "The lock's name.", required=True)
    _token = Token("token", "The holder's fencing token (`fence` of lock_acquire).", required=True)

    def check(self, v, limits, in_txn, out):
        if v is None:
            return None
        if in_txn:
            raise invalid(self.txn_error)
        if not isinstance(v, dict) or set(v) != {"name", "token"}:
            raise invalid(f"{self.name} must be an object {{name, token}}")
        name = self._name.check(v["name"], limits, False, out)
        return {"name": name, "token": self._token.check(v["token"], limits, False, out)}

    def absent(self):
        return None

    def schema(self, limits, wire):
        return {
            **obj(
                {
                    "name": self._name.schema(limits, wire),
                    "token": self._token.schema(limits, wire),
                },
                ("name", "token"),
                "Fence: apply this write only while lock `name` (in the write's namespace) "
                "is held by the waiter whose fence is `token`; else 409 `fence_mismatch` "
                "and nothing is applied.",
            ),
            "additionalProperties": False,
        }


class Owner(Field):
    """Who waits: free text shown by lock_list (1..MAX_OWNER_CHARS chars)."""

    def check(self, v, limits, in_txn, out):
        if v is None:
            return None
        if type(v) is not str or not 1 <= len(v) <= MAX_OWNER_CHARS or "\x00" in v:
            raise invalid(f"{self.name} must be a string of 1..{MAX_OWNER_CHARS} chars, no NUL")
        key_text(v, 4 * MAX_OWNER_CHARS, self.name)  # valid unicode
        return v

    def schema(self, limits, wire):
        return str_schema(self.doc, minLength=1, maxLength=MAX_OWNER_CHARS, pattern=NO_NUL)


class Wait(Field):
    """lock_acquire's `wait`: a boolean, default true."""

    def check(self, v, limits, in_txn, out):
        if v is None:
            return True
        if type(v) is not bool:
            raise invalid(f"{self.name} must be a boolean")
        return v

    def schema(self, limits, wire):
        return {"type": "boolean", "description": self.doc, "default": True}


FENCE = Fence(
    "fence",
    "Fence this write with a lock (see Fence).",
    txn_error="ops inside a txn take no fence (give it to the txn)",
)
NAME = LockName("name", "The lock's name.", required=True)
LEASE = LeaseId(
    "lease",
    "The lease the waiter key is attached to: when it expires or is revoked the waiter "
    "leaves the queue (and a holder loses the lock). 404 `lease_not_found` if it does "
    "not exist; it must belong to `ns`.",
    required=True,
)


def fence_post(post: Callable[[dict, Limits], None] | None) -> Callable[[dict, Limits], None]:
    """An op's `post` check that first leaves `fence` out of the op when absent (so an op
    without a fence is the same op, byte for byte, as before fences existed)."""

    def run(out: dict, limits: Limits) -> None:
        if out["fence"] is None:
            del out["fence"]
        if post is not None:
            post(out, limits)

    return run


def fenced(specs: Iterable[OpSpec]) -> tuple[OpSpec, ...]:
    """`specs` with a `fence` field added to the ops of FENCED_OPS (last field)."""
    out = []
    for s in specs:
        if s.name in FENCED_OPS:
            s = dataclasses.replace(s, fields=(*s.fields, FENCE), post=fence_post(s.post))
        out.append(s)
    return tuple(out)


# The three lock ops (joined into OPS by node/ops/core.py).
SPECS: tuple[OpSpec, ...] = (
    OpSpec(
        "lock_acquire",
        (
            NS,
            NAME,
            LEASE,
            Owner("owner", "Who waits (free text, shown by lock_list)."),
            Wait(
                "wait",
                "false: take the lock only if nobody holds or waits for it; else 409 "
                "`lock_held` (with `holder_fence`) and nothing is written.",
            ),
            IDEMPOTENCY_KEY,
        ),
        "lock_acquire op: join the lock's queue with a waiter key attached to `lease`; "
        "the first waiter holds the lock.",
        write=True,
        path="/v1/locks/acquire",
    ),
    OpSpec(
        "lock_release",
        (
            NS,
            NAME,
            Token("fence", "The waiter's fence (lock_acquire's `fence`).", required=True),
            IDEMPOTENCY_KEY,
        ),
        "lock_release op: delete the waiter key (the next waiter then holds the lock).",
        write=True,
        grows=False,
        path="/v1/locks/release",
    ),
    OpSpec(
        "lock_list",
        (
            NS,
            LockName("prefix", "Only locks whose name starts with this.", allow_empty=True),
            LockName("after", "Only locks after this one (the last name of the previous page)."),
            PageLimit("limit", "At most this many locks per page"),
        ),
        "lock_list op: the locks of a namespace with their holder and waiters.",
        write=False,
        path="/v1/locks/list",
    ),
)
