"""The types of the raft layer's interface: what the rest of the node sees of it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import BinaryIO, Protocol


class SubmitError(Enum):
    """Why a submitted entry has no result."""

    # Definitely not applied: safe to retry anywhere.
    NO_LEADER = "no_leader"
    # May or may not be applied: retry only with the same idempotency key.
    OUTCOME_UNKNOWN = "outcome_unknown"
    # Over config.RAFT_ENTRY_LIMIT_BYTES: refused before anything was queued, not applied.
    ENTRY_TOO_LARGE = "entry_too_large"


@dataclass(frozen=True)
class RaftStatus:
    node_id: str
    is_leader: bool
    leader_id: str | None
    term: int
    commit_index: int
    applied_index: int
    leader_commit_index: int | None
    has_quorum: bool
    ready: bool
    log_truncations: int
    log_truncated_entries: int
    rejected_peer_messages: int
    restoring: bool = False  # replacing the state machine from a snapshot
    voter: bool = True  # False: no raft state at start, not caught up yet (catchup.py)

    @property
    def role(self) -> str:
        """leader, follower (a leader is known) or candidate (none is)."""
        return "leader" if self.is_leader else ("follower" if self.leader_id else "candidate")


class FSM(Protocol):
    """The replicated state machine, as raft sees it (hashicorp/raft's FSM shape).

    Raft knows nothing of what the entries mean; the state machine knows nothing of raft.
    node.store.StateMachine implements this; a test can hand in any object that does.
    apply and the snapshot calls come from the raft thread, except write_checkpoint
    and flush, which run on a helper thread while applies go on.
    """

    def apply(self, index: int, entry: bytes) -> object:
        """Apply the committed entry at raft `index`; None if it is already applied
        (`index <= applied_index`: pysyncobj replays the journal on restart)."""
        ...

    def checkpoint(self) -> Path:
        """A consistent copy of the state in a new directory, taken between two applies."""
        ...

    def write_checkpoint(self, work: Path, f: BinaryIO) -> None:
        """Pack a checkpoint() directory into the snapshot bytes restore() reads."""
        ...

    def restore(self, path: str, offset: int = 0) -> None:
        """Replace the whole state with a snapshot written by write_checkpoint(), read in
        place at `offset` of file `path` (off the raft thread: raft_node._deserialize)."""
        ...

    def flush(self) -> None:
        """Make the next checkpoint() quick (done before one, off the raft thread)."""
        ...

    @property
    def applied_index(self) -> int:
        """The last raft index applied (durably, as far as a restart is concerned)."""
        ...

    @property
    def clock_ms(self) -> int:
        """The largest entry time applied so far (the replicated clock)."""
        ...


ApplyFn = Callable[[int, bytes], object]
Callback = Callable[[object, "SubmitError | None"], None]
