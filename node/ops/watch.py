"""The watch request: its declaration (one `OpSpec`, like every op's, so node/openapi/watch.py
generates its request schema from the same fields) and its validation.

A watch is not an op of node/ops/core.py's registry: it is neither applied nor read once, it is
served as a long-lived streamed answer of POST /v1/watch (node/api/watch.py). So `validate_op`,
batches and txns do not know it; `validate_watch` runs the declaration the same way.

Normalized shape:

    {op: "watch", ns, key, prefix, start, end, start_revision, progress_ms, prev_kv}

At most one of `key` (that key only), `prefix` ("" = the whole namespace) or `start`/`end`
(the range [start, end), like range's: no `start` = from the first key, no `end` = to the
end of the namespace; `end` must sort after `start`); none of them = the whole namespace.
`start_revision` >= 1 is required: there is no "from now" default (watch from a read's
revision + 1). `progress_ms` 0 turns progress frames off.
"""

from __future__ import annotations

from typing import Any

from statekeeper.node.config import Limits
from statekeeper.node.ops.fields import DEFAULT_NS, MAX_REVISION, Field, Flag, Key, invalid
from statekeeper.node.ops.known_fields import refuse_unknown_fields
from statekeeper.node.ops.schemas import int_schema
from statekeeper.node.ops.shared import NS
from statekeeper.node.ops.spec import OpSpec
from statekeeper.node.ops.streams import Count

MAX_PROGRESS_MS = 60_000
DEFAULT_PROGRESS_MS = 1000
WATCH_PATH = "/v1/watch"
# The answer's Content-Type: NDJSON for a JSON request, length-prefixed msgpack frames else.
NDJSON = "application/x-ndjson"
MSGPACK_FRAMES = "application/msgpack; framing=length-prefixed"


class StartRevision(Field):
    """The first revision a watch delivers: an integer 1..MAX_REVISION, required."""

    MESSAGE = (
        "start_revision is required: the first revision to deliver, an integer >= 1 "
        "(to watch from now, take a read's revision + 1)"
    )

    def check(self, v, limits, in_txn, out):
        if v is None:
            raise invalid(self.MESSAGE)
        if type(v) is not int or not 1 <= v <= MAX_REVISION:
            raise invalid(f"{self.name} must be an integer in 1..{MAX_REVISION}")
        return v

    def schema(self, limits, wire):
        return int_schema(
            f"{self.doc} Required; there is no 'from now' default.",
            minimum=1,
            maximum=MAX_REVISION,
        )


def _watch_post(out: dict, limits: Limits) -> None:
    chosen = [n for n in ("key", "prefix") if out[n] is not None]
    if out["start"] is not None or out["end"] is not None:
        chosen.append("start/end")
    if len(chosen) > 1:
        raise invalid(f"give at most one of key, prefix or start/end, not {' and '.join(chosen)}")
    start, end = out["start"], out["end"]
    if end is not None and end.encode() <= (start or "").encode():
        raise invalid(
            f"bad range: end {end!r} must sort after start {start or ''!r} (the range "
            "[start, end) would be empty)"
        )


WATCH_SPEC = OpSpec(
    "watch",
    (
        NS,
        Key("key", "Watch this key only."),
        Key(
            "prefix",
            "Watch the keys starting with this ('' = the whole namespace).",
            allow_empty=True,
        ),
        Key("start", "First key of the watched range (inclusive).", allow_empty=True),
        Key(
            "end",
            "End of the watched range (exclusive; default: end of the namespace); "
            "must sort after `start`.",
            allow_empty=True,
        ),
        StartRevision(
            "start_revision",
            "The first revision to deliver (a read's revision "
            "+ 1 to watch from now; the last revision seen + 1 to resume).",
            required=True,
        ),
        Count(
            "progress_ms",
            "Send a progress frame after this long without a frame (0: never).",
            default=DEFAULT_PROGRESS_MS,
            maximum=MAX_PROGRESS_MS,
        ),
        Flag("prev_kv", "Give each event the key's previous kv (`prev_kv`), when it had one."),
    ),
    "watch: every change of a key, a prefix or a range from `start_revision` on, streamed "
    "(at most one of key, prefix or start/end; none: the whole namespace).",
    write=False,
    exclusive=("prefix", ("start", "end")),
    post=_watch_post,
    path=WATCH_PATH,
)


def validate_watch(body: Any, limits: Limits) -> dict:
    """The normalized watch request (module docstring), or raise OpError
    (invalid_argument, key_too_large; unknown_field for a field it does not know)."""
    if not isinstance(body, dict):
        raise invalid("a watch request must be an object")
    refuse_unknown_fields(body, WATCH_SPEC)
    out: dict[str, Any] = {"op": "watch", "ns": DEFAULT_NS}
    out["ns"] = NS.check(body.get("ns"), limits, False, out)
    for name, check in WATCH_SPEC.rest:
        out[name] = check(body.get(name), limits, False, out)
    _watch_post(out, limits)
    return out
