"""Snapshot chunk offsets (node/raft/install.py) and the sweep of peers that never
authenticate (node/raft/peers.py): their pure parts, no network."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from node.raft import peers
from node.raft.install import CHUNK_OFFSET, ChunkOffsets


def _chunks(sizes: list[int]) -> list[dict]:
    out = [{"type": "append_entries", "serialized": (b"x" * n, i == 0, False)} for i, n in enumerate(sizes)]
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
