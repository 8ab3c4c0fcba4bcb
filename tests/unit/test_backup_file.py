"""node/backup/file.py (the format), node/api/backup.py (taking one from a real
StateMachine) and node/backup/seed.py (seeding a new cluster from one), without a network."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
from pathlib import Path

import pytest

from statekeeper.node import config as node_config
from statekeeper.node import snapshot_file
from statekeeper.node.api.backup import Backups
from statekeeper.node.backup import file as backup_file
from statekeeper.node.backup.file import BackupError, BackupWriter, copy_body, verify
from statekeeper.node.backup.seed import SeedError, seed
from statekeeper.node.config import ClusterConfig
from statekeeper.node.errors import OpError
from statekeeper.node.store import StateMachine
from tests.unit.store.util import Node, populated, put, raw_items

META = {"revision": 7, "cluster": "c", "clock_ms": 123}


def write_backup(path: Path, body: bytes, meta: dict = META) -> str:
    with open(path, "wb") as f:
        w = BackupWriter(f.write)
        w.meta(meta)
        w.write(body[: len(body) // 3])  # several writes, frames across them
        w.write(body[len(body) // 3 :])
        digest = w.finish()
        assert w.size == f.tell()
    return digest


@pytest.fixture
def good(tmp_path) -> tuple[Path, bytes]:
    body = os.urandom(backup_file.FRAME_BYTES * 2 + 12345)
    path = tmp_path / "b.skb"
    write_backup(path, body)
    return path, body


def test_round_trip_streams_frames_and_checks_the_digest(good):
    path, body = good
    meta, digest, n = verify(str(path))
    assert meta == META and n == len(body)
    assert digest == hashlib.sha256(path.read_bytes()[:-32]).hexdigest()
    out = io.BytesIO()
    assert copy_body(str(path), out) == META
    assert out.getvalue() == body


def test_an_empty_body_is_valid(tmp_path):
    write_backup(tmp_path / "e", b"")
    assert verify(str(tmp_path / "e"))[2] == 0


def mutate(path: Path, fn) -> None:
    path.write_bytes(fn(bytearray(path.read_bytes())))


def flip(at: int):
    def fn(data: bytearray) -> bytearray:
        data[at] ^= 0x01
        return data

    return fn


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: b"PK\x03\x04" + d[4:], "not a statekeeper backup"),
        (
            lambda d: d[:8] + b"\x00\x02" + d[10:],
            "backup format 2; this statekeeper reads format 1",
        ),
        (flip(-40), "checksum mismatch"),  # the last frame's body
        (flip(5000), "checksum mismatch"),  # the first frame's body
        (flip(-1), "checksum mismatch"),  # the digest itself
        (lambda d: d[:-1], "truncated: the file ends at byte"),
        (lambda d: d[:-36], "truncated"),  # the end frame and digest gone
        (lambda d: d[: len(d) // 2], "inside the body"),
        (lambda d: d[:12], "inside the header"),
        (lambda d: d + b"x", "data after the checksum"),
        (lambda d: d[:10] + b"\xff\xff\xff\xff" + d[14:], "metadata length"),
    ],
)
def test_damaged_files_are_refused_with_a_clear_message(good, change, message):
    path, _ = good
    mutate(path, change)
    with pytest.raises(BackupError, match=message):
        verify(str(path))
    with pytest.raises(BackupError, match=message):
        copy_body(str(path), io.BytesIO())


def test_a_missing_file_is_a_backup_error(tmp_path):
    with pytest.raises(BackupError, match="cannot read"):
        verify(str(tmp_path / "nope"))


# -- taking one from a state machine, seeding from it ---------------------------------------


def take_backup(sm: StateMachine, path: Path) -> dict:
    async def run() -> dict:
        meta, chunks = await Backups(sm, "src", "node-0").start()
        with open(path, "wb") as f:
            async for c in chunks:
                f.write(c)
        return meta

    return asyncio.run(run())


def without_meta(sm: StateMachine) -> list:
    return [kv for kv in raw_items(sm) if kv[0] != b"m"]


def new_cluster(tmp_path: Path, size: int = 2) -> ClusterConfig:
    return node_config.local_cluster(size=size, data_dir=str(tmp_path / "new"), secret="s")


def test_backup_then_seed_gives_every_node_the_state_as_a_raft_snapshot(tmp_path):
    src = populated(tmp_path / "src" / "db", n=300)
    meta = take_backup(src.sm, tmp_path / "b.skb")
    assert (meta["revision"], meta["applied_index"]) == (src.sm.revision, src.index)
    assert meta["clock_ms"] == src.sm.clock_ms > 0 and meta["apply_pause_ms"] >= 0
    assert not list((tmp_path / "src").glob("db.ckpt-*"))  # the checkpoint is removed
    cfg = new_cluster(tmp_path)
    info = seed(str(tmp_path / "b.skb"), cfg, ["node-0", "node-1"])
    assert (info["revision"], info["raft_index"]) == (src.sm.revision, src.index)
    for n in cfg.nodes:
        d = cfg.node_data_dir(n.id)
        assert sorted(p.name for p in d.iterdir()) == ["db", "raft"]
        assert sorted(p.name for p in (d / "raft").iterdir()) == ["snapshot.bin"]
        header, offset = snapshot_file.read_header(str(d / "raft" / "snapshot.bin"))
        assert header == {
            "last": [b"\x01", src.index, 0],  # pysyncobj's no-op entries, term 0
            "prev": [b"\x01", src.index - 1, 0],
            "cluster": sorted(m.raft_address for m in cfg.nodes),
        }
        node = Node(d / "db")
        lost = Node(tmp_path / f"lost-{n.id}" / "db")  # a node that lost its DB
        try:
            assert node.sm.applied_index == src.index  # raft and store agree
            assert (node.sm.revision, node.sm.clock_ms) == (src.sm.revision, src.sm.clock_ms)
            assert raw_items(node.sm) == raw_items(src.sm)
            assert node.sm.get("default", "k5", revision=meta["revision"] - 5)["kv"] is not None
            # ...restores the same state from the raft snapshot (what RaftNode does).
            lost.sm.restore(d / "raft" / "snapshot.bin", offset)
            assert raw_items(lost.sm) == raw_items(src.sm)
            # The new cluster's log continues after the snapshot's index.
            node.index = src.index
            node.apply(put("after", b"restore"), t=meta["clock_ms"] + 1)
            assert node.value("after") == b"restore"
            assert node.sm.revision == src.sm.revision + 1
        finally:
            node.sm.close()
            lost.sm.close()
    src.sm.close()


def test_a_backup_of_an_empty_store_seeds_index_2(tmp_path):
    src = Node(tmp_path / "src" / "db")
    take_backup(src.sm, tmp_path / "b.skb")
    src.sm.close()
    cfg = new_cluster(tmp_path, size=1)
    assert seed(str(tmp_path / "b.skb"), cfg, ["node-0"])["raft_index"] == 2
    node = Node(cfg.node_data_dir("node-0") / "db")
    assert node.sm.applied_index == 2
    node.sm.close()


def test_seed_refuses_a_used_dir_and_a_bad_file_before_writing(tmp_path):
    src = populated(tmp_path / "src" / "db", n=20)
    take_backup(src.sm, tmp_path / "b.skb")
    src.sm.close()
    cfg = new_cluster(tmp_path)
    empty, used = (cfg.node_data_dir(n.id) for n in cfg.nodes)
    (used / "raft").mkdir(parents=True)
    with pytest.raises(SeedError, match="already holds raft"):
        seed(str(tmp_path / "b.skb"), cfg, ["node-0", "node-1"])
    assert not empty.exists()
    mutate(tmp_path / "b.skb", flip(-100))
    with pytest.raises(BackupError, match="checksum mismatch"):
        seed(str(tmp_path / "b.skb"), cfg, ["node-0"], force=True)
    assert not empty.exists() and not list(used.parent.glob(".restore-*"))


def test_force_replaces_the_store_and_raft_log(tmp_path):
    src = populated(tmp_path / "src" / "db", n=20)
    take_backup(src.sm, tmp_path / "b.skb")
    cfg = new_cluster(tmp_path, size=1)
    target = cfg.node_data_dir("node-0")
    old = Node(target / "db")
    old.put("stale", b"x")
    old.sm.close()
    (target / "raft").mkdir()
    (target / "raft" / "journal.log").write_text("old log")
    (target / "node.log").write_text("kept")
    seed(str(tmp_path / "b.skb"), cfg, ["node-0"], force=True)
    assert sorted(p.name for p in target.iterdir()) == ["db", "node.log", "raft"]
    assert not (target / "raft" / "journal.log").exists()
    node = Node(target / "db")
    assert node.value("stale") is None and node.value("k1") == src.value("k1")
    node.sm.close()
    src.sm.close()


def test_one_backup_at_a_time_and_the_next_right_after(tmp_path):
    src = populated(tmp_path / "src" / "db", n=20)
    backups = Backups(src.sm, "src", "node-0")

    async def run() -> None:
        _, chunks = await backups.start()
        with pytest.raises(OpError, match="already taking a backup") as e:
            await backups.start()
        assert e.value.code == "unavailable"
        first = b"".join([c async for c in chunks])
        _, chunks = await backups.start()  # as soon as the first one's answer is complete
        second = b"".join([c async for c in chunks])
        assert first.startswith(backup_file.MAGIC) and len(second) > 0

    for _ in range(5):
        asyncio.run(run())
    src.sm.close()


def test_cli_restore_one_node_and_inspect(tmp_path, capsys):
    from statekeeper.cluster.cli import main

    src = populated(tmp_path / "src" / "db", n=20)
    take_backup(src.sm, tmp_path / "b.skb")
    src.sm.close()
    assert main(["backup", "--inspect", str(tmp_path / "b.skb")]) == 0
    assert "revision 21" in capsys.readouterr().out
    cfg_path = tmp_path / "cluster.toml"
    node_config.write(new_cluster(tmp_path, size=3), cfg_path)
    restore = ["restore", str(tmp_path / "b.skb"), "--config", str(cfg_path)]
    assert main([*restore, "--node", "node-1"]) == 0
    assert "restored 1 node(s): each starts from a raft snapshot at index 21" in (
        capsys.readouterr().out
    )
    assert [p.name for p in (tmp_path / "new").iterdir()] == ["node-1"]
    assert main(restore) == 2
    assert "already holds db, raft" in capsys.readouterr().err
    assert main([*restore, "--node", "node-9"]) == 2
    mutate(tmp_path / "b.skb", lambda d: d[:100])
    assert main(["backup", "--inspect", str(tmp_path / "b.skb")]) == 2
    assert "truncated" in capsys.readouterr().err


def test_cli_restore_writes_a_config_when_there_is_none(tmp_path, capsys):
    from statekeeper.cluster.cli import main
    from statekeeper.node import config as node_config

    src = populated(tmp_path / "src" / "db", n=5)
    take_backup(src.sm, tmp_path / "b.skb")
    src.sm.close()
    cfg_path = tmp_path / "new" / "cluster.toml"
    cfg_path.parent.mkdir()
    assert main(["restore", str(tmp_path / "b.skb"), "--config", str(cfg_path)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {cfg_path}" in out and f"cluster up --config {cfg_path}" in out
    cfg = node_config.load(cfg_path)
    assert all((cfg.node_data_dir(n.id) / "db").is_dir() for n in cfg.nodes)


def test_a_checkpoint_left_by_a_crash_is_removed_at_the_next_start(tmp_path):
    node = populated(tmp_path / "db", n=5)
    work, _ = node.sm.backup_checkpoint()  # the process "dies" before packing it
    node.sm.close()
    assert work.is_dir() and work.name.startswith("db.ckpt-")
    again = Node(tmp_path / "db")
    assert not work.exists() and again.value("k1") == b"v1"
    again.sm.close()
