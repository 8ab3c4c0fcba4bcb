"""The lock ops in the OpenAPI document: their results, the text of their routes, the note
every fenced write gets, and examples (requests come from node/ops/locks.py's declarations,
like every op's; the `Fence` component from its field kind). No lock result carries
bytes, so each schema serves both wires."""

from __future__ import annotations

from typing import Any

from statekeeper.node.ops.fields import Schema
from statekeeper.node.ops.schemas import (
    bool_schema,
    int_schema,
    obj,
    replayed_schema,
    rev_schema,
    str_schema,
)
from statekeeper.node.ops.spec import OpenApiFamily

FENCE_NOTE = (
    " With `fence: {name, token}` the write applies only while lock `name` of its namespace "
    "is held by the waiter whose fence is `token`; else 409 `fence_mismatch` (the error "
    "carries `holder_fence`, null when nobody holds it) and nothing is applied."
)


def _nullable_int(description: str) -> Schema:
    return {"type": ["integer", "null"], "minimum": 1, "description": description}


def _waiter() -> Schema:
    props = {
        "key": str_schema("The waiter key: __lock/{name}/{fence, 20 digits}."),
        "fence": rev_schema("Its fence: the revision that enqueued it (its create_revision)."),
        "lease": _nullable_int("The lease it is attached to."),
        "owner": {"type": ["string", "null"], "description": "lock_acquire's `owner`."},
    }
    return obj(props, tuple(props))


def lock_schemas() -> dict[str, Schema]:
    """Lock results (the same for JSON and msgpack)."""
    lock = obj(
        {
            "name": str_schema("The lock's name."),
            "holder_fence": rev_schema("The holder's fence (the first waiter's)."),
            "holder_lease": _nullable_int("The holder's lease."),
            "count": int_schema("Waiters in the queue, the holder included."),
            "waiters": {
                "type": "array",
                "items": _waiter(),
                "description": "The queue in arrival order, holder first (the first 100).",
            },
        },
        ("name", "holder_fence", "holder_lease", "count", "waiters"),
    )
    return {
        "LockAcquireResult": obj(
            {
                "revision": rev_schema("Revision of the acquire (= `fence`)."),
                "name": str_schema("The lock's name."),
                "key": str_schema("This waiter's key: __lock/{name}/{fence, 20 digits}."),
                "fence": rev_schema("This waiter's fencing token: the revision it took."),
                "holder_fence": rev_schema("The holder's fence now (= `fence` if acquired)."),
                "acquired": bool_schema("This waiter holds the lock (it was the first)."),
                "ahead": {
                    "type": ["string", "null"],
                    "description": "The key of the waiter just ahead (null if acquired): "
                    "watch it for its deletion, from `revision` + 1.",
                },
                "replayed": replayed_schema(),
            },
            ("revision", "name", "key", "fence", "holder_fence", "acquired", "ahead"),
        ),
        "LockReleaseResult": obj(
            {
                "revision": rev_schema("Revision at which the waiter key was deleted."),
                "name": str_schema("The lock's name."),
                "fence": rev_schema("The released waiter's fence."),
                "held": bool_schema("It held the lock (the next waiter holds it now)."),
                "replayed": replayed_schema(),
            },
            ("revision", "name", "fence", "held"),
        ),
        "LockListResult": obj(
            {
                "revision": rev_schema("Revision the page was served at."),
                "locks": {"type": "array", "items": lock},
                "more": bool_schema("More locks follow: send `after` = the last name."),
            },
            ("revision", "locks", "more"),
        ),
    }


LOCK_RESULTS = ("LockAcquireResult", "LockReleaseResult", "LockListResult")

_WRITE_NOTE = (
    "Goes through raft like put and takes a revision. A lock is a queue of waiter keys "
    "__lock/{name}/{revision} attached to leases; the first one holds it. A lock alone is "
    "advisory: fence your writes with it (`fence`) to make it safe."
)


def lock_op_docs(write_errors: tuple[str, ...], read_errors: tuple[str, ...]) -> dict:
    """op -> (summary, description, 200 description, errors), as openapi.py's table."""
    return {
        "lock_acquire": (
            "Join a lock's queue (acquire it if free)",
            _WRITE_NOTE + " Not acquired: watch `ahead` for its deletion from `revision` + 1, "
            "then look again (the first waiter holds it). Give an idempotency_key: a retry "
            "then gets the same waiter.",
            "Enqueued (`acquired` says whether it holds the lock).",
            (*write_errors, "lease_not_found", "lock_held", "idempotency_key_reused"),
        ),
        "lock_release": (
            "Leave a lock's queue (release it if held)",
            _WRITE_NOTE + " Deletes the waiter key; a lease revoke or expiry does the same.",
            "Released.",
            (*write_errors, "lock_not_held", "idempotency_key_reused"),
        ),
        "lock_list": (
            "List a namespace's locks with holders and waiters, paged by name",
            "Served from local RocksDB after the consistency step, like get.",
            "One page.",
            read_errors,
        ),
    }


def _ex(summary: str, value: Any) -> dict:
    return {"summary": summary, "value": value}


def lock_examples() -> dict[str, dict]:
    """Examples of lock_acquire and lock_release, by op."""
    key = "__lock/report/00000000000000000042"
    return {
        "lock_acquire": {
            "request": {
                "acquire": _ex("Wait for lock `report`", {"name": "report", "lease": 7}),
                "try": _ex("Only if free", {"name": "report", "lease": 7, "wait": False}),
            },
            200: {
                "queued": _ex(
                    "Second in line",
                    {
                        "revision": 42,
                        "name": "report",
                        "key": key,
                        "fence": 42,
                        "holder_fence": 40,
                        "acquired": False,
                        "ahead": "__lock/report/00000000000000000040",
                    },
                )
            },
        },
        "lock_release": {
            "request": {"release": _ex("Release fence 42", {"name": "report", "fence": 42})},
            200: {
                "released": _ex(
                    "It held the lock",
                    {"revision": 57, "name": "report", "fence": 42, "held": True},
                )
            },
            404: {
                "lock_not_held": _ex(
                    "Its lease expired",
                    {
                        "error": {
                            "code": "lock_not_held",
                            "message": "lock 'report' has no waiter with fence 42 in "
                            "namespace 'default' (released already, or its lease expired or "
                            "was revoked)",
                            "name": "report",
                            "fence": 42,
                        }
                    },
                )
            },
        },
    }


FAMILY = OpenApiFamily(
    "locks",
    "Fair locks on leases, and fencing tokens.",
    lock_op_docs,
    lock_schemas,
    LOCK_RESULTS,
    examples=lock_examples,
)
