"""Key layout helpers for client/langgraph (the saver's keys; the store keeps its own).

Every free-form component (thread id, checkpoint namespace, channel, task id, version,
run id) goes through :func:`part`, which percent-encodes ``%``, ``/`` and NUL, so a key's
``/`` always separates segments and ``ckpt/{thread}/`` never matches another thread's keys.

The saver's keys, inside its statekeeper namespace (``"langgraph"`` by default)::

    ckpt/{thread}/{cns}/{inv(checkpoint_id)}        checkpoint record (msgpack)
    blob/{thread}/{cns}/{channel}/{version}         one channel value at one version
    writes/{thread}/{cns}/{checkpoint_id}/{task_id}/{idx:08d}   one pending write
    run/{run_id}/{thread}/{cns}/{checkpoint_id}     "" (run index, for delete_for_runs)
    trun/{thread}/{run_id}                          "" (the runs a thread has checkpoints of)
    last/{thread}/{cns}                             id of the checkpoint put last (a change
                                                    marker that prune/delete_for_runs compare on)
    ttl/{thread}                                    the thread's lease id, with ttl= only
                                                    (saver_ttl.py)

A blob or write too large for the txn has its chunks in
``chunk/{key}/{sha256}/{i:06d}`` (saver_chunks.py; earlier versions wrote ``{key}/c0``,
``{key}/c1``, ..., still read). ``idx`` is ``%08d``, so the special writes of
``WRITES_IDX_MAP`` (negative indexes) read ``-0000001`` .. ``-0000004``.

``inv`` makes ascending key order DESCENDING checkpoint id order, so "newest first",
``before`` and ``limit`` are forward range scans: a canonical lowercase UUID (what LangGraph
uses: uuid6, time ordered) has each hex digit complemented (``0``<->``f``, ``1``<->``e``, ...;
dashes kept), so it still reads like a UUID; any other id becomes ``~`` + the hex of each
UTF-8 byte complemented (255 - b) + ``~``, which reverses byte order too. Non-UUID ids
sort after (as if older than) every UUID id of the same namespace.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import InvalidRequest

__all__ = [
    "BLOB",
    "CHUNK",
    "CKPT",
    "LAST",
    "RUN",
    "TRUN",
    "TTL",
    "WRITES",
    "blob_key",
    "blob_prefix",
    "chunk_owner",
    "chunk_prefix",
    "chunk_root",
    "ckpt_key",
    "checked_id",
    "ckpt_prefix",
    "inv",
    "last_key",
    "last_prefix",
    "main_key",
    "namespace_of",
    "parse_ckpt_key",
    "parse_run_key",
    "part",
    "prefix_end",
    "retarget",
    "run_key",
    "run_prefix",
    "trun_key",
    "trun_prefix",
    "thread_of",
    "ttl_key",
    "uninv",
    "unpart",
    "version_part",
    "writes_key",
    "writes_prefix",
]

CKPT, BLOB, WRITES, RUN, TRUN, LAST = "ckpt/", "blob/", "writes/", "run/", "trun/", "last/"
TTL = "ttl/"
CHUNK = "chunk/"

_ESCAPES = {"%": "%25", "/": "%2F", "\x00": "%00"}
_UNESCAPE = re.compile(r"%(25|2F|00)")
_UNESCAPES = {"25": "%", "2F": "/", "00": "\x00"}


def part(value: Any) -> str:
    """One key segment: ``str(value)`` with ``%``, ``/`` and NUL percent-encoded."""
    s = value if isinstance(value, str) else str(value)
    if "%" in s or "/" in s or "\x00" in s:
        return "".join(_ESCAPES.get(ch, ch) for ch in s)
    return s


def unpart(segment: str) -> str:
    """The inverse of :func:`part`."""
    if "%" not in segment:
        return segment
    return _UNESCAPE.sub(lambda m: _UNESCAPES[m.group(1)], segment)


def namespace_of(ns: str | None, clients: tuple[Any, ...], default: str, what: str) -> str:
    """The statekeeper namespace of a saver or store: ``ns`` when given, else that of the
    clients it was given (issue 30 item 11: ``Client(urls, ns="tenant-a")`` means tenant-a),
    else ``default``. Clients of two namespaces and no ``ns``: ValueError."""
    if ns is not None:
        return ns
    found = {c.ns for c in clients if c is not None}
    if len(found) > 1:
        raise ValueError(
            f"{what}'s client and aclient use different namespaces ({', '.join(sorted(found))}): "
            "pass ns= to say which one holds its keys"
        )
    return found.pop() if found else default


# -- checkpoint id <-> descending key order ------------------------------------------------

_HEX = "0123456789abcdef"
_COMPLEMENT = str.maketrans(_HEX, _HEX[::-1])
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")


def inv(checkpoint_id: str) -> str:
    """The key segment of ``checkpoint_id``: ascending segments = descending ids (see the
    module docstring)."""
    if _UUID.match(checkpoint_id):
        return checkpoint_id.translate(_COMPLEMENT)
    return "~" + bytes(255 - b for b in checkpoint_id.encode("utf-8")).hex() + "~"


def uninv(segment: str) -> str:
    """The checkpoint id whose :func:`inv` is ``segment``."""
    if segment.startswith("~"):
        return bytes(255 - b for b in bytes.fromhex(segment[1:-1])).decode("utf-8")
    return segment.translate(_COMPLEMENT)


def prefix_end(prefix: str) -> str:
    """The smallest string above every string starting with ``prefix`` (a range's end)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def version_part(version: Any) -> str:
    """The key segment of a channel version (int, float or str; ``1`` and ``"1"`` are the
    same version)."""
    return part(version if isinstance(version, str) else repr(version))


# -- the saver's keys ----------------------------------------------------------------------


def ckpt_prefix(thread_id: str | None = None, checkpoint_ns: str | None = None) -> str:
    """``ckpt/``, ``ckpt/{thread}/`` or ``ckpt/{thread}/{cns}/``."""
    if thread_id is None:
        return CKPT
    if checkpoint_ns is None:
        return f"{CKPT}{part(thread_id)}/"
    return f"{CKPT}{part(thread_id)}/{part(checkpoint_ns)}/"


def ckpt_key(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> str:
    return ckpt_prefix(thread_id, checkpoint_ns) + inv(checkpoint_id)


def parse_ckpt_key(key: str) -> tuple[str, str, str]:
    """(thread_id, checkpoint_ns, checkpoint_id) of a ``ckpt/`` key."""
    _, thread, cns, seg = key.split("/")
    return unpart(thread), unpart(cns), uninv(seg)


def blob_prefix(thread_id: str, checkpoint_ns: str | None = None) -> str:
    if checkpoint_ns is None:
        return f"{BLOB}{part(thread_id)}/"
    return f"{BLOB}{part(thread_id)}/{part(checkpoint_ns)}/"


def blob_key(thread_id: str, checkpoint_ns: str, channel: str, version_segment: str) -> str:
    """The key of one channel value; ``version_segment`` is :func:`version_part`'s."""
    return f"{blob_prefix(thread_id, checkpoint_ns)}{part(channel)}/{version_segment}"


def writes_prefix(
    thread_id: str, checkpoint_ns: str | None = None, checkpoint_id: str | None = None
) -> str:
    """``writes/{thread}/``, ``.../{cns}/`` or ``.../{cns}/{checkpoint_id}/``."""
    if checkpoint_ns is None:
        return f"{WRITES}{part(thread_id)}/"
    p = f"{WRITES}{part(thread_id)}/{part(checkpoint_ns)}/"
    return p if checkpoint_id is None else f"{p}{part(checkpoint_id)}/"


def writes_key(
    thread_id: str, checkpoint_ns: str, checkpoint_id: str, task_id: str, idx: int
) -> str:
    return f"{writes_prefix(thread_id, checkpoint_ns, checkpoint_id)}{part(task_id)}/{idx:08d}"


def run_prefix(run_id: str, thread_id: str | None = None) -> str:
    if thread_id is None:
        return f"{RUN}{part(run_id)}/"
    return f"{RUN}{part(run_id)}/{part(thread_id)}/"


def run_key(run_id: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> str:
    return f"{run_prefix(run_id, thread_id)}{part(checkpoint_ns)}/{part(checkpoint_id)}"


def parse_run_key(key: str) -> tuple[str, str, str, str]:
    """(run_id, thread_id, checkpoint_ns, checkpoint_id) of a ``run/`` key."""
    _, run, thread, cns, cid = key.split("/")
    return unpart(run), unpart(thread), unpart(cns), unpart(cid)


def trun_prefix(thread_id: str) -> str:
    return f"{TRUN}{part(thread_id)}/"


def trun_key(thread_id: str, run_id: str) -> str:
    return trun_prefix(thread_id) + part(run_id)


def last_prefix(thread_id: str) -> str:
    return f"{LAST}{part(thread_id)}/"


def last_key(thread_id: str, checkpoint_ns: str) -> str:
    return last_prefix(thread_id) + part(checkpoint_ns)


def ttl_key(thread_id: str) -> str:
    return f"{TTL}{part(thread_id)}"


def thread_of(key: str) -> str:
    """The thread id a saver key belongs to (second segment; third for ``run/``); a chunk
    key's (``chunk/{key}/...``) is its owner's."""
    if key.startswith(CHUNK):
        key = key[len(CHUNK) :]
    segments = key.split("/", 3)
    return unpart(segments[2] if segments[0] + "/" == RUN else segments[1])


def chunk_root(key: str) -> str:
    """The prefix of the chunks of the value at ``key`` (``key`` may also be a prefix of
    keys: ``chunk_root(blob_prefix(t))[:-1]`` is every chunk of thread t's blobs)."""
    return f"{CHUNK}{key}/"


def chunk_prefix(prefix: str) -> str:
    """The prefix of the chunks of every value whose key starts with ``prefix``."""
    return CHUNK + prefix


def chunk_owner(key: str) -> str:
    """The key whose value a chunk key (``chunk/{key}/{sha256}/{i}``) belongs to."""
    return key[len(CHUNK) :].rsplit("/", 2)[0]


def main_key(key: str, slashes: int) -> tuple[str, int | None]:
    """(the key a value belongs to, its chunk number or None): a main key has ``slashes``
    "/", a chunk ``{main}/c{i}`` one more."""
    if key.count("/") <= slashes:
        return key, None
    head, _, tail = key.rpartition("/")
    return head, int(tail[1:])


def retarget(key: str, thread_id: str) -> str:
    """``key`` (ckpt/, blob/, writes/, trun/ or last/: thread second; or chunk/ + one of
    them) moved to ``thread_id``."""
    if key.startswith(CHUNK):
        return CHUNK + retarget(key[len(CHUNK) :], thread_id)
    top, _, rest = key.split("/", 2)
    return f"{top}/{part(thread_id)}/{rest}"


# A thread id's or checkpoint_ns's bytes in a key (escaped by `part`): a thread's longest
# key, writes/{thread}/{cns}/{checkpoint_id}/{task_id}/{idx}, then stays under the server's
# 4096-byte keys with both at their longest.
MAX_ID_BYTES = 1024


def checked_id(value: Any, name: str = "thread_id") -> str:
    """``str(value)`` for a key, or InvalidRequest (key_too_large) naming ``name`` and the
    limit; the server would name the key's internal field ("start is longer than...")."""
    text = str(value)
    n = len(part(text).encode("utf-8", "surrogatepass"))
    if n > MAX_ID_BYTES:
        raise InvalidRequest(
            f"{name} is {len(text)} characters ({n} bytes in a key); at most {MAX_ID_BYTES} "
            f"bytes (statekeeper keys hold at most 4096, and the saver's keys hold the "
            f"{name} with the checkpoint's ids)",
            code="key_too_large",
        )
    return text
