"""Safety defects of the raft layer found by review (issue 9), each reproduced on real
raft nodes on loopback with real RocksDB. Every test here failed before its fix."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pysyncobj import pickle as pysyncobj_pickle

from statekeeper.cluster.ports import free_ports
from statekeeper.node import entry, failpoints
from statekeeper.node.config import ClusterConfig, NodeConfig, RaftSettings
from statekeeper.node.raft.install import SNAPSHOT_CHUNK_ACK
from statekeeper.node.raft.syncobj import NEXT_NODE_IDX, SERIALIZER_STATE
from tests.integration.raft_harness import Member, config, leader_of, wait_for, write_journal

pytestmark = pytest.mark.integration

CHILD = Path(__file__).with_name("crash_child.py")
DAY_MS = 24 * 3600 * 1000


@pytest.fixture
def members(request):
    made: list[Member] = []
    yield made
    for m in made:
        m.close()


def test_one_node_cluster_elects_itself(tmp_path: Path, members) -> None:
    """Defect 8: pre-vote counted its majority only when a reply arrived; with no peers
    none ever did and a one-node cluster stayed at term 0."""
    members.append(Member(config(tmp_path, 1), "n0"))
    leader_of(members, timeout=5)
    assert members[0].put("k")["revision"] == 1


def test_full_wakeup_pipe_does_not_fail_submit(tmp_path: Path, members) -> None:
    """Defect 6: pysyncobj queues a command, then writes to its wake-up pipe; a full pipe
    raised BlockingIOError out of submit() although the command was queued (and applied)."""
    m = Member(config(tmp_path, 1), "n0")
    members.append(m)
    leader_of(members, timeout=5)
    notifier = m.obj._SyncObj__pipeNotifier
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        while True:
            os.write(w, b"x" * 65536)
    except BlockingIOError:
        pass
    real_w = notifier._PipeNotifier__pipeW
    notifier._PipeNotifier__pipeW = w  # the raft thread still ticks on its own
    try:
        result = m.put("queued-behind-a-full-pipe")
    finally:
        notifier._PipeNotifier__pipeW = real_w
        os.close(r)
        os.close(w)
    assert result["revision"] == 1
    assert m.sm.get("a", "queued-behind-a-full-pipe")["kv"] is not None


def _run_child_until_failpoint(base: Path, spec: str) -> tuple[list[str], int, int]:
    raft_port, http_port = free_ports(2)
    env = dict(os.environ, **{failpoints.ENV: spec})
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(base), str(raft_port), str(http_port)],
        env=env, capture_output=True, text=True, timeout=120,
    )
    acked = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("ACK ")]
    assert proc.returncode == failpoints.EXIT_CODE, (proc.returncode, proc.stdout[-500:], proc.stderr[-2000:])
    return acked, raft_port, http_port


@pytest.mark.parametrize(
    "crash_at",
    ["snapshot-after-rename", "journal-prefix-drop", "journal-prefix-dropped"],
)
def test_crash_after_snapshot_rename_keeps_later_entries(tmp_path: Path, members, crash_at: str) -> None:
    """Defect 1: a crash after the snapshot file was renamed and before (or inside) the
    journal's prefix drop made the next start cut the journal to the snapshot's two
    entries: acknowledged, applied entries after the snapshot left the log while RocksDB
    was ahead, and the next writes at those indexes were skipped as "already applied".
    The snapshot is packed slowly so that acknowledged writes land after its last entry."""
    acked, raft_port, http_port = _run_child_until_failpoint(
        tmp_path, f"snapshot-pack=sleep(0.5);{crash_at}=exit"
    )
    assert len(acked) > 31  # the snapshot started after 31 entries; writes went on during it
    cfg = ClusterConfig(
        nodes=(NodeConfig(id="n0", host="127.0.0.1", raft_port=raft_port, http_port=http_port),),
        data_dir=str(tmp_path), fsync="always", secret="test-secret",
        raft=RaftSettings(snapshot_min_entries=100_000),
    )
    m = Member(cfg, "n0")
    members.append(m)
    leader_of(members, timeout=5)
    journal = m.raft._journal
    last_in_journal = journal[-1][1]
    assert last_in_journal >= m.sm.applied_index, (
        f"the journal ends at {last_in_journal} but RocksDB applied {m.sm.applied_index}: "
        "acknowledged entries were dropped from the log"
    )
    for key in acked:
        assert m.sm.get("a", key)["kv"] is not None, f"acknowledged {key} is gone"
    before = m.sm.revision
    assert m.put("after-restart")["revision"] == before + 1
    assert m.sm.get("a", "after-restart")["kv"] is not None


def _stale_tail_journal(raft_dir: Path) -> None:
    """Log 1..5 committed in term 1, 6..7 written by a deposed leader of term 2."""

    def cmd(key: str) -> bytes:
        op = {"op": "put", "ns": "a", "key": key, "value": b"v"}
        return b"\x00" + pysyncobj_pickle.dumps((0, (entry.encode(1, [op]),)))

    commands = [(b"\x01", 1, 0)]
    commands += [(cmd(f"committed{i}"), i, 1) for i in range(2, 6)]
    commands += [(cmd(f"STALE{i}"), i, 2) for i in range(6, 8)]
    write_journal(raft_dir, commands, term=2, commit=5)


def test_snapshot_install_message_never_commits_a_stale_tail(tmp_path: Path, members) -> None:
    """Defect 2: an AppendEntries carrying `serialized` (a snapshot chunk, or None while the
    leader packs) took pysyncobj's commit = min(leaderCommit, last local index), so a former
    minority leader applied its own never-committed tail and served it."""
    cfg = config(tmp_path, 3)  # n1 and n2 never start: nothing else can move the commit index
    _stale_tail_journal(cfg.node_data_dir("n0") / "raft")
    m = Member(cfg, "n0")
    members.append(m)
    wait_for(lambda: m.obj.raftLastApplied >= 5, what="the committed prefix applied")
    leader = next(iter(m.obj.otherNodes))
    for msg in (
        {"type": "append_entries", "term": 3, "commit_index": 100, "serialized": None},
        {"type": "append_entries", "term": 3, "commit_index": 100, "prevLogIdx": 5, "prevLogTerm": 1, "entries": []},
    ):
        m.on_raft_thread(lambda msg=msg: m.obj._SyncObj__onMessageReceived(leader, msg))
    time.sleep(0.3)
    assert m.obj.raftCommitIndex == 5
    assert m.sm.applied_index <= 5
    assert m.sm.get("a", "STALE6")["kv"] is None


def test_stale_term_reply_is_ignored(tmp_path: Path, members) -> None:
    """Defect 7: pysyncobj's leader took any success reply to AppendEntries, so a late
    reply from an earlier term could raise a follower's match index above what it holds
    now and count towards a commit. Replies carry the term; other terms' are dropped."""
    cfg = config(tmp_path, 3)
    members.extend(Member(cfg, f"n{i}") for i in range(3))
    lead = leader_of(members)
    lead.put("warm-up")
    follower = next(iter(lead.obj.otherNodes))
    match = lead.obj._SyncObj__raftMatchIndex
    term = lead.obj.raftCurrentTerm
    before = match[follower]
    stale = {"type": NEXT_NODE_IDX, "next_node_idx": before + 1000, "reset": False, "success": True}
    lead.on_raft_thread(lambda: lead.obj._SyncObj__onMessageReceived(follower, {**stale, "term": term - 1}))
    lead.on_raft_thread(lambda: lead.obj._SyncObj__onMessageReceived(follower, stale))
    assert match[follower] < before + 999
    # A reply of the current term still counts.
    lead.on_raft_thread(
        lambda: lead.obj._SyncObj__onMessageReceived(follower, {**stale, "next_node_idx": before + 1, "term": term})
    )
    assert match[follower] >= before


def test_a_follower_clock_a_day_ahead_does_not_expire_idempotency(tmp_path: Path, members) -> None:
    """Defect 4: entries carried the clock of whichever node built them (a follower's
    read barrier or forwarded write), and apply keeps the maximum: one node a day ahead
    expired every idempotency record at once, and a retry was applied twice."""
    cfg = config(tmp_path, 3)
    members.extend(Member(cfg, f"n{i}") for i in range(3))
    lead = leader_of(members)
    follower = next(m for m in members if m is not lead)
    op = {"op": "put", "ns": "a", "key": "once", "value": b"v", "idempotency_key": "run-17/step-3"}
    now = int(time.time() * 1000)
    first, err = lead.submit(entry.encode(now, [op]))
    assert err is None and "error" not in first[0]
    # A barrier built on the follower with its clock 25 h ahead, forwarded to the leader.
    _, err = follower.submit(entry.encode(now + 25 * 3600 * 1000, []))
    assert err is None
    for m in members:
        wait_for(lambda m=m: m.sm.applied_index >= follower.sm.applied_index, what="apply everywhere")
        assert m.sm.clock_ms < time.time() * 1000 + 120_000, "a follower's clock reached apply"
    retry, err = lead.submit(entry.encode(now, [op]))
    assert err is None
    assert retry[0].get("replayed") is True
    assert lead.sm.get("a", "once")["kv"]["version"] == 1


def test_a_failed_snapshot_restore_stops_the_node(tmp_path: Path, members) -> None:
    """pysyncobj catches every exception of a snapshot load and goes on: a follower whose
    state machine restore failed kept running, with its DB closed (the next apply then
    stopped it, status 70: CI's crash-snapshot run) or, had the failure come before the
    old DB was closed, with the old state under a raft position that says it holds the
    snapshot. A failed restore must stop the node at once instead (status 70)."""
    from statekeeper.node.config import write

    cfg = config(tmp_path, 3, snapshot_min_entries=20, snapshot_min_seconds=1)
    path = tmp_path / "cluster.toml"
    write(cfg, path)
    members += [Member(cfg, "n0"), Member(cfg, "n1")]
    leader = leader_of(members)
    for i in range(120):  # past several snapshots: n2 can only catch up from one
        leader.put(f"k{i}")
    wait_for(lambda: leader.raft._journal[0][1] > 1, what="the leader's journal compacted")
    env = {**os.environ, failpoints.ENV: "snapshot-restore=1*error"}
    child = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("restore_child.py")), str(path), "n2"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        code = child.wait(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
        raise AssertionError(
            f"n2 kept running after its restore failed:\n{out[-800:]}\n{err[-2000:]}"
        ) from None
    err = child.stderr.read()
    assert code == 70, err[-2000:]
    assert "restoring the state machine from a snapshot failed" in err


def test_a_snapshot_packed_while_a_newer_one_is_installed_does_not_replace_it(
    tmp_path: Path, members
) -> None:
    """A follower packing its own snapshot (minutes for a large DB, on a helper thread)
    while the leader's newer one arrives renamed its older file over the installed one
    when done. The next start then found a journal that does not start with that older
    snapshot's entries and cut it to them: the entries after the installed snapshot,
    which this node had acknowledged, were gone from its journal."""
    import threading as _threading

    from statekeeper.node import snapshot_file

    cfg = config(tmp_path, 3, snapshot_min_entries=20, snapshot_min_seconds=1)
    members.extend(Member(cfg, f"n{i}") for i in range(3))
    leader = leader_of(members)
    slow = next(m for m in members if m is not leader)
    release = _threading.Event()
    pack = slow.sm.write_checkpoint

    def blocked_pack(work, f):
        release.wait(60)
        pack(work, f)

    slow.sm.write_checkpoint = blocked_pack  # a large DB's pack
    try:
        for i in range(40):
            leader.put(f"k{i}")
        wait_for(lambda: slow.raft._snapshot_state == SERIALIZER_STATE.SERIALIZING, what="packing")
        # The follower stops hearing the leader while the leader writes on and compacts
        # past it: it can catch up only from the leader's snapshot.
        stall = _threading.Thread(target=lambda: slow.on_raft_thread(lambda: time.sleep(3), 10))
        stall.start()
        start = leader.raft._journal[0][1]
        for i in range(40, 120):
            leader.put(f"k{i}")
        wait_for(lambda: leader.raft._journal[0][1] > start + 40, what="the leader compacted")
        stall.join()
        wait_for(lambda: slow.sm.applied_index > start + 40, 20, "caught up through a snapshot")
        installed = snapshot_file.read_header(slow.raft._conf.fullDumpFile)[0]["last"][1]
        assert installed > start, "the follower must have installed the leader's snapshot"
    finally:
        release.set()
    wait_for(lambda: slow.raft._snapshot_state != SERIALIZER_STATE.SERIALIZING, what="pack done")
    time.sleep(0.5)
    header, _ = snapshot_file.read_header(slow.raft._conf.fullDumpFile)
    assert header["last"][1] >= installed, (header["last"], installed)


def test_a_snapshot_chunk_ack_counts_for_check_quorum(tmp_path: Path, members) -> None:
    """Issue 26, defect 4: check-quorum (leaderFallbackTimeout) counted only replies to
    AppendEntries, and a follower receiving a snapshot answers only its chunks until the
    last: when that follower was the leader's majority, the leader stepped down again and
    again (a slowed receiver: 16 leadership losses, 28.8 s leaderless). A chunk ack of the
    leader's term is contact with that follower; another term's is not."""
    cfg = config(tmp_path, 3)
    members.extend(Member(cfg, f"n{i}") for i in range(3))
    lead = leader_of(members)
    follower = next(iter(lead.obj.otherNodes))
    heard = lead.obj._SyncObj__lastResponseTime
    term = lead.obj.raftCurrentTerm
    seen: list[float] = []

    def ack(message_term: int) -> None:  # one raft step: no heartbeat reply in between
        heard[follower] = 0.0
        lead.obj._SyncObj__onMessageReceived(
            follower, {"type": SNAPSHOT_CHUNK_ACK, "term": message_term}
        )
        seen.append(heard[follower])

    lead.on_raft_thread(lambda: ack(term - 1))
    lead.on_raft_thread(lambda: ack(term))
    assert seen[0] == 0.0, "an ack of an earlier term counted as contact"
    assert seen[1] > 0.0, "the leader ignored a chunk ack of its own term (check-quorum)"
