"""Snapshot chunk offsets and the sync of a snapshot while it arrives (node/raft/install.py),
and the sweep of peers that never authenticate (node/raft/peers.py): no network."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statekeeper.node.raft import install, peers
from statekeeper.node.raft.install import CHUNK_OFFSET, ChunkOffsets, SyncBehind


def _chunks(sizes: list[int]) -> list[dict]:
    out = [
        {"type": "append_entries", "serialized": (b"x" * n, i == 0, False)}
        for i, n in enumerate(sizes)
    ]
    out.append({"type": "append_entries", "serialized": (b"", False, True)})
    return out


@given(st.lists(st.integers(1, 50), min_size=1, max_size=20))
def test_every_chunk_delivered_is_in_order(sizes: list[int]) -> None:
    leader, follower = ChunkOffsets(), ChunkOffsets()
    for m in _chunks(sizes):
        leader.stamp("f", m)
        assert follower.in_order(m)
    assert m[CHUNK_OFFSET] == sum(sizes)


@given(st.lists(st.integers(1, 50), min_size=3, max_size=20), st.data())
def test_a_lost_chunk_breaks_the_transfer_until_it_starts_again(sizes, data) -> None:
    leader, follower = ChunkOffsets(), ChunkOffsets()
    chunks = _chunks(sizes)
    lost = data.draw(st.integers(1, len(chunks) - 2))
    verdicts = []
    for i, m in enumerate(chunks):
        leader.stamp("f", m)  # sent, or lost with a dropped connection
        if i != lost:
            verdicts.append(follower.in_order(m))
    assert verdicts[:lost] == [True] * lost and not any(verdicts[lost:])
    for m in _chunks(sizes):  # the leader sends the snapshot again, from its start
        leader.stamp("f", m)
        assert follower.in_order(m)


def test_offsets_are_per_follower_and_unstamped_chunks_pass() -> None:
    leader = ChunkOffsets()
    a, b = _chunks([5, 5]), _chunks([7])
    leader.stamp("a", a[0])
    leader.stamp("b", b[0])
    leader.stamp("a", a[1])
    assert (a[1][CHUNK_OFFSET], b[0][CHUNK_OFFSET]) == (5, 0)
    assert ChunkOffsets().in_order({"serialized": (b"x", False, False)})  # no offset: as before
    heartbeat = {"type": "append_entries", "serialized": None}
    leader.stamp("a", heartbeat)
    assert CHUNK_OFFSET not in heartbeat


class _Conn:
    def __init__(self) -> None:
        self.closed = False
        self._TcpConnection__readBuffer = b""

    def disconnect(self) -> None:
        self.closed = True


class _Encryptor:
    def __init__(self) -> None:
        self.rejected = 0

    def reject(self, why: str) -> None:
        self.rejected += 1


class _Node(peers.UnauthenticatedSweepMixin):
    def __init__(self, conn: _Conn) -> None:
        self._init_sweep()
        self._SyncObj__transport = type("T", (), {"_unknownConnections": {conn}})()
        self._sk_encryptor = _Encryptor()


def _sweep_at(node: _Node, t: float, monkeypatch) -> None:
    monkeypatch.setattr(peers.time, "monotonic", lambda: t)
    node._sweep_unauthenticated()


def test_a_loop_stall_does_not_drop_a_peer_whose_message_waits_to_be_read(monkeypatch) -> None:
    conn = _Conn()
    node = _Node(conn)
    _sweep_at(node, 100.0, monkeypatch)
    _sweep_at(node, 103.0, monkeypatch)  # the loop was busy for 3 s: the sweep runs first
    assert not conn.closed and node._sk_encryptor.rejected == 0


def test_a_peer_that_never_authenticates_is_dropped(monkeypatch) -> None:
    conn = _Conn()
    node = _Node(conn)
    for i in range(12):  # 2.2 s of sweeps, 0.2 s apart
        _sweep_at(node, 100.0 + 0.2 * i, monkeypatch)
    assert conn.closed and node._sk_encryptor.rejected == 1


def test_a_flood_of_unauthenticated_bytes_is_dropped_at_once(monkeypatch) -> None:
    conn = _Conn()
    conn._TcpConnection__readBuffer = b"x" * (peers.MAX_UNAUTHENTICATED_BYTES + 1)
    node = _Node(conn)
    _sweep_at(node, 100.0, monkeypatch)
    assert conn.closed


# -- SyncBehind: a received snapshot synced while it arrives ------------------------------


class _Jobs:
    """SyncBehind's thread starter, held until run()."""

    def __init__(self) -> None:
        self.pending: list = []

    def __call__(self, work) -> None:
        self.pending.append(work)

    def run(self) -> None:
        while self.pending:
            self.pending.pop(0)()


def _arrives(f, data: bytes, behind: SyncBehind) -> None:
    """One chunk as pysyncobj writes it, then handed to the sync."""
    f.write(data)
    behind.received(f)


def test_a_sync_starts_every_so_many_bytes_one_at_a_time(tmp_path) -> None:
    jobs = _Jobs()
    behind = SyncBehind(every=100, start=jobs)
    with open(tmp_path / "incoming", "wb") as f:
        _arrives(f, b"x" * 99, behind)
        assert behind.syncs == 0
        _arrives(f, b"x", behind)
        assert behind.syncs == 1 and len(jobs.pending) == 1
        _arrives(f, b"x" * 300, behind)  # the first sync is still running: no second one
        assert behind.syncs == 1
        jobs.run()
        behind.received(f)
        assert behind.syncs == 2
        jobs.run()
    behind.finish()


def test_a_new_transfer_counts_from_its_start(tmp_path) -> None:
    jobs = _Jobs()
    behind = SyncBehind(every=100, start=jobs)
    with open(tmp_path / "a", "wb") as f:
        _arrives(f, b"x" * 150, behind)
        jobs.run()
    with open(tmp_path / "b", "wb") as f:  # the leader started again
        _arrives(f, b"x" * 100, behind)
        jobs.run()
    assert behind.syncs == 2


def test_the_sync_runs_on_its_own_descriptor_after_the_file_is_closed(tmp_path) -> None:
    jobs = _Jobs()
    behind = SyncBehind(every=10, start=jobs)
    with open(tmp_path / "incoming", "wb") as f:
        _arrives(f, b"y" * 10, behind)
    jobs.run()  # pysyncobj closed (and renamed) its file meanwhile
    behind.finish()
    assert (tmp_path / "incoming").read_bytes() == b"y" * 10  # flushed before the sync


def test_a_failed_sync_fails_the_install(tmp_path, monkeypatch) -> None:
    def eio(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(install.os, "fdatasync", eio)
    jobs = _Jobs()
    behind = SyncBehind(every=10, start=jobs)
    with open(tmp_path / "incoming", "wb") as f:
        _arrives(f, b"z" * 10, behind)
    jobs.run()
    with pytest.raises(OSError, match="syncing the snapshot being received failed"):
        behind.finish()
    behind.finish()  # reported once, to the install that was to claim it durable


def test_a_real_helper_thread_syncs_and_finish_waits_for_it(tmp_path) -> None:
    behind = SyncBehind(every=1024)
    with open(tmp_path / "incoming", "wb") as f:
        for _ in range(8):
            _arrives(f, b"r" * 1024, behind)
    behind.finish()
    assert behind.syncs >= 1


class _Serializer:
    def __init__(self, f) -> None:
        self._Serializer__incomingTransmissionFile = f


class _Pysyncobj:
    """What SnapshotInstallMixin reaches of pysyncobj for a chunk: its handler writes the
    chunk to the incoming file and, after the last one, closes the file and renames it into
    place (Serializer.setTransmissionData)."""

    raftCommitIndex = 0
    raftCurrentTerm = 7

    def _SyncObj__onMessageReceived(self, node, message) -> None:
        serializer = self._SyncObj__serializer
        incoming = serializer._Serializer__incomingTransmissionFile
        if incoming is None:
            return  # pysyncobj takes no chunk then
        data, _first, last = message["serialized"]
        incoming.write(data)
        if last:
            incoming.close()
            serializer._Serializer__incomingTransmissionFile = None
            os.rename(incoming.name, incoming.name + ".installed")


class _Follower(install.SnapshotInstallMixin, _Pysyncobj):
    def __init__(self, f, behind: SyncBehind) -> None:
        self._init_install(lambda: False, behind)
        self._SyncObj__serializer = _Serializer(f)
        self.acks: list = []
        self._SyncObj__transport = type("T", (), {"send": lambda _, n, m: self.acks.append(m)})()


def test_each_chunk_received_is_handed_to_the_sync(tmp_path) -> None:
    jobs = _Jobs()
    behind = SyncBehind(every=100, start=jobs)
    with open(tmp_path / "incoming", "wb") as f:
        follower = _Follower(f, behind)
        for i in range(3):
            follower._on_append_entries("leader", {"serialized": (b"c" * 60, i == 0, False)})
        assert behind.syncs == 1 and len(follower.acks) == 3
    jobs.run()
    behind.finish()


def test_a_chunk_ack_carries_the_followers_term(tmp_path) -> None:
    """The leader counts an ack of its own term as contact (check-quorum, issue 26)."""
    with open(tmp_path / "incoming", "wb") as f:
        follower = _Follower(f, SyncBehind())
        follower._on_append_entries("leader", {"serialized": (b"c", True, False)})
    assert follower.acks == [{"type": install.SNAPSHOT_CHUNK_ACK, "term": 7}]


def _record_syncs_and_renames(monkeypatch) -> list[tuple[str, str]]:
    events: list[tuple[str, str]] = []

    def recording(name: str, real):
        def call(*args):
            path = args[0] if name == "rename" else os.readlink(f"/proc/self/fd/{args[0]}")
            events.append((name, os.path.basename(path)))
            return real(*args)

        return call

    for name in ("fsync", "fdatasync", "rename"):
        monkeypatch.setattr(os, name, recording(name, getattr(os, name)))
    return events


def test_a_received_snapshot_is_synced_before_it_is_renamed_into_place(tmp_path, monkeypatch):
    """pysyncobj renames the received file over snapshot.bin after the last chunk; the sync
    came only after, at the load: a power cut in between (LazyFS) left snapshot.bin empty,
    and the node failed at every start (issue 26, defect 6)."""
    events = _record_syncs_and_renames(monkeypatch)
    f = open(tmp_path / "incoming", "wb")
    follower = _Follower(f, SyncBehind(every=1 << 30))
    follower._on_append_entries("leader", {"serialized": (b"s" * 300, True, False)})
    follower._on_append_entries("leader", {"serialized": (b"", False, True)})
    assert ("rename", "incoming") in events, events
    synced = [e for e in events if e[1] == "incoming" and e[0] != "rename"]
    assert synced and events.index(synced[-1]) < events.index(("rename", "incoming")), (
        f"renamed into place before it was synced: {events}"
    )
    assert (tmp_path / "incoming.installed").read_bytes() == b"s" * 300


def test_a_received_snapshot_that_cannot_be_synced_is_not_installed(tmp_path, monkeypatch):
    """The leader sends it again; what the node had stays in place."""

    def eio(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", eio)
    f = open(tmp_path / "incoming", "wb")
    follower = _Follower(f, SyncBehind(every=1 << 30))
    follower._on_append_entries("leader", {"serialized": (b"s" * 300, True, False)})
    follower._on_append_entries("leader", {"serialized": (b"", False, True)})
    assert f.closed and not (tmp_path / "incoming.installed").exists()
