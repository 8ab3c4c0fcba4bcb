"""Archive URLs are data any writer of a namespace records (archive_seal), so a reader's
client must not follow them anywhere (issue 27, item 5): it fetches only under the archive
roots it was configured with, reads at most the recorded size, never echoes the hash of
what it read; the node accepts only archive schemes without dot segments; and namespaces
"." and ".." stay one directory level inside the archive."""

from __future__ import annotations

import hashlib
import posixpath
from typing import Any

import pytest

from statekeeper.client import ArchiveCorrupt, Client, StatekeeperError
from statekeeper.client.archive.storage import manifest_path, segment_path
from statekeeper.node.config import Limits
from statekeeper.node.errors import OpError
from statekeeper.node.ops.core import validate_op
from tests.unit.test_client_archive import _answer, _parse_once

ROOTS_ENV = "STATEKEEPER_ARCHIVE_ROOTS"


def _archived_get(url: str, sha256: str = "ab" * 32, size: int = 100) -> Any:
    """get("k", archived="fetch") where the cluster says k is archived at `url`."""
    error = {
        "code": "archived",
        "message": "m",
        "segment": "s1",
        "url": url,
        "sha256": sha256,
        "bytes": size,
        "archived_revision": 3,
        "key": "k",
    }
    with Client("http://127.0.0.1:1") as c:
        c._drive = lambda plan: _parse_once(plan, _answer(410, {"error": error}))  # type: ignore[method-assign]
        return c.get("k", archived="fetch")


@pytest.fixture
def secret_file(tmp_path) -> tuple[Any, bytes]:
    path = tmp_path / "cluster.secret"
    path.write_bytes(b"the cluster secret")
    return path, b"the cluster secret"


def test_a_url_outside_every_configured_root_is_not_read(tmp_path, secret_file, monkeypatch):
    path, content = secret_file
    (tmp_path / "archive").mkdir()
    monkeypatch.setenv(ROOTS_ENV, f"file://{tmp_path}/archive")
    with pytest.raises(StatekeeperError) as info:
        _archived_get(f"file://{path}")
    assert hashlib.sha256(content).hexdigest() not in str(info.value), "the file's hash leaked"
    assert info.value.code == "archive_url_refused", info.value


@pytest.mark.parametrize("trick", ["{root}/../cluster.secret", "{root}/x/%2e%2e/../cluster.secret"])
def test_dot_segments_do_not_leave_a_root(tmp_path, secret_file, monkeypatch, trick):
    root = f"file://{tmp_path}/archive"
    (tmp_path / "archive" / "x").mkdir(parents=True)
    monkeypatch.setenv(ROOTS_ENV, root)
    with pytest.raises(StatekeeperError) as info:
        _archived_get(trick.format(root=root))
    assert info.value.code == "archive_url_refused", info.value


def test_without_a_configured_root_nothing_is_fetched(secret_file, monkeypatch):
    path, content = secret_file
    monkeypatch.delenv(ROOTS_ENV, raising=False)
    with pytest.raises(StatekeeperError) as info:
        _archived_get(f"file://{path}")
    assert info.value.code == "archive_url_refused", info.value
    assert hashlib.sha256(content).hexdigest() not in str(info.value)


def test_at_most_the_recorded_size_is_read_and_no_hash_is_echoed(tmp_path, monkeypatch):
    root = tmp_path / "archive"
    root.mkdir()
    big = root / "big.skseg"
    big.write_bytes(b"\0" * (4 << 20))
    monkeypatch.setenv(ROOTS_ENV, f"file://{root}")
    with pytest.raises(ArchiveCorrupt) as info:
        _archived_get(f"file://{big}", size=100)
    assert hashlib.sha256(big.read_bytes()).hexdigest() not in str(info.value)
    assert "100 bytes" in str(info.value), info.value


@pytest.mark.parametrize("ns", [".", "..", "%2e", "a/../.."])
def test_dot_namespaces_stay_inside_the_archive_directories(ns):
    for path in (segment_path(ns, "s1"), manifest_path(ns, "s1")):
        top, name, file = path.split("/")
        assert posixpath.normpath(path) == path, path
        assert name not in (".", "..") and file.startswith("s1."), path


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data",
        "https://internal.example/x",
        "file:///srv/archive/../../etc/shadow",
        "file:///srv/archive/%2E%2E/x",
        "s3://bucket/a/./b",
        "file:///srv/archive/s.skseg?x=1",
        "file:///srv/archive/s\n.skseg",
    ],
)
def test_the_node_refuses_a_segment_url_outside_the_archive_schemes(url):
    with pytest.raises(OpError) as info:
        validate_op(_seal(url), Limits())
    assert info.value.code == "invalid_argument" and "url" in str(info.value)


@pytest.mark.parametrize(
    "url", ["file:///srv/archive/segments/n/s1.skseg", "s3://bucket/prefix/segments/n/s1.skseg"]
)
def test_the_node_accepts_archive_urls(url):
    assert validate_op(_seal(url), Limits())["segment"]["url"] == url


def _seal(url: str) -> dict[str, Any]:
    segment = {"id": "s1", "url": url, "sha256": "a" * 64, "bytes": 3}
    return {"op": "archive_seal", "ns": "n", "segment": segment, "keys": [["k", 3]]}
