"""A leader packing its next snapshot still sends the current one to a follower that
needs it (node/raft/syncobj.py serve_snapshot_while_packing): pysyncobj answered None
while packing, and its AppendEntries loop then spun until the connection timed out
(found by `statekeeper sim run --seed 100004`)."""

from __future__ import annotations

from pysyncobj.config import SERIALIZER_STATE
from pysyncobj.serializer import Serializer

from statekeeper.node.raft.syncobj import serve_snapshot_while_packing


def packing_serializer(path: str) -> Serializer:
    """A Serializer in the state of a pack under way (our serializer callback started a
    helper thread and returned; the checker still says SERIALIZING)."""
    s = Serializer(
        path,
        1 << 20,
        False,
        serializer=lambda _path, _data: None,
        deserializer=lambda _path: None,
        serializeChecker=lambda: SERIALIZER_STATE.SERIALIZING,
    )
    s.serialize(("last", "prev", "members"), 7)
    return s


def idle_serializer(path: str, batch: int = 1 << 20) -> Serializer:
    """A Serializer with no pack under way, sending `batch` bytes per chunk."""
    return Serializer(
        path,
        batch,
        False,
        serializer=lambda _path, _data: None,
        deserializer=lambda _path: None,
        serializeChecker=lambda: SERIALIZER_STATE.NOT_SERIALIZING,
    )


def test_pysyncobj_answers_nothing_while_packing(tmp_path):
    path = tmp_path / "snapshot.bin"
    path.write_bytes(b"the current snapshot")
    assert packing_serializer(str(path)).getTransmissionData("n1") is None  # the defect


def test_the_current_snapshot_is_sent_while_the_next_one_is_packed(tmp_path):
    path = tmp_path / "snapshot.bin"
    path.write_bytes(b"the current snapshot")
    s = packing_serializer(str(path))
    serve_snapshot_while_packing(s)
    first = s.getTransmissionData("n1")
    assert first == (b"the current snapshot", True, False)
    assert s.getTransmissionData("n1") == (b"", False, True)  # the end of the transfer
    # and the pack under way is still under way for pysyncobj's own bookkeeping
    assert s._Serializer__pid != 0


def test_a_snapshot_that_cannot_be_opened_is_reported_once_per_try(tmp_path):
    # pysyncobj answers None and its AppendEntries loop asks again at once, for ever on
    # virtual time (the simulator's spin at seed 200061), ~0.1 s per tick with a logged
    # traceback per pass on a real clock: the hook ends the loop (see the world test)
    s = idle_serializer(str(tmp_path / "snapshot.bin"))
    unreadable = []
    serve_snapshot_while_packing(s, on_unreadable=unreadable.append)
    assert s.getTransmissionData("n1") is None
    assert unreadable == ["n1"]
    (tmp_path / "snapshot.bin").write_bytes(b"a new snapshot")
    assert s.getTransmissionData("n1") == (b"a new snapshot", True, False)
    assert unreadable == ["n1"]


def test_a_read_error_mid_transfer_is_an_unreadable_snapshot_not_a_crash(tmp_path):
    # pysyncobj answers False when reading the open file fails, and its loop then indexes
    # False[2]: a TypeError out of the leader's tick
    path = tmp_path / "snapshot.bin"
    path.write_bytes(b"x" * 10)
    s = idle_serializer(str(path), batch=4)
    unreadable = []
    serve_snapshot_while_packing(s, on_unreadable=unreadable.append)
    assert s.getTransmissionData("n1") == (b"xxxx", True, False)

    class FailingFile:
        def read(self, _n):
            raise OSError(5, "Input/output error")

    s._Serializer__transmissions["n1"]["file"] = FailingFile()
    assert s.getTransmissionData("n1") is None
    assert unreadable == ["n1"]
    assert s.getTransmissionData("n1") == (b"xxxx", True, False)  # the next try starts over
