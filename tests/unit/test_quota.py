"""The storage quota's decision (node/quota/alarm.py), sans I/O: sizes in, verdict out; and the
pieces of node/fatal.py and node/quota/disk_watch.py that need no cluster."""

from __future__ import annotations

import errno
import json

import pytest

from statekeeper.node import fatal
from statekeeper.node.config import Limits
from statekeeper.node.errors import OpError, status_for
from statekeeper.node.ops.core import INTERNAL_OPS, OPS, validate_op
from statekeeper.node.ops.spec import OpSpec
from statekeeper.node.quota.alarm import (
    AMPLIFICATION,
    FREE_READING_MAX_AGE,
    GROWING_OPS,
    MIB,
    Sample,
    StorageQuota,
    default_reserve,
    grows,
)
from statekeeper.node.quota.disk_watch import dir_bytes

GIB = 1024 * MIB


def quota(q=100 * MIB, reserve=10 * MIB, usage=0, free=GIB, total=2 * GIB) -> StorageQuota:
    sq = StorageQuota(q, reserve)
    sq.sample(Sample(usage, free, total))
    return sq


# What quota.py's two hand-kept lists said before the OpSpecs declared `grows` (issue 29).
WERE_GROWING = {
    "put", "cas", "append", "merge", "lease_grant", "lock_acquire", "retention_set",
    "archive_restore", "auth_token_create",
}  # fmt: skip
WERE_SHRINKING = {
    "delete", "compact", "lease_keepalive", "lease_revoke", "lease_expire", "gc",
    "lock_release", "retention_delete", "truncate_stream", "archive_seal", "auth_token_revoke",
}  # fmt: skip


def test_every_write_op_is_classified_as_before():
    specs = {**OPS, **INTERNAL_OPS}
    for name, spec in specs.items():
        assert type(spec.grows) is bool, name
        assert spec.write or not spec.grows, f"read op {name} grows"
    writes = {name for name, spec in specs.items() if spec.write}
    assert {n for n in writes if specs[n].grows} == WERE_GROWING == GROWING_OPS
    # txn: neither; its branches decide (test_txn_grows_only_with_a_growing_branch_op).
    assert {n for n in writes if not specs[n].grows} == WERE_SHRINKING | {"txn"}


def test_a_write_grows_unless_it_says_otherwise():
    assert OpSpec("w", (), "", write=True).grows is True  # the safe default
    assert OpSpec("w", (), "", write=True, grows=False).grows is False
    assert OpSpec("r", (), "", write=False).grows is False
    with pytest.raises(ValueError, match="cannot grow"):
        OpSpec("r", (), "", write=False, grows=True)


def test_token_creation_counts_against_the_quota():
    # Issue 27 item 7: 40 fat tokens were accepted while NOSPACE refused puts.
    assert grows({"op": "auth_token_create"})
    assert not grows({"op": "auth_token_revoke"})
    sq = quota(q=10 * MIB, usage=10 * MIB)
    with pytest.raises(OpError) as ei:
        sq.check("n1", [{"op": "auth_token_create"}], 4096, lambda: GIB)
    assert ei.value.code == "insufficient_storage"


def test_txn_grows_only_with_a_growing_branch_op():
    deletes = validate_op(
        {"op": "txn", "success": [{"op": "delete", "key": "a"}], "failure": []}, Limits()
    )
    puts = validate_op(
        {"op": "txn", "success": [], "failure": [{"op": "put", "key": "a", "value": b"x"}]},
        Limits(),
    )
    assert not grows(deletes)
    assert grows(puts)
    assert grows({"op": "put"}) and not grows({"op": "delete"}) and not grows({"op": "compact"})


def test_admits_until_the_quota_then_raises_the_alarm():
    sq = quota(q=10 * MIB, usage=2 * MIB)
    raised: list[str] = []
    sq.on_raise = raised.append
    # Each 1 MiB write costs AMPLIFICATION MiB until the next measurement.
    admitted = 0
    while sq.admit(MIB, growing=True) is None:
        admitted += 1
    assert admitted == (10 - 2) // AMPLIFICATION
    assert sq.alarm is not None and "quota" in sq.alarm
    assert sq.refused == 1 and sq.alarms_raised == 1
    # Under the alarm a small growing write is refused too; a shrinking one passes.
    assert sq.admit(1, growing=True) is not None
    assert sq.admit(MIB, growing=False) is None
    assert sq.status()["alarm"] == "nospace"
    assert len(raised) == 1 and "quota" in raised[0]  # once: logged when it goes up


def test_free_disk_under_the_reserve_refuses_even_under_the_quota():
    sq = quota(q=GIB, reserve=10 * MIB, usage=0, free=13 * MIB)
    assert sq.admit(MIB, growing=True) is None  # 13 - 2 = 11 MiB left
    # Someone else filled the disk: the fresh statvfs says so at once.
    reason = sq.admit(MIB, growing=True, free_now=11 * MIB)
    assert reason is not None and "disk almost full" in reason


def test_nodes_sharing_the_filesystem_multiply_the_cost_against_free_space():
    sq = StorageQuota(GIB, 10 * MIB)
    sq.sample(Sample(0, 20 * MIB, GIB, sharing=3))
    assert sq.admit(MIB, growing=True) is None  # 20 - 3 * 2 = 14 MiB left
    assert sq.admit(MIB, growing=True) is not None  # 20 - 3 * 4 = 8 MiB: under the reserve


def test_quota_in_force_is_capped_by_the_disk():
    sq = quota(q=GIB, reserve=10 * MIB, usage=5 * MIB, free=45 * MIB)
    assert sq.quota_bytes == 40 * MIB
    sq = quota(q=20 * MIB, reserve=10 * MIB, usage=5 * MIB, free=45 * MIB)
    assert sq.quota_bytes == 20 * MIB


def test_default_reserve():
    assert default_reserve(48 * MIB) == 12 * MIB  # at most a quarter of a small disk
    assert default_reserve(GIB) == 64 * MIB
    assert default_reserve(10 * GIB) == 512 * MIB
    sq = StorageQuota(GIB, 0)
    sq.sample(Sample(0, 5 * GIB, 10 * GIB))
    assert sq.reserve_bytes == 512 * MIB


def test_alarm_clears_with_hysteresis():
    sq = quota(q=20 * MIB, usage=19 * MIB)
    assert sq.admit(MIB, growing=True) is not None
    # Back under the quota, but without room for a 1 MiB write (the margin): still raised.
    sq.sample(Sample(19 * MIB - 1, GIB, 2 * GIB))
    assert sq.alarm is not None
    sq.sample(Sample(18 * MIB + MIB // 2, GIB, 2 * GIB))
    assert sq.alarm is not None and sq.tight
    sq.sample(Sample(18 * MIB, GIB, 2 * GIB))
    assert sq.alarm is None
    assert sq.admit(MIB, growing=True) is None  # what cleared it fits


def test_measurement_raises_the_alarm_by_itself():
    sq = quota(q=20 * MIB, usage=1 * MIB)
    sq.sample(Sample(21 * MIB, GIB, 2 * GIB))
    assert sq.alarm is not None
    sq = quota(q=GIB, reserve=10 * MIB)
    sq.sample(Sample(MIB, 9 * MIB, 2 * GIB))
    assert sq.alarm is not None and "disk almost full" in sq.alarm


def test_never_measured_refuses_nothing():
    sq = StorageQuota(MIB, 0)
    assert sq.admit(10 * MIB, growing=True) is None


def test_check_raises_507_insufficient_storage():
    sq = quota(q=2 * MIB)
    with pytest.raises(OpError) as e:
        sq.check("node-0", [{"op": "put"}], 2 * MIB, lambda: None)
    assert e.value.code == "insufficient_storage" and e.value.status == 507
    assert status_for("insufficient_storage") == 507
    assert "this attempt was not proposed" in e.value.message
    sq.check("node-0", [{"op": "delete"}, {"op": "compact"}], 2 * MIB, lambda: 1 / 0)


def test_is_disk_full():
    assert fatal.is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    try:
        try:
            raise OSError(errno.ENOSPC, "full")
        except OSError as inner:
            raise RuntimeError("RocksDB write failed") from inner
    except RuntimeError as outer:
        assert fatal.is_disk_full(outer)
    rocks = Exception("IO error: No space left on device: While appending to file: 000012.log")
    assert fatal.is_disk_full(rocks)
    assert not fatal.is_disk_full(OSError(errno.EIO, "Input/output error"))
    assert not fatal.is_disk_full(None)


def test_report_round_trip(tmp_path, monkeypatch):
    fatal.report_to(tmp_path)
    try:
        fatal._write_report("the disk is full", 70, True, 123)
        assert json.loads((tmp_path / fatal.REPORT_NAME).read_text())["free_bytes"] == 123
        report = fatal.take_report(tmp_path)
        assert report["disk_full"] and report["exit_code"] == 70
        assert not (tmp_path / fatal.REPORT_NAME).exists()
        assert fatal.take_report(tmp_path) is None
    finally:
        fatal.report_to(None)


def test_dir_bytes(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_bytes(b"x" * 100_000)
    (tmp_path / "g").write_bytes(b"y" * 5000)
    assert 105_000 <= dir_bytes(tmp_path) <= 105_000 + 2 * 4096
    assert dir_bytes(tmp_path / "missing") == 0


def test_fresh_free_space_counts_only_writes_still_in_flight():
    put = [{"op": "put"}]
    answered, waiting = quota(q=GIB, reserve=10 * MIB), quota(q=GIB, reserve=10 * MIB)
    for sq in (answered, waiting):
        assert sq.check("n", put, MIB, lambda: 20 * MIB) == MIB
    answered.release(MIB)  # on disk now: the fresh statvfs shows it
    assert answered.admit(MIB, growing=True, free_now=13 * MIB) is None  # 13 - 2
    assert waiting.admit(MIB, growing=True, free_now=13 * MIB) is not None  # 13 - 2 - 2
    assert waiting.check("n", [{"op": "delete"}], MIB, lambda: 0) == 0


def test_disk_watch_counts_nodes_sharing_the_filesystem(tmp_path):
    from statekeeper.node.quota.disk_watch import DiskWatch

    dirs = [tmp_path / f"node-{i}" for i in range(3)]
    dirs[0].mkdir()
    dirs[1].mkdir()  # node-2's dir does not exist here (another machine)
    watch = DiskWatch(StorageQuota(GIB), dirs[0], 1.0)
    watch.others = dirs[1:]
    watch.measure()
    assert watch.quota.sharing == 2 and watch.quota.free_bytes > 0


def test_disk_watch_reclaims_once_per_compaction_while_tight(tmp_path):
    import asyncio

    from statekeeper.node.quota.disk_watch import DiskWatch

    (tmp_path / "data").write_bytes(b"x" * 10_000)
    compact_rev, calls = [0], []
    sq = StorageQuota(GIB, reserve_bytes=1)
    watch = DiskWatch(sq, tmp_path, 0.01, lambda: compact_rev[0], lambda: calls.append(1))

    async def scenario():
        task = asyncio.create_task(watch.run())
        await asyncio.sleep(0.1)
        assert calls == []  # not tight: nothing to do
        sq.configured_quota = 1  # every measurement now finds the quota exceeded
        await asyncio.sleep(0.1)
        assert calls == [] and sq.tight  # tight, but nobody compacted
        compact_rev[0] = 7
        for _ in range(500):  # generous: the reclaim runs in a worker thread
            if calls:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # more measurements, still tight, same compaction
        task.cancel()

    asyncio.run(scenario())
    assert calls == [1]  # once for compaction 7, not once per measurement


def test_client_maps_507_to_insufficient_storage_and_does_not_retry_it():
    from statekeeper.client.errors import InsufficientStorage, error_class

    assert error_class("insufficient_storage", 507) is InsufficientStorage
    assert error_class(None, 507) is InsufficientStorage
    assert not InsufficientStorage("full", code="insufficient_storage", status=507).retryable


def test_a_peers_alarm_refuses_growing_writes_here_too():
    sq = quota(q=GIB)
    sq.peer_alarms = {"node-2": "disk almost full: 3.0 MiB would be free"}
    reason = sq.admit(MIB, growing=True, free_now=GIB)
    assert reason is not None and reason.startswith("node-2 is out of space")
    assert sq.admit(MIB, growing=False) is None  # deletes, compaction pass
    assert sq.alarm is None and sq.status()["peer_alarms"] == sq.peer_alarms
    sq.peer_alarms = {}
    assert sq.admit(MIB, growing=True, free_now=GIB) is None


def test_a_recent_statvfs_serves_later_writes_and_counts_what_they_admitted():
    """check takes a statvfs at most every FREE_READING_MAX_AGE (issue 28). A write judged
    by an older reading also counts the bytes admitted since it: the second 1 MiB put sees
    13 - 2 (first put) - 2 (itself) = 9 MiB, under the 10 MiB reserve, as a fresh statvfs
    that does not show the first put yet would have said."""
    now, reads = [100.0], []

    def statvfs() -> int:
        reads.append(now[0])
        return 13 * MIB

    sq = StorageQuota(GIB, 10 * MIB, clock=lambda: now[0])
    sq.sample(Sample(0, GIB, 2 * GIB))
    put = [{"op": "put"}]
    assert sq.check("n", put, MIB, statvfs) == MIB
    sq.release(MIB)  # answered: on disk, but the 13 MiB reading predates it
    with pytest.raises(OpError) as refused:
        sq.check("n", put, MIB, statvfs)
    assert refused.value.code == "insufficient_storage" and reads == [100.0]
    sq.alarm = None
    now[0] += FREE_READING_MAX_AGE * 1.5  # a new reading shows the released put on disk
    assert sq.check("n", put, MIB, statvfs) == MIB and reads == [100.0, now[0]]
    assert sq.check("n", [{"op": "delete"}], MIB, statvfs) == 0 and len(reads) == 2
