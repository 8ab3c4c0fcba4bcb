"""GET /v1/health/live: is this process worth keeping, or should its supervisor restart it?

Live means the process serves HTTP (this answer) AND its raft loop makes progress. Every
raft tick that gets going and every applied entry stamps a monotonic time
(node/raft/syncobj.py, `note_progress`); a node whose ticks all fail, or stop being
scheduled, still answers HTTP but will never replicate, vote or apply again, and only a
restart helps. So once the stamp is older than `[raft] live_stall_seconds` (default 10 s) the
answer is 503 `not_live` with the age in the message. Raft runs on the same loop as HTTP
(node/raft/loop_driver.py): a raft step stuck for good (a hung fsync, an endless loop)
freezes the whole node, and the probe gets no answer at all, which a supervisor counts the
same way (cluster/watchdog.py).

Not a stall:
  - a long journal replay after a restart: every applied entry is progress;
  - a snapshot restore: it runs on a helper thread (node/raft/raft_node.py, _deserialize)
    while the loop goes on ticking and serving; the node is live and not ready
    (`restoring_snapshot` true) until the state machine holds the snapshot. Until issue 17
    the restore was one raft step on the loop: a follower of a 10M-key store answered
    nothing for over ten minutes, and a probe would have killed it mid-restore.

The body also carries `raft_loop_age_seconds` and `raft_loop_max_gap_seconds` (the longest
gap between two progress stamps since start, i.e. the worst stall seen so far), which is
how the default threshold was chosen (docs/protocol.md "Health").

Readiness (leader known, caught up) is a different question, answered by /v1/health/ready:
a live node may well be not ready (partitioned, catching up), and restarting it then would
not help.
"""

from __future__ import annotations

from typing import Protocol

from statekeeper.node.errors import OpError


class _Progress(Protocol):
    def progress(self) -> tuple[float, float, bool]: ...


def check(raft: _Progress, node_id: str, stall_seconds: float) -> tuple[int, dict]:
    """(HTTP status, JSON body) of GET /v1/health/live."""
    age, max_gap, restoring = raft.progress()
    body: dict = {
        "node_id": node_id,
        "raft_loop_age_seconds": round(age, 3),
        "raft_loop_max_gap_seconds": round(max_gap, 3),
        "restoring_snapshot": restoring,
    }
    if age <= stall_seconds:
        return 200, {"ok": True, **body}
    err = OpError(
        "not_live",
        f"{node_id} is not live: its raft loop has made no progress for {age:.1f} s "
        f"(limit [raft] live_stall_seconds = {stall_seconds:g})",
    )
    return 503, {"error": err.to_dict(), "ok": False, **body}
