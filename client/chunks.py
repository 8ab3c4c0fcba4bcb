"""Content-addressed chunks: how a value larger than one key (1 MiB) is stored, as sans-IO
plans (client/plan.py). Used by the agent layer's checkpoints (client/agent/checkpoints.py)
and by the LangGraph saver and store (client/langgraph/).

A value of n bytes is cut into ceil(n / size) chunks stored at
``{prefix}{sha256 of the value}/{i:06d}``; whoever references it keeps a small manifest
(the sha256, the length, the chunk count and size) in a key of its own. Write order:

1. :func:`upload_plan`: batched puts of the chunks (each <= the value limit, each batch <=
   ``batch_bytes``); chunks already stored under that sha256 are not sent again, so a
   retried or repeated write sends nothing twice and two values never share a chunk key
   unless they are the same bytes;
2. ONE txn by the caller that puts the manifest and carries :func:`exists_compares` (every
   chunk still exists): a chunk deleted between 1 and 2 (a collector, a delete of the
   owner's prefix) fails the compare instead of committing a manifest with a hole.

Chunk sizes: 512 KiB chunks, two per batch, by default. Every request becomes one raft
entry, and entries of 2 MiB and more made a 3-node test cluster (election timeout
0.4-0.7 s) lose its leader (measured for the agent layer: batches of three 1 MiB puts ->
repeated elections; 512 KiB chunks, two per batch -> none).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import NotFound
from .ops import compare
from .plan import AgentPlan, batch, call, raise_errors

__all__ = [
    "ChunkSpace",
    "chunk_count",
    "chunk_groups",
    "exists_compares",
    "fetch_plan",
    "scan_plan",
    "sha256_hex",
    "upload_plan",
]

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ChunkSpace:
    """Where chunks live (``prefix`` in namespace ``ns``) and their sizes: the server's
    value limit, the chunk size and the payload of one batch of chunk puts or gets."""

    prefix: str
    ns: str | None
    value_limit: int = MIB
    chunk_size: int = 512 * 1024
    batch_bytes: int = MIB

    def dir(self, sha256: str) -> str:
        """The prefix of every chunk of the value whose sha256 is ``sha256``."""
        return f"{self.prefix}{sha256}/"

    def key(self, sha256: str, i: int) -> str:
        return f"{self.prefix}{sha256}/{i:06d}"

    def sha_of(self, key: str) -> str:
        """The sha256 segment of a chunk key."""
        return key[len(self.prefix) :].partition("/")[0]


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def chunk_count(length: int, chunk_size: int) -> int:
    return -(-length // chunk_size)


def chunk_groups(count: int, space: ChunkSpace) -> list[range]:
    """The chunk indexes of each batch (as many chunks as fit in one request)."""
    per = max(1, space.batch_bytes // space.chunk_size)
    return [range(i, min(count, i + per)) for i in range(0, count, per)]


def scan_plan(
    ns: str | None, prefix: str, revision: int | None, keys_only: bool = False
) -> AgentPlan[list[Any]]:
    """Every KeyValue under ``prefix`` at ``revision``, page by page."""
    kvs: list[Any] = []
    cont = None
    while True:
        rr = yield call(
            "range",
            prefix,
            revision=revision,
            keys_only=keys_only or None,
            continuation=cont,
            ns=ns,
        )
        kvs.extend(rr.kvs)
        if not rr.more:
            return kvs
        cont, revision = rr.continuation, rr.revision


def upload_plan(
    space: ChunkSpace, data: bytes, sha: str, fence: Any = None, lease: int | None = None
) -> AgentPlan[int]:
    """Store ``data``'s chunks under ``space.dir(sha)`` and return the chunk size they use
    (each put fenced by ``fence`` when given: a stale writer uploads nothing; attached to
    ``lease`` when given: they expire with it).

    Chunks already there are not sent again when they are a complete set (of this
    writer's size, or of another size, which is then adopted); any other leftover (a
    partial upload of another size) is overwritten with this writer's chunks."""
    size = space.chunk_size
    have = {kv.key for kv in (yield from scan_plan(space.ns, space.dir(sha), None, True))}
    if have:
        try:
            first = len((yield call("get", space.key(sha, 0), ns=space.ns)).value)
        except NotFound:
            first = 0
        complete = 0 < first <= space.value_limit and len(have) == chunk_count(len(data), first)
        if complete and (first == size or len(have) > 1):
            size = first  # a complete set: keep it (another writer's chunk size, maybe)
        elif first != min(size, len(data)):
            have = set()  # a partial set of another size: send every chunk again
    count = chunk_count(len(data), size)
    missing = [i for i in range(count) if space.key(sha, i) not in have]
    per = max(1, space.batch_bytes // size)
    for start in range(0, len(missing), per):
        puts = [
            call(
                "put", space.key(sha, i), data[i * size : (i + 1) * size], fence=fence, lease=lease
            )
            for i in missing[start : start + per]
        ]
        raise_errors((yield batch(*puts, ns=space.ns)))
    return size


def fetch_plan(
    space: ChunkSpace,
    sha: str,
    count: int,
    missing: Callable[[int, str], Exception],
) -> AgentPlan[bytes]:
    """The ``count`` chunks of ``sha`` joined (batched gets; chunks never change, so any
    revision that has them serves); ``missing(i, key)`` is raised for a chunk that is not
    there. The caller checks the result against its manifest's length and sha256."""
    parts: list[bytes] = []
    for group in chunk_groups(count, space):
        results = yield batch(*(call("get", space.key(sha, i)) for i in group), ns=space.ns)
        for i, kv in zip(group, raise_errors(results), strict=True):
            if kv is None:
                raise missing(i, space.key(sha, i))
            parts.append(kv.value)
    return b"".join(parts)


def exists_compares(space: ChunkSpace, sha: str, count: int) -> list[dict[str, Any]]:
    """The compares of the manifest's txn: every chunk of ``sha`` still exists."""
    return [compare.exists(space.key(sha, i)) for i in range(count)]
