"""DurableJournal: the raft log pysyncobj writes through (node/raft/journal.py)."""

from __future__ import annotations

import errno
import logging
import os
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekeeper.node import failpoints
from statekeeper.node.raft.journal import (
    FSYNC_MODES,
    LOG_MAGIC,
    DurableJournal,
    JournalCorruptError,
    JournalFailedError,
)

REPO = Path(__file__).resolve().parents[2]


class FsyncRecorder:
    """A fake fsync_fn: records which file each call was for (and calls nothing)."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def __call__(self, fd: int) -> None:
        self.paths.append(os.readlink(f"/proc/self/fd/{fd}"))

    @property
    def count(self) -> int:
        return len(self.paths)


class Boom(Exception):
    """What the fake fatal handler raises instead of exiting."""


class FatalRecorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, BaseException]] = []

    def __call__(self, msg: str, exc: BaseException):
        self.calls.append((msg, exc))
        raise Boom(msg)


def crash(j: DurableJournal) -> None:
    """Abandon a journal like a killed process would: buffered records are lost."""
    j._closed = True
    j._close_fds()


def entry(i: int, term: int = 1, size: int = 10) -> tuple[bytes, int, int]:
    return (bytes([i % 256]) * size, i, term)


def read_records(path: Path) -> list[tuple[bytes, int, int]]:
    """An independent reader of the documented on-disk format."""
    data = path.read_bytes()
    assert data[:8] == LOG_MAGIC
    pos, out = 8, []
    while pos < len(data):
        length, crc = struct.unpack_from("<II", data, pos)
        payload = data[pos + 8 : pos + 8 + length]
        assert len(payload) == length and zlib.crc32(payload) == crc
        cmd, idx, term = msgpack.unpackb(payload)
        out.append((cmd, idx, term))
        pos += 8 + length
    return out


@pytest.fixture
def jpath(tmp_path: Path) -> Path:
    return tmp_path / "journal.log"


@pytest.fixture
def fs() -> FsyncRecorder:
    return FsyncRecorder()


def open_j(path: Path, fs: FsyncRecorder | None = None, **kw) -> DurableJournal:
    kw.setdefault("fsync_fn", fs or FsyncRecorder())
    return DurableJournal(str(path), **kw)


# -- basics ----------------------------------------------------------------------------------


def test_fresh_journal_is_empty_with_defaults(jpath: Path) -> None:
    with open_j(jpath) as j:
        assert len(j) == 0 and j[:] == []
        assert j.getCurrentTerm() == 0
        assert j.getVotedForNodeId() is None
        assert j.getRaftCommitIndex() == 1
        assert not j.dirty
    assert jpath.read_bytes() == LOG_MAGIC


def test_round_trip(jpath: Path) -> None:
    entries = [entry(i, term=1 + i // 4, size=i * 7) for i in range(1, 20)]
    with open_j(jpath) as j:
        for e in entries:
            j.add(*e)
        j.setCurrentTerm(5, "127.0.0.1:4321")
        j.setRaftCommitIndex(12)
        assert j[:] == entries
    with open_j(jpath) as j:
        assert j[:] == entries
        assert all(type(e) is tuple and type(e[0]) is bytes for e in j[:])
        assert j[0] == entries[0] and j[-1] == entries[-1]
        assert j.getCurrentTerm() == 5
        assert j.getVotedForNodeId() == "127.0.0.1:4321"
        assert j.getRaftCommitIndex() == 12
    assert read_records(jpath) == entries


def test_vote_none_and_term_changes_round_trip(jpath: Path) -> None:
    with open_j(jpath) as j:
        j.setCurrentTerm(2, "a:1")
        j.setCurrentTerm(3, None)
    with open_j(jpath) as j:
        assert (j.getCurrentTerm(), j.getVotedForNodeId()) == (3, None)


def test_positions_semantics_and_slices(jpath: Path) -> None:
    model = [entry(i) for i in range(10, 20)]  # raft indexes 10..19, positions 0..9
    with open_j(jpath) as j:
        for e in model:
            j.add(*e)
        assert j[2:5] == model[2:5] and j[-3:] == model[-3:] and j[-1] == model[-1]
        assert j[3:] == model[3:] and j[:] == model and j[5:2] == []
        with pytest.raises(IndexError):
            j[10]
        j.deleteEntriesFrom(7)  # positions >= 7 go: raft indexes 17..19
        del model[7:]
        assert j[:] == model and j[-1][1] == 16
        j.deleteEntriesTo(3)  # positions < 3 go: raft indexes 10..12
        model = model[3:]
        assert j[:] == model and j[0][1] == 13
        j.deleteEntriesFrom(-1)  # list semantics for negative positions
        del model[-1:]
        j.deleteEntriesTo(-2)
        model = model[-2:]
        assert j[:] == model
        j.deleteEntriesFrom(100)  # beyond the end: nothing
        j.deleteEntriesTo(0)
        assert j[:] == model
    with open_j(jpath) as j:
        assert j[:] == model


def test_add_converts_and_checks_types(jpath: Path) -> None:
    with open_j(jpath) as j:
        j.add("text", 1, 1)
        j.add(bytearray(b"ba"), 2, 1)
        with pytest.raises(TypeError):
            j.add(b"x", 3.0, 1)
        with pytest.raises(TypeError):
            j.add(123, 3, 1)
        assert j[:] == [(b"text", 1, 1), (b"ba", 2, 1)]
    with open_j(jpath) as j:
        assert j[:] == [(b"text", 1, 1), (b"ba", 2, 1)]


def test_bad_fsync_mode_rejected(jpath: Path) -> None:
    assert FSYNC_MODES == ("always", "never")
    with pytest.raises(ValueError):
        DurableJournal(str(jpath), fsync="sometimes")


# -- model check -------------------------------------------------------------------------------

OPS = st.one_of(
    st.tuples(st.just("add"), st.integers(1, 4), st.integers(0, 300), st.integers(1, 3)),
    st.tuples(st.just("add"), st.integers(1, 4), st.integers(0, 300), st.integers(1, 3)),
    st.tuples(st.just("sync")),
    st.tuples(st.just("flush")),
    st.tuples(st.just("timer")),
    st.tuples(st.just("from"), st.integers(0, 12)),
    st.tuples(st.just("to"), st.integers(0, 12)),
    st.tuples(st.just("clear")),
    st.tuples(st.just("reopen")),
    st.tuples(st.just("crash")),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, max_size=50))
def test_matches_list_model(ops: list[tuple]) -> None:
    """Random add/delete/clear/sync/reopen/crash sequences against a plain list.

    `disk` models what survives a crash: always a prefix of memory; sync/flush/timer write
    everything, deletes are durable when they return, add() writes nothing."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "j.log"
        j = open_j(path)
        mem: list[tuple[bytes, int, int]] = []
        disk: list[tuple[bytes, int, int]] = []
        try:
            for op in ops:
                kind = op[0]
                if kind == "add":
                    for _ in range(op[1]):
                        idx = mem[-1][1] + 1 if mem else 1
                        e = (os.urandom(op[2]), idx, op[3])
                        j.add(*e)
                        mem.append(e)
                elif kind in ("sync", "flush", "timer"):
                    {"sync": j.sync, "flush": j.flush, "timer": j.onOneSecondTimer}[kind]()
                    disk = list(mem)
                elif kind == "from":
                    j.deleteEntriesFrom(op[1])
                    del mem[op[1] :]
                    del disk[op[1] :]
                elif kind == "to":
                    j.deleteEntriesTo(op[1])
                    if op[1] > 0:
                        mem = mem[op[1] :]
                        disk = list(mem)
                elif kind == "clear":
                    j.clear()
                    mem, disk = [], []
                elif kind == "reopen":
                    j._destroy()
                    j = open_j(path)
                    disk = list(mem)
                elif kind == "crash":
                    crash(j)
                    j = open_j(path)
                    mem = list(disk)
                assert len(j) == len(mem)
                assert j[:] == mem
                assert j[1:3] == mem[1:3] and j[-2:] == mem[-2:]
                if mem:
                    assert j[0] == mem[0] and j[-1] == mem[-1]
            crash(j)
            j = open_j(path)
            assert j[:] == disk
        finally:
            j._destroy()


# -- torn / corrupt tails ----------------------------------------------------------------------


def _five(jpath: Path) -> tuple[list, list[int]]:
    """Write 5 entries; return them and each record's file offset."""
    entries = [entry(i, size=40) for i in range(1, 6)]
    with open_j(jpath) as j:
        for e in entries:
            j.add(*e)
        offsets = list(j._offsets)
    return entries, offsets


def _cut_mid_record(data: bytes, offs: list[int]) -> bytes:
    return data[: offs[4] + 20]


def _cut_mid_header(data: bytes, offs: list[int]) -> bytes:
    return data[: offs[4] + 3]


def _flip_last_payload_byte(data: bytes, offs: list[int]) -> bytes:
    b = bytearray(data)
    b[-1] ^= 0xFF
    return bytes(b)


def _flip_length_field(data: bytes, offs: list[int]) -> bytes:
    b = bytearray(data)
    b[offs[4] + 1] ^= 0x40  # the length now points past the end of the file
    return bytes(b)


def _valid_crc_not_msgpack(data: bytes, offs: list[int]) -> bytes:
    payload = b"\xc1garbage"  # 0xc1 is never valid msgpack
    rec = struct.pack("<II", len(payload), zlib.crc32(payload)) + payload
    return data[: offs[4]] + rec


def _wrong_shape(data: bytes, offs: list[int]) -> bytes:
    payload = msgpack.packb(["str command", 5, 1])  # str, not bin
    rec = struct.pack("<II", len(payload), zlib.crc32(payload)) + payload
    return data[: offs[4]] + rec


def _zero_length_record(data: bytes, offs: list[int]) -> bytes:
    return data[: offs[4]] + b"\0" * 64  # e.g. zero-filled blocks after a crash


@pytest.mark.parametrize(
    "damage",
    [
        _cut_mid_record,
        _cut_mid_header,
        _flip_last_payload_byte,
        _flip_length_field,
        _valid_crc_not_msgpack,
        _wrong_shape,
        _zero_length_record,
    ],
)
def test_torn_last_record_is_dropped(jpath: Path, damage, caplog: pytest.LogCaptureFixture) -> None:
    entries, offs = _five(jpath)
    jpath.write_bytes(damage(jpath.read_bytes(), offs))
    dropped = jpath.stat().st_size - offs[4]
    with caplog.at_level(logging.WARNING, logger="statekeeper.journal"):
        j = open_j(jpath)
    assert j[:] == entries[:4]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert f"offset {offs[4]}" in warnings[0] and f"dropping {dropped} bytes" in warnings[0]
    assert jpath.stat().st_size == offs[4]  # truncated at the bad record
    # The journal keeps working from the valid prefix.
    j.add(*entry(5, term=2))
    j.add(*entry(6, term=2))
    j.sync()
    crash(j)
    with open_j(jpath) as j:
        assert j[:] == entries[:4] + [entry(5, term=2), entry(6, term=2)]


def test_garbage_appended_is_dropped(jpath: Path, caplog: pytest.LogCaptureFixture) -> None:
    entries, _ = _five(jpath)
    size = jpath.stat().st_size
    with jpath.open("ab") as f:
        f.write(os.urandom(37))
    with caplog.at_level(logging.WARNING, logger="statekeeper.journal"):
        j = open_j(jpath)
    assert j[:] == entries
    assert f"offset {size}" in caplog.text and "dropping 37 bytes" in caplog.text
    j.add(*entry(6))
    j._destroy()
    with open_j(jpath) as j:
        assert j[:] == entries + [entry(6)]


def test_corrupt_middle_record_drops_everything_after_it(jpath: Path, caplog) -> None:
    """Documented choice: stop at the first bad record, even if valid ones follow."""
    entries, offs = _five(jpath)
    data = bytearray(jpath.read_bytes())
    data[offs[2] + 12] ^= 0x01  # inside record 2's payload
    jpath.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="statekeeper.journal"):
        j = open_j(jpath)
    assert j[:] == entries[:2]
    assert f"offset {offs[2]}" in caplog.text and "CRC mismatch" in caplog.text
    assert jpath.stat().st_size == offs[2]
    j._destroy()


def test_torn_header_of_new_file_starts_empty(jpath: Path) -> None:
    jpath.write_bytes(LOG_MAGIC[:3])  # crashed while creating the file
    with open_j(jpath) as j:
        assert len(j) == 0
        j.add(*entry(1))
    with open_j(jpath) as j:
        assert j[:] == [entry(1)]


def test_foreign_file_is_refused_untouched(jpath: Path) -> None:
    foreign = b"PYSYNCOBJ" + b"\0" * 100  # pysyncobj's FileJournal header
    jpath.write_bytes(foreign)
    with pytest.raises(JournalCorruptError):
        open_j(jpath)
    assert jpath.read_bytes() == foreign


# -- fsync accounting ----------------------------------------------------------------------------


def test_add_never_syncs_and_sync_fsyncs_once_when_dirty(
    jpath: Path, fs: FsyncRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[int] = []
    real_pwrite = os.pwrite

    def counting_pwrite(fd: int, data, offset: int) -> int:
        writes.append(len(data))
        return real_pwrite(fd, data, offset)

    j = open_j(jpath, fs)
    fs.paths.clear()
    monkeypatch.setattr(os, "pwrite", counting_pwrite)
    for i in range(1, 11):
        j.add(*entry(i, size=200))
    assert fs.count == 0 and writes == []  # buffered in user space
    assert j.dirty
    j.sync()
    assert fs.paths == [str(jpath)]  # exactly one fdatasync, of the log
    assert len(writes) == 1  # one write for the whole batch
    assert not j.dirty
    j.sync()
    j.sync()
    assert fs.count == 1 and len(writes) == 1  # clean: no syscalls
    j.add(*entry(11))
    j.sync()
    assert fs.count == 2 and len(writes) == 2
    monkeypatch.undo()
    j._destroy()
    assert fs.count == 2  # nothing left to sync at close


def test_set_current_term_is_durable_before_returning(jpath: Path) -> None:
    meta = str(jpath) + ".meta"
    seen: list[tuple[str, bool]] = []

    def fsync(fd: int) -> None:
        # Record what was fsynced and whether the new meta was already renamed into place.
        seen.append((os.readlink(f"/proc/self/fd/{fd}"), os.path.exists(meta)))

    j = open_j(jpath, fsync_fn=fsync)
    seen.clear()
    j.setCurrentTerm(7, "n2:1")
    assert seen == [(meta + ".tmp", False), (str(jpath.parent), True)]
    # Another reader sees it right away.
    with open_j(jpath, fsync="never") as other:
        assert (other.getCurrentTerm(), other.getVotedForNodeId()) == (7, "n2:1")
    j._destroy()


def test_commit_index_is_lazy_and_needs_no_fsync(
    jpath: Path, fs: FsyncRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    j = open_j(jpath, fs)
    for i in range(1, 6):
        j.add(*entry(i))
    j.sync()
    fs.paths.clear()
    writes: list[int] = []
    real_pwrite = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda *a: writes.append(1) or real_pwrite(*a))
    for c in range(1, 5):
        j.setRaftCommitIndex(c)
    assert writes == [] and j.getRaftCommitIndex() == 4
    j.onOneSecondTimer()
    assert len(writes) == 1 and fs.count == 0
    j.onOneSecondTimer()
    assert len(writes) == 1  # unchanged: nothing written
    monkeypatch.undo()
    crash(j)
    with open_j(jpath) as j:
        assert j.getRaftCommitIndex() == 4


def test_commit_index_clamped_to_log_and_torn_commit_file(jpath: Path, caplog) -> None:
    with open_j(jpath) as j:
        for i in range(1, 4):
            j.add(*entry(i))
        j.setRaftCommitIndex(2)
        j.setCurrentTerm(1, None)  # the meta file carries commit 2 as a fallback
        j.setRaftCommitIndex(9)  # more than the log holds (lost tail)
    with caplog.at_level(logging.WARNING, logger="statekeeper.journal"):
        with open_j(jpath) as j:
            assert j.getRaftCommitIndex() == 3
    assert "clamping" in caplog.text
    Path(str(jpath) + ".commit").write_bytes(b"\x01\x02\x03")  # torn
    with open_j(jpath) as j:
        assert j.getRaftCommitIndex() == 2  # from .meta


def test_delete_entries_from_is_durable_and_counted(jpath: Path, fs: FsyncRecorder) -> None:
    j = open_j(jpath, fs)
    for i in range(1, 11):
        j.add(*entry(i))
    j.sync()
    fs.paths.clear()
    j.deleteEntriesFrom(6)  # on disk: ftruncate + fsync before returning
    assert fs.paths == [str(jpath)]
    assert (j.truncations, j.truncated_entries) == (1, 4)
    crash(j)
    j = open_j(jpath, fs)
    assert [e[1] for e in j[:]] == [1, 2, 3, 4, 5, 6]
    fs.paths.clear()
    j.add(*entry(7))
    j.add(*entry(8))
    j.deleteEntriesFrom(7)  # only a buffered record: no syscall at all
    assert fs.count == 0 and (j.truncations, j.truncated_entries) == (1, 1)
    j.deleteEntriesFrom(len(j))  # drops nothing: not counted
    assert j.truncations == 1
    j.sync()
    crash(j)
    with open_j(jpath) as j:
        assert [e[1] for e in j[:]] == [1, 2, 3, 4, 5, 6, 7]


def test_delete_entries_to_rewrites_atomically(jpath: Path, fs: FsyncRecorder) -> None:
    j = open_j(jpath, fs)
    for i in range(1, 11):
        j.add(*entry(i))
    j.sync()
    j.add(*entry(11))  # still buffered: goes into the new file too
    fs.paths.clear()
    j.deleteEntriesTo(4)
    tmp = str(jpath) + ".tmp"
    assert fs.paths == [tmp, str(jpath.parent)]  # new file fsynced before rename, then dir
    assert not os.path.exists(tmp)
    assert [e[1] for e in j[:]] == list(range(5, 12))
    assert read_records(jpath) == j[:]
    j.add(*entry(12))
    j.sync()
    crash(j)
    with open_j(jpath) as j:
        assert [e[1] for e in j[:]] == list(range(5, 13))


def test_stale_rewrite_tmp_is_removed(jpath: Path) -> None:
    with open_j(jpath) as j:
        j.add(*entry(1))
    Path(str(jpath) + ".tmp").write_bytes(b"half a rewrite")
    with open_j(jpath) as j:
        assert j[:] == [entry(1)]
    assert not os.path.exists(str(jpath) + ".tmp")


def test_clear_then_snapshot_entries(jpath: Path) -> None:
    """What pysyncobj does after installing a snapshot: clear() + add(prev) + add(last)."""
    with open_j(jpath) as j:
        for i in range(1, 6):
            j.add(*entry(i))
        j.sync()
        j.clear()
        j.add(*entry(100, term=4))
        j.add(*entry(101, term=4))
    with open_j(jpath) as j:
        assert j[:] == [entry(100, term=4), entry(101, term=4)]


# -- fsync=never -------------------------------------------------------------------------------


def test_never_mode_never_fsyncs_but_reaches_the_file(jpath: Path) -> None:
    def no_fsync(fd: int) -> None:
        raise AssertionError("fsync called in never mode")

    j = DurableJournal(str(jpath), fsync="never", fsync_fn=no_fsync)
    entries = [entry(i, size=200) for i in range(1, 21)]
    for e in entries:
        j.add(*e)
    assert read_records(jpath) == []  # still in user space
    j.sync()
    assert read_records(jpath) == entries  # in the kernel: another handle sees it
    assert not j.dirty
    j.setCurrentTerm(3, "x:1")
    j.deleteEntriesFrom(15)
    j.deleteEntriesTo(5)
    j.setRaftCommitIndex(10)
    j.onOneSecondTimer()
    assert read_records(jpath) == entries[5:15]
    j.clear()
    j._destroy()
    with DurableJournal(str(jpath), fsync="never", fsync_fn=no_fsync) as j:
        assert len(j) == 0 and j.getCurrentTerm() == 3


# -- failures ----------------------------------------------------------------------------------


def test_fsync_failure_is_fatal_and_nothing_after_is_durable(jpath: Path) -> None:
    armed = False

    def fsync(fd: int) -> None:
        if armed:
            raise OSError(errno.EIO, "Input/output error")

    fatal = FatalRecorder()
    j = DurableJournal(str(jpath), fsync_fn=fsync, on_fatal=fatal)
    j.add(*entry(1))
    j.sync()
    armed = True
    j.add(*entry(2))
    with pytest.raises(Boom):
        j.sync()
    assert len(fatal.calls) == 1
    msg, exc = fatal.calls[0]
    assert isinstance(exc, OSError) and exc.errno == errno.EIO and "fdatasync" in msg
    assert j.failed and j.dirty
    armed = False  # a retry would "succeed": it must not be attempted
    with pytest.raises(JournalFailedError):
        j.sync()
    with pytest.raises(JournalFailedError):
        j.add(*entry(3))
    with pytest.raises(JournalFailedError):
        j.setCurrentTerm(9, None)
    with pytest.raises(JournalFailedError):
        j.deleteEntriesFrom(0)
    assert len(fatal.calls) == 1
    j._destroy()  # closes without writing anything more


def test_fatal_handler_that_returns_still_stops_the_caller(jpath: Path) -> None:
    calls = []

    def fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    j = DurableJournal(str(jpath), fsync="never", fsync_fn=fsync)  # never: creation succeeds
    j._always = True  # now sync() wants an fsync
    j._on_fatal = lambda msg, exc: calls.append(msg)
    j.add(*entry(1))
    with pytest.raises(JournalFailedError):
        j.sync()
    assert len(calls) == 1


def test_write_failure_is_fatal(jpath: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fatal = FatalRecorder()
    j = open_j(jpath, on_fatal=fatal)
    j.add(*entry(1))

    def enospc(*a):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", enospc)
    with pytest.raises(Boom):
        j.sync()
    assert fatal.calls[0][1].errno == errno.ENOSPC
    monkeypatch.undo()
    with pytest.raises(JournalFailedError):
        j.sync()


def test_set_current_term_failure_is_fatal(jpath: Path) -> None:
    fs_calls = []

    def fsync(fd: int) -> None:
        fs_calls.append(fd)
        if len(fs_calls) > 2:  # creation does 2 (file + dir)
            raise OSError(errno.EIO, "Input/output error")

    fatal = FatalRecorder()
    j = DurableJournal(str(jpath), fsync_fn=fsync, on_fatal=fatal)
    with pytest.raises(Boom):
        j.setCurrentTerm(4, "n1:1")
    assert "meta" in fatal.calls[0][0]
    assert not os.path.exists(str(jpath) + ".meta")  # never renamed into place


@pytest.fixture
def failpoint():
    """Arm failpoints for one test; whatever the environment said is restored after."""
    yield failpoints.configure
    failpoints.configure()


def test_journal_fsync_failpoint_fails_from_the_nth_fsync(jpath: Path, fs: FsyncRecorder, failpoint) -> None:
    failpoint("journal-fsync=4*error")
    fatal = FatalRecorder()
    j = open_j(jpath, fs, on_fatal=fatal)  # creation: fsyncs 1 and 2 (file, dir)
    j.add(*entry(1))
    j.sync()  # fsync 3
    assert fs.count == 3 and not fatal.calls
    j.add(*entry(2))
    with pytest.raises(Boom):
        j.sync()  # fsync 4 fails before reaching the real fsync_fn
    assert fs.count == 3
    assert fatal.calls[0][1].errno == errno.EIO


def test_failpoints_reject_garbage(failpoint) -> None:
    for bad in ("journal-fsync=soon", "journal-fsync=0*error", "no-such-point=exit", "journal-fsync"):
        with pytest.raises(failpoints.FailpointError):
            failpoint(bad)


def test_default_fatal_handler_exits_71(tmp_path: Path) -> None:
    code = (
        "from statekeeper.node.raft.journal import DurableJournal\n"
        f"j = DurableJournal({str(tmp_path / 'j.log')!r})\n"
        "j.add(b'x', 1, 1)\n"
        "j.sync()\n"
        "print('STILL RUNNING')\n"
    )
    env = dict(os.environ, **{failpoints.ENV: "journal-fsync=3*error"})  # creation's two fsyncs pass, sync()'s fails
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 71, proc.stderr
    assert "STILL RUNNING" not in proc.stdout
    assert "can no longer be trusted" in proc.stderr


def test_corrupt_meta(jpath: Path, caplog: pytest.LogCaptureFixture) -> None:
    with open_j(jpath) as j:
        j.setCurrentTerm(5, "a:1")
    meta = Path(str(jpath) + ".meta")
    data = bytearray(meta.read_bytes())
    data[-1] ^= 0xFF
    meta.write_bytes(bytes(data))
    with pytest.raises(JournalCorruptError):
        open_j(jpath)  # "always": a lost vote could mean voting twice
    with caplog.at_level(logging.ERROR, logger="statekeeper.journal"):
        with open_j(jpath, fsync="never") as j:
            assert j.getCurrentTerm() == 0
    assert "corrupt" in caplog.text


@pytest.mark.parametrize("push", ["flush", "onOneSecondTimer"])
def test_bytes_pushed_without_fsync_are_still_fsynced_by_sync(
    jpath: Path, fs: FsyncRecorder, push: str
) -> None:
    j = open_j(jpath, fs)
    fs.paths.clear()
    j.add(*entry(1))
    getattr(j, push)()  # written to the kernel, not fsynced
    assert fs.count == 0 and read_records(jpath) == [entry(1)]
    assert j.dirty
    j.sync()
    assert fs.paths == [str(jpath)]
    j.sync()
    assert fs.count == 1
    j._destroy()


# -- sync_behind: the leader's fdatasync off the loop (issue 28) ------------------------------


class GatedFsync:
    """A fake fsync_fn: once armed, fdatasyncs of the log wait for `gate` (others, and
    those of the journal's creation, return at once)."""

    def __init__(self, fail: bool = False) -> None:
        import threading

        self.gate = threading.Event()
        self.fail = fail
        self.armed = False
        self.log_syncs = 0

    def __call__(self, fd: int) -> None:
        if self.armed and os.readlink(f"/proc/self/fd/{fd}").endswith("journal.log"):
            self.log_syncs += 1
            assert self.gate.wait(10)
            if self.fail:
                raise OSError(errno.EIO, "injected")


def test_sync_behind_returns_before_the_fdatasync_and_sync_waits_for_it(tmp_path: Path) -> None:
    """The leader's fdatasync used to block the node's loop; now it runs on the journal's
    thread. What it covers is durable only once it returned: sync() (the leader's next
    tick, a follower's answer) waits for it, and a write made meanwhile is synced again."""
    import threading

    fs = GatedFsync()
    j = DurableJournal(str(tmp_path / "journal.log"), fsync_fn=fs)
    fs.armed = True
    j.add(b"a", 1, 1)
    durable = threading.Event()
    j.sync_behind(durable.set)  # returns although the fdatasync waits at the gate
    assert j.syncing_behind and not durable.is_set()
    j.add(b"b", 2, 1)  # appending goes on meanwhile
    synced = threading.Event()
    waiter = threading.Thread(target=lambda: (j.sync(), synced.set()))
    waiter.start()
    assert not synced.wait(0.2)  # sync() waits for the fdatasync in flight
    fs.gate.set()
    assert synced.wait(10) and durable.is_set() and not j.syncing_behind
    waiter.join()
    assert fs.log_syncs == 2  # "b" came after the first fdatasync started: synced again
    j.close()
    assert [e[0] for e in DurableJournal(str(tmp_path / "journal.log"))[:]] == [b"a", b"b"]


def test_a_failed_fdatasync_behind_fails_the_next_sync(tmp_path: Path) -> None:
    """A failure on the journal's thread reaches the fatal handler there, and the next
    sync() raises: the leader's tick never counts entries that fdatasync did not cover."""
    import threading

    fs, fatal = GatedFsync(fail=True), FatalRecorder()
    j = DurableJournal(str(tmp_path / "journal.log"), fsync_fn=fs, on_fatal=fatal)
    fs.armed = True
    j.add(b"a", 1, 1)
    woken = threading.Event()
    j.sync_behind(woken.set)
    fs.gate.set()
    assert woken.wait(10)  # the loop is woken even when it failed
    assert len(fatal.calls) == 1
    with pytest.raises(JournalFailedError):
        j.sync()
    with pytest.raises(JournalFailedError):
        j.add(b"b", 2, 1)


def test_truncation_waits_for_the_fdatasync_behind(tmp_path: Path) -> None:
    """deleteEntriesTo replaces the log file: it must not close the descriptor the
    journal's thread is syncing."""
    import threading

    fs = GatedFsync()
    j = DurableJournal(str(tmp_path / "journal.log"), fsync_fn=fs)
    fs.armed = True
    for i in range(1, 5):
        j.add(b"x%d" % i, i, 1)
    j.sync_behind(lambda: None)
    done = threading.Event()
    t = threading.Thread(target=lambda: (j.deleteEntriesTo(2), done.set()))
    t.start()
    assert not done.wait(0.2)
    fs.gate.set()
    assert done.wait(10)
    t.join()
    assert [e[1] for e in j[:]] == [3, 4]
    j.close()
