"""node/main.py's ready line and the checksum scan after it: one task, in that order.

CI (stop 24) saw the old two polling tasks race: the scan found a garbled DB within
milliseconds of ready and stopped the node before the other task wrote "ready", so
test_self_healing's "found after the start" check read a log without the line."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import pytest

from statekeeper.node import main


@dataclass
class Status:
    ready: bool
    applied_index: int = 7
    leader_id: str | None = "node-0"


class Raft:
    def __init__(self, ready_after_polls: int) -> None:
        self.polls = 0
        self.ready_after = ready_after_polls

    def status(self) -> Status:
        self.polls += 1
        return Status(ready=self.polls > self.ready_after)


class Scan:
    """Records what the log held when it was started (a corrupt DB stops the node at once)."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self.caplog = caplog
        self.log_at_start: list[str] | None = None

    def start(self) -> None:
        self.log_at_start = [r.getMessage() for r in self.caplog.records]


async def test_the_ready_line_is_written_before_the_scan_starts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "statekeeper.node")
    scan = Scan(caplog)
    await main._when_ready(Raft(ready_after_polls=3), 0.0, scan)
    assert scan.log_at_start is not None, "the scan never started"
    assert any(m.startswith("ready ") for m in scan.log_at_start), scan.log_at_start


async def test_a_node_that_stays_unready_is_scanned_anyway_and_logs_ready_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "statekeeper.node")
    scan = Scan(caplog)
    raft = Raft(ready_after_polls=10**9)
    task = asyncio.create_task(main._when_ready(raft, 0.0, scan, scan_after=0.05))
    while scan.log_at_start is None:
        await asyncio.sleep(0.01)
    assert not any(m.startswith("ready ") for m in scan.log_at_start)  # scanned before ready
    raft.ready_after = raft.polls  # a quorum is reached
    await asyncio.wait_for(task, 5)
    assert any(r.getMessage().startswith("ready ") for r in caplog.records)
