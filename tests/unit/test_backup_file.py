"""node/backup_file.py (the format), node/backup_ops.py (taking one from a real
StateMachine) and node/backup_seed.py (seeding data dirs from one), without a network."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
from pathlib import Path

import pytest

from node import backup_file
from node.backup_file import BackupError, BackupWriter, copy_body, verify
from node.backup_ops import Backups
from node.backup_seed import SeedError, seed
from node.errors import OpError
from node.store import StateMachine
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


def test_backup_then_seed_gives_every_dir_the_state_with_a_fresh_raft_position(tmp_path):
    src = populated(tmp_path / "src" / "db", n=300)
    meta = take_backup(src.sm, tmp_path / "b.skb")
    assert (meta["revision"], meta["applied_index"]) == (src.sm.revision, src.index)
    assert meta["clock_ms"] == src.sm.clock_ms > 0 and meta["apply_pause_ms"] >= 0
    assert not list((tmp_path / "src").glob("db.ckpt-*"))  # the checkpoint is removed
    dirs = [tmp_path / "new" / f"node-{i}" for i in range(2)]
    info = seed(str(tmp_path / "b.skb"), dirs)
    assert info["revision"] == src.sm.revision
    for d in dirs:
        assert sorted(p.name for p in d.iterdir()) == ["db"]
        node = Node(d / "db")
        try:
            assert node.sm.applied_index == 0  # the new raft log starts empty
            assert (node.sm.revision, node.sm.clock_ms) == (src.sm.revision, src.sm.clock_ms)
            # Everything but the meta record is byte for byte the source's.
            assert without_meta(node.sm) == without_meta(src.sm)
            assert node.sm.get("default", "k5", revision=meta["revision"] - 5)["kv"] is not None
            # The new cluster's first entry (raft index 1) is applied, not skipped.
            node.apply(put("after", b"restore"), t=meta["clock_ms"] + 1)
            assert node.value("after") == b"restore"
            assert node.sm.revision == src.sm.revision + 1
        finally:
            node.sm.close()
    src.sm.close()


def test_seed_refuses_a_used_dir_and_a_bad_file_before_writing(tmp_path):
    src = populated(tmp_path / "src" / "db", n=20)
    take_backup(src.sm, tmp_path / "b.skb")
    src.sm.close()
    used = tmp_path / "used"
    (used / "raft").mkdir(parents=True)
    empty = tmp_path / "empty"
    with pytest.raises(SeedError, match="already holds raft"):
        seed(str(tmp_path / "b.skb"), [empty, used])
    assert not empty.exists()
    mutate(tmp_path / "b.skb", flip(-100))
    with pytest.raises(BackupError, match="checksum mismatch"):
        seed(str(tmp_path / "b.skb"), [empty], force=True)
    assert not empty.exists() and not list(tmp_path.glob(".restore-*"))


def test_force_replaces_the_store_and_raft_log(tmp_path):
    src = populated(tmp_path / "src" / "db", n=20)
    take_backup(src.sm, tmp_path / "b.skb")
    target = tmp_path / "t"
    old = Node(target / "db")
    old.put("stale", b"x")
    old.sm.close()
    (target / "raft").mkdir()
    (target / "node.log").write_text("kept")
    seed(str(tmp_path / "b.skb"), [target], force=True)
    assert sorted(p.name for p in target.iterdir()) == ["db", "node.log"]
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


def test_cli_restore_into_data_dirs_and_inspect(tmp_path, capsys):
    from cluster.cli import main

    src = populated(tmp_path / "src" / "db", n=20)
    take_backup(src.sm, tmp_path / "b.skb")
    src.sm.close()
    assert main(["backup", "--inspect", str(tmp_path / "b.skb")]) == 0
    assert "revision 21" in capsys.readouterr().out
    dirs = [str(tmp_path / "n0"), str(tmp_path / "n1")]
    assert main(["restore", str(tmp_path / "b.skb"), *(f"--data-dir={d}" for d in dirs)]) == 0
    assert "restored into 2 data dir(s)" in capsys.readouterr().out
    assert main(["restore", str(tmp_path / "b.skb"), f"--data-dir={dirs[0]}"]) == 2
    assert "already holds db" in capsys.readouterr().err
    mutate(tmp_path / "b.skb", lambda d: d[:100])
    assert main(["backup", "--inspect", str(tmp_path / "b.skb")]) == 2
    assert "truncated" in capsys.readouterr().err


def test_cli_restore_writes_a_config_when_there_is_none(tmp_path, capsys):
    from cluster.cli import main
    from node import config as node_config

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
