"""pysyncobj's pickle paths (node/raft/pickle_guard.py) on real raft nodes in this process:
a peer holding the cluster secret, speaking our sealed msgpack wire format, still cannot
make a node unpickle its bytes. Each test here failed before the guard (the marker file
was created, or the leader chunked)."""

from __future__ import annotations

import logging
import os
import pickle
import socket
import struct
import time
import uuid
from pathlib import Path

import pytest

from statekeeper.cluster.ports import free_ports
from statekeeper.node.config import RAFT_ENTRY_LIMIT_BYTES, ClusterConfig
from statekeeper.node.raft import SubmitError, syncobj
from statekeeper.node.raft.log import ENTRY_COMMAND
from statekeeper.node.raft.peer_encoding import pack, plain_frame, unpack_plain
from statekeeper.node.raft.peers import AuthenticatingEncryptor
from statekeeper.node.raft.pickle_guard import VERSION_COMMAND
from tests.integration.raft_harness import Exploit, Member, config, leader_of, raft_frame, wait_for

pytestmark = pytest.mark.integration


def _three(tmp_path: Path, nodes: dict[str, Member]) -> tuple[ClusterConfig, list[Member]]:
    """Three in-process nodes (closed by the `nodes` fixture, tests/conftest.py)."""
    cfg = config(tmp_path, 3)
    for i in range(3):
        nodes[f"n{i}"] = Member(cfg, f"n{i}")
    return cfg, list(nodes.values())


class SealedPeer:
    """A raft peer on a real socket, holding the cluster secret: pysyncobj's key exchange,
    an address claim, then messages framed and sealed as a node's connection does it
    (peer_encoding.plain_frame, the AES-GCM seal, pysyncobj's length prefix)."""

    def __init__(self, host: str, port: int, secret: str):
        self._seal = AuthenticatingEncryptor(secret)
        self._sock = socket.create_connection((host, port), timeout=5)
        ours = os.urandom(32)
        self._send_plain(plain_frame(None, pack(ours)))
        echoed, self._key = unpack_plain(self._seal.decrypt(self._read_frame()))
        assert echoed == ours
        # An address this node does not know: accepted as a transient peer (peer_set.py).
        self.send(f"127.0.0.1:{free_ports(1)[0]}")

    def _send_plain(self, plain: bytes) -> None:
        self._sock.sendall(raft_frame(self._seal.encrypt_at_time(plain, int(time.monotonic()))))

    def _read_exactly(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self._sock.recv(n - len(out))
            assert chunk, "the node closed the connection"
            out += chunk
        return out

    def _read_frame(self) -> bytes:
        (size,) = struct.unpack("i", self._read_exactly(4))
        return self._read_exactly(size)

    def send(self, message: object) -> None:
        self._send_plain(plain_frame(self._key, pack(message)))

    def close(self) -> None:
        self._sock.close()


def test_a_sealed_transmission_carrying_a_pickle_is_dropped_unread(
    tmp_path: Path, nodes, caplog
) -> None:
    """pysyncobj's follower joins 'transmission' chunks and unpickles them: a peer with the
    secret ran code on it. The chunks are dropped before pysyncobj sees them."""
    caplog.set_level(logging.ERROR, logger="statekeeper.raft")
    cfg, members = _three(tmp_path, nodes)
    lead = leader_of(members)
    lead.put("before")
    follower = next(m for m in members if m is not lead)
    node = cfg.node(follower.node_id)
    marker = tmp_path / f"pwned-{uuid.uuid4().hex}"
    pickled = pickle.dumps(Exploit(marker))
    last_idx, last_term = follower.obj._journal[-1][1], follower.obj._journal[-1][2]
    head = {
        "type": "append_entries",
        "term": follower.obj.raftCurrentTerm,
        "commit_index": 0,
        "prevLogIdx": last_idx,
        "prevLogTerm": last_term,
    }
    peer = SealedPeer(node.host, node.raft_port, cfg.secret)
    try:
        peer.send({**head, "transmission": "start", "data": pickled[:8]})
        peer.send({**head, "transmission": "finish", "data": pickled[8:]})
        time.sleep(1.0)
    finally:
        peer.close()
    assert not marker.exists(), "a peer's pickled 'transmission' was unpickled"
    refused = [r.getMessage() for r in caplog.records if "transmission" in r.getMessage()]
    assert len(refused) == 1, refused  # one line per peer host a minute, not one per chunk
    rev = lead.put("after")["revision"]
    wait_for(lambda: follower.sm.revision >= rev, what="the follower to apply a later put")


def test_the_leader_never_chunks_a_large_entry(tmp_path: Path, nodes, monkeypatch) -> None:
    """pysyncobj's leader pickles a lone entry of appendEntriesBatchSizeBytes or more into
    'transmission' chunks. With the batch limit lowered to 64 KiB (it is 64 MiB), a 200 KiB
    entry goes as one msgpack message and reaches every follower."""
    monkeypatch.setattr(syncobj, "MAX_MESSAGE_BYTES", 64 * 1024)
    chunked: list[str] = []
    send = syncobj.PeerTransport.send

    def recording(self, node, message):
        if isinstance(message, dict) and "transmission" in message:
            chunked.append(message["transmission"])
        return send(self, node, message)

    monkeypatch.setattr(syncobj.PeerTransport, "send", recording)
    cfg, members = _three(tmp_path, nodes)
    lead = leader_of(members)
    rev = lead.put("large", b"x" * 200 * 1024)["revision"]
    for m in members:
        wait_for(lambda m=m: m.sm.revision >= rev, what=f"{m.node_id} to apply the entry")
    assert chunked == []


def test_version_commands_are_never_unpickled(tmp_path: Path, nodes) -> None:
    """A VERSION command (pysyncobj's setCodeVersion) is unpickled by every node that
    applies it, and a follower's forwarded command was appended as it came: a peer with
    the secret ran code on every node. A forwarded one is refused; one already in the log
    (as an older or hostile leader would send it) is applied as a no-op."""
    cfg, members = _three(tmp_path, nodes)
    lead = leader_of(members)
    lead.put("warm-up")
    follower_node = next(iter(lead.obj.otherNodes))
    forwarded = tmp_path / f"forwarded-{uuid.uuid4().hex}"
    logged = tmp_path / f"logged-{uuid.uuid4().hex}"
    before = lead.obj._journal[-1][1]
    lead.on_raft_thread(
        lambda: lead.obj._SyncObj__onMessageReceived(
            follower_node,
            {
                "type": "apply_command",
                "command": VERSION_COMMAND + pickle.dumps(Exploit(forwarded)),
                "request_id": 7,
            },
        )
    )
    lead.put("after-forward")  # a later entry: the forwarded command would be below it
    # Appended directly, past the guard: a VERSION entry that a leader sends.
    lead.on_raft_thread(
        lambda: lead.obj._applyCommand(VERSION_COMMAND + pickle.dumps(Exploit(logged)), None)
    )
    rev = lead.put("after-version")["revision"]
    for m in members:
        wait_for(lambda m=m: m.sm.revision >= rev, what=f"{m.node_id} to apply past it")
    assert not logged.exists(), "a VERSION entry was unpickled"
    assert not forwarded.exists(), "a forwarded VERSION command was appended and unpickled"
    commands = [e[0][:1] for e in lead.obj._journal if e[1] > before]
    assert commands.count(VERSION_COMMAND) == 1, commands  # the forwarded one never went in


def test_an_entry_over_the_bound_is_refused_and_nothing_is_journalled(
    tmp_path: Path, nodes
) -> None:
    """One raft entry may hold RAFT_ENTRY_LIMIT_BYTES (32 MiB, below the 64 MiB at which
    pysyncobj chunked): a larger one is refused before it is queued, on the leader and on a
    follower (which would forward it)."""
    cfg, members = _three(tmp_path, nodes)
    lead = leader_of(members)
    rev = lead.put("before")["revision"]
    follower = next(m for m in members if m is not lead)
    too_large = b"\x82" + b"x" * (RAFT_ENTRY_LIMIT_BYTES - len(ENTRY_COMMAND))
    assert syncobj.replicated_command_size(too_large) == RAFT_ENTRY_LIMIT_BYTES + 1
    journalled = len(lead.obj._journal)
    for m in (lead, follower):
        assert m.submit(too_large, timeout=2) == (None, SubmitError.ENTRY_TOO_LARGE)
    time.sleep(0.3)
    assert len(lead.obj._journal) == journalled
    assert all(m.sm.revision == rev for m in members)
    assert lead.put("still-serving")["revision"] > rev
