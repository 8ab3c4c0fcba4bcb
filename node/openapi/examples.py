"""Examples of the OpenAPI document (requests and answers of put, get and cas)."""

from __future__ import annotations

from typing import Any

from statekeeper.node.config import Limits
from statekeeper.node.ops.core import OPS

# The put's value field: the example's message is the one it raises.
_VALUE = next(f for f in OPS["put"].fields if f.name == "value")


def _ex(summary: str, value: Any) -> dict:
    return {"summary": summary, "value": value}


def _kv_example(value: str, version: int, create: int, mod: int) -> dict:
    return {
        "key": "agent-7/state",
        "value": value,
        "version": version,
        "create_revision": create,
        "mod_revision": mod,
    }


def put_examples(limits: Limits) -> dict:
    return {
        "request": {
            "text": _ex(
                "UTF-8 value",
                {
                    "ns": "agents",
                    "key": "agent-7/state",
                    "value": '{"step":3}',
                    "idempotency_key": "6f1c2b0e-4a55-4b7e-9d8f-0c3e2a1b9d44",
                },
            ),
            "binary": _ex(
                "Binary value as base64",
                {"ns": "agents", "key": "agent-7/blob", "value_b64": "AAECA/8="},
            ),
            "prev_kv": _ex(
                "Return the previous kv",
                {"ns": "agents", "key": "agent-7/state", "value": '{"step":4}', "prev_kv": True},
            ),
            "ttl": _ex(
                "A key that is deleted 30 s from now (a lease of its own)",
                {"ns": "agents", "key": "agent-7/heartbeat", "value": "alive", "ttl_ms": 30000},
            ),
        },
        200: {
            "written": _ex("Written at revision 42", {"revision": 42}),
            "replayed": _ex(
                "Retry with a seen idempotency_key", {"revision": 42, "replayed": True}
            ),
            "prev_kv": _ex(
                "With prev_kv", {"revision": 43, "prev_kv": _kv_example('{"step":3}', 3, 12, 42)}
            ),
            "ttl": _ex("With ttl_ms: the lease it granted", {"revision": 44, "lease": 9}),
        },
        413: {
            "value_too_large": _ex(
                "Value too large",
                {
                    "error": {
                        "code": "value_too_large",
                        "message": _VALUE.too_large(limits),
                    }
                },
            )
        },
        504: {
            "timeout": _ex(
                "Outcome unknown",
                {
                    "error": {
                        "code": "timeout",
                        "message": "no commit within 5 s; the write may still be applied: retry with the same idempotency_key",
                    }
                },
            )
        },
    }


def get_examples() -> dict:
    return {
        "request": {
            "linearizable": _ex(
                "Linearizable read (default)", {"ns": "agents", "key": "agent-7/state"}
            ),
            "serializable": _ex(
                "Local read on any node",
                {
                    "ns": "agents",
                    "key": "agent-7/state",
                    "consistency": "serializable",
                    "min_revision": 42,
                },
            ),
            "past": _ex(
                "Read at a past revision", {"ns": "agents", "key": "agent-7/state", "revision": 30}
            ),
        },
        200: {"found": _ex("Found", {"revision": 42, "kv": _kv_example('{"step":3}', 3, 12, 42)})},
        404: {
            "missing": _ex(
                "No such key",
                {"error": {"code": "key_not_found", "message": "no such key"}, "revision": 42},
            )
        },
        410: {
            "compacted": _ex(
                "Below compact_revision",
                {
                    "error": {
                        "code": "compacted",
                        "message": "revision 3 is compacted (compact_revision 100)",
                    }
                },
            )
        },
    }


def cas_examples() -> dict:
    return {
        "request": {
            "version": _ex(
                "Replace version 3",
                {
                    "ns": "agents",
                    "key": "agent-7/state",
                    "value": '{"step":4}',
                    "expect": {"version": 3},
                    "idempotency_key": "0b8e7f52-0d4c-4a8b-8a9e-3f7d0e6c5a21",
                },
            ),
            "create": _ex(
                "Create only if absent",
                {
                    "ns": "agents",
                    "key": "agent-7/lock",
                    "value": "owner-1",
                    "expect": {"exists": False},
                },
            ),
            "mod_revision": _ex(
                "Replace if unchanged since revision 42",
                {
                    "ns": "agents",
                    "key": "agent-7/state",
                    "value": '{"step":4}',
                    "expect": {"mod_revision": 42},
                },
            ),
        },
        200: {"succeeded": _ex("Swapped", {"revision": 43, "succeeded": True})},
        409: {
            "conflict": _ex(
                "Someone else wrote first",
                {
                    "error": {
                        "code": "compare_failed",
                        "message": "the key does not match the expectation",
                    },
                    "revision": 44,
                    "succeeded": False,
                    "kv": _kv_example('{"step":9}', 5, 12, 44),
                },
            ),
            "missing": _ex(
                "Expected version 3 but the key does not exist",
                {
                    "error": {
                        "code": "compare_failed",
                        "message": "the key does not match the expectation",
                    },
                    "revision": 44,
                    "succeeded": False,
                    "kv": None,
                },
            ),
        },
    }
