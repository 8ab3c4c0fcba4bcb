"""`statekeeper backup --out F` (cluster/backup_cli.py) writes its temporary file safely:
another local user's pre-created F.partial, or a symlink planted there, never receives the
backup (issue 27, item 9). The node's answer is a canned response: no network."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

import pytest
import urllib3

from statekeeper.cluster import cli
from statekeeper.node.backup.file import BackupWriter, verify


def _backup_bytes() -> bytes:
    buf = io.BytesIO()
    w = BackupWriter(buf.write)
    w.meta({"revision": 3, "cluster": "c", "source_node": "n1"})
    w.write(b"the whole store " * 1000)
    w.finish()
    return buf.getvalue()


class _Answer:
    """What urllib3 hands back for GET /v1/admin/backup: a 200 streaming a backup."""

    status = 200

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, n: int):
        for i in range(0, len(self._body), n):
            yield self._body[i : i + n]

    def release_conn(self) -> None:
        pass


@pytest.fixture
def node_answers(monkeypatch: pytest.MonkeyPatch) -> bytes:
    body = _backup_bytes()
    monkeypatch.setattr(
        urllib3.PoolManager, "request", lambda self, *a, **kw: _Answer(body), raising=True
    )
    return body


def _backup(out: Path) -> int:
    argv = ["backup", "--out", str(out), "--endpoints", "http://127.0.0.1:9", "-q"]
    return cli.main(argv)


def test_a_pre_created_partial_file_never_receives_the_backup(tmp_path, node_answers):
    out = tmp_path / "b.skb"
    planted = out.with_name(out.name + ".partial")
    planted.write_bytes(b"another user's file")
    planted.chmod(0o666)
    assert _backup(out) == 0
    assert planted.read_bytes() == b"another user's file", "the backup went into F.partial"
    assert out.read_bytes() == node_answers and verify(str(out))[0]["revision"] == 3
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert not out.is_symlink()


def test_a_symlink_at_partial_does_not_overwrite_its_target(tmp_path, node_answers):
    out = tmp_path / "b.skb"
    victim = tmp_path / "etc-shadow"
    victim.write_bytes(b"precious")
    os.symlink(victim, out.with_name(out.name + ".partial"))
    assert _backup(out) == 0
    assert victim.read_bytes() == b"precious", "the backup was written through the symlink"
    assert not out.is_symlink() and out.read_bytes() == node_answers
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_no_temporary_file_is_left_when_the_download_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(
        urllib3.PoolManager, "request", lambda self, *a, **kw: _Answer(_backup_bytes()[:-40])
    )
    out = tmp_path / "b.skb"
    assert _backup(out) != 0
    assert list(tmp_path.iterdir()) == []
