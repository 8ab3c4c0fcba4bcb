"""Where the agent layer keeps things inside a namespace: plain keys and one stream, so a
person can read an agent with ``statekeeper``'s range or the HTTP API.

    agent/{agent_id}/head                  the current checkpoint's manifest (+ "ckpt": n)
    agent/{agent_id}/ckpt/{n:012d}         checkpoint n's manifest (msgpack, see records.py)
    agent/{agent_id}/chunk/{sha256}/{i:06d}  chunk i of a state envelope too large to inline
                                           (client/chunks.py)
    stream agent/{agent_id}                the agent's events (``meta.step`` on each)
    proj/{name}                            a projection's saved {position, model}

Checkpoint numbers are dense (1, 2, 3, ...: each is head's + 1, under a compare on the
head), so "the newest k" is a range of keys, not a scan. Chunks are content-addressed: the
same state checkpointed twice is stored once.
"""

from __future__ import annotations

from .errors import InvalidAgentId

__all__ = ["Layout", "check_name", "projection_key"]


def check_name(name: object, what: str = "agent id") -> str:
    """``name`` if it may be an agent id or projection name: a non-empty str without
    '/' or NUL (it becomes one segment of a key), at most 512 UTF-8 bytes."""
    if not isinstance(name, str) or not name:
        raise InvalidAgentId(f"{what} must be a non-empty str, not {name!r}")
    if "/" in name or "\x00" in name:
        raise InvalidAgentId(f"{what} {name!r} may not contain '/' or NUL")
    if len(name.encode("utf-8")) > 512:
        raise InvalidAgentId(f"{what} is longer than 512 UTF-8 bytes")
    return name


class Layout:
    """The keys and the stream of one agent."""

    __slots__ = ("agent_id", "ckpt_prefix", "chunk_prefix", "head", "root", "stream")

    def __init__(self, agent_id: str) -> None:
        self.agent_id = check_name(agent_id)
        self.root = f"agent/{agent_id}/"
        self.head = self.root + "head"
        self.ckpt_prefix = self.root + "ckpt/"
        self.chunk_prefix = self.root + "chunk/"
        self.stream = f"agent/{agent_id}"

    def ckpt(self, n: int) -> str:
        return f"{self.ckpt_prefix}{n:012d}"


def projection_key(name: str) -> str:
    return f"proj/{check_name(name, 'projection name')}"
