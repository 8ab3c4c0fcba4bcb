"""The raft entry format: its one owner (built by the proposer, stamped by the leader,
read by the state machine).

One entry is a msgpack map `{"t": time_ms, "ops": [op, ...]}` (docs/protocol.md, "Raft
entries"). `encode` always writes `t` first and as a msgpack uint64 (0xcf + 8 bytes), so the
entry starts with the fixed 12 bytes

    0x82 0xa1 't' 0xcf <u64 big-endian time_ms>

and the leader can replace the time in place (`restamp`) without decoding the ops: apply
must only ever see time that the LEADER read from its clock (an entry built on a follower,
a forwarded write or read barrier, carries the follower's clock until the leader restamps
it when it appends the entry). The non-minimal integer encoding is valid msgpack, so
entries written before this layout (minimal encoding) still decode.

Validated ops. A top-level op of TRUSTED_OPS (put, delete, txn, append) may carry the field
`VALIDATED` ("~v") = VALIDATED_SHAPE: the node that proposed the entry built the op with
node/ops.validate_op from a request (node/api/routes.py marks it with `mark_validated`
right before proposing), so apply takes it as it is instead of validating it again
(`validated_op`). Why that is safe:
- Only nodes of this cluster append entries (peers are authenticated, docs/protocol.md
  "Security": nodes trust each other); a request cannot set the field: validate_op refuses
  a request's unknown field (unknown_field) and never outputs one. Whoever can forge an entry can forge any write anyway.
- validate_op is idempotent and its output for these ops holds only str, bytes, bool,
  int, None, the fence {name, token}, lists and str-keyed maps (a txn's compares and ops,
  an append's events and their flat meta, floats included), which msgpack gives back
  unchanged: the op apply reads IS validate_op's answer for it
  (tests/unit/store/test_validated_ops.py).
- A node validates with its own [limits]; every node must run with the same config (the
  store's determinism rule), and a marked op is taken as it is by every node alike.
- Entries without the field (older journals, internal ops such as lease_expire, any op
  not in TRUSTED_OPS) are validated as before; a node of an older version drops the field
  as unknown and validates, so a mixed cluster applies the same op.
- The shape is versioned: a change to the normalized fields of a trusted op must bump
  VALIDATED_SHAPE (a test pins them), so marks of the old shape get validated again.
Measured: validate_op of a 256 B put with an idempotency key costs 2.3-3.3 us (timeit,
best of 5) on every node, 6-8 % of a node's CPU under batches of 64 puts (py-spy); a txn
of ten 256 B puts 27.6 us, an append of one event 5.2 us and of 100 events 393 us (issue
28, timeit best of 5, validate_op(op, Limits(), internal=True)).
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack

STAMP_PREFIX = b"\x82\xa1t\xcf"  # fixmap(2), fixstr "t", uint64
_TIME = struct.Struct(">Q")
STAMP_END = len(STAMP_PREFIX) + _TIME.size  # 12
_OPS_KEY = b"\xa3ops"
# How far into a wrapped command (pysyncobj's type byte + pickle header) the entry may start.
_SEARCH = 64


class EntryError(ValueError):
    """Bytes that are not a raft entry of this format."""


def encode(time_ms: int, ops: list[dict]) -> bytes:
    """One entry; `time_ms` is provisional until the leader restamps it."""
    return STAMP_PREFIX + _TIME.pack(time_ms) + _OPS_KEY + msgpack.packb(ops, use_bin_type=True)


def decode(payload: bytes) -> tuple[int, list[Any]]:
    """(time_ms, ops) of an entry; raises EntryError for anything else."""
    try:
        doc = msgpack.unpackb(payload, raw=False)
    except Exception as e:  # msgpack raises assorted errors on garbage
        raise EntryError(f"not msgpack: {e}") from None
    if isinstance(doc, dict):
        ops, t = doc.get("ops"), doc.get("t")
        if isinstance(ops, list) and type(t) is int and 0 <= t < 2**63:
            return t, ops
    raise EntryError('not a raft entry (want msgpack {"t": int, "ops": [op, ...]})')


def restamp(buf: bytes, time_ms: int) -> bytes:
    """`buf` with the entry's time replaced by `time_ms`.

    `buf` is an entry, or a command that embeds one verbatim within its first 64 bytes
    (pysyncobj's command: a type byte, then a pickle whose bytes object holds the entry; the
    pickle header is ~20 bytes and cannot contain the prefix, since its length fields would
    have to exceed 3 GB). A buffer without an entry of this layout is returned unchanged.
    """
    pos = buf.find(STAMP_PREFIX, 0, _SEARCH)
    if pos < 0:
        return buf
    at = pos + len(STAMP_PREFIX)
    return b"".join((buf[:at], _TIME.pack(time_ms), buf[at + _TIME.size :]))


VALIDATED = "~v"
VALIDATED_SHAPE = 1
TRUSTED_OPS = frozenset({"put", "delete", "txn", "append"})


def mark_validated(op: dict) -> dict:
    """`op`, a result of node/ops.validate_op, marked for apply to take as it is (ops of
    TRUSTED_OPS only; others are returned unmarked). Mutates and returns `op`."""
    if op["op"] in TRUSTED_OPS:
        op[VALIDATED] = VALIDATED_SHAPE
    return op


def validated_op(raw: Any) -> dict | None:
    """The op of an entry, without its mark, when the proposer marked it validated (see
    the module docstring); None when apply must validate it."""
    if type(raw) is dict:
        mark = raw.get(VALIDATED)
        if type(mark) is int and mark == VALIDATED_SHAPE and raw.get("op") in TRUSTED_OPS:
            del raw[VALIDATED]
            return raw
    return None
