"""The archival surface of the clients without a network: the 410 ``archived`` error as
:class:`client.Archived` with its fields, the request bodies of the four ops, the
``archived=`` argument's checking, and StreamInfo's ``archived_before``."""

from __future__ import annotations

import uuid
from typing import Any

import msgpack
import pytest

from statekeeper.client import Archived, AsyncClient, Client, Compacted, InvalidRequest, NotFound
from statekeeper.client.responses import error_from_response, stream_info
from statekeeper.client.wire import MSGPACK


def _answer(status: int, body: dict[str, Any]) -> tuple[int, str, bytes]:
    return status, MSGPACK, msgpack.packb(body, use_bin_type=True)


def test_a_410_archived_answer_is_an_archived_error_with_its_fields() -> None:
    err = error_from_response(
        *_answer(
            410,
            {
                "error": {
                    "code": "archived",
                    "message": "key 'k' is archived in segment s1",
                    "segment": "s1",
                    "url": "file:///a/segments/ns/s1.skseg",
                    "sha256": "ab" * 32,
                    "archived_revision": 7,
                    "key": "k",
                },
                "revision": 9,
            },
        )
    )
    assert type(err) is Archived and isinstance(err, NotFound) and err.status == 410
    assert (err.segment, err.url, err.sha256, err.key, err.archived_revision, err.revision) == (
        "s1",
        "file:///a/segments/ns/s1.skseg",
        "ab" * 32,
        "k",
        7,
        9,
    )
    stream = error_from_response(
        *_answer(
            410,
            {
                "error": {
                    "code": "archived",
                    "message": "m",
                    "segment": "s2",
                    "url": "u",
                    "sha256": "cd" * 32,
                    "stream": "log",
                    "from_seq": 1,
                    "before_seq": 41,
                }
            },
        )
    )
    assert (stream.stream, stream.from_seq, stream.before_seq) == ("log", 1, 41)
    # 410 without the code stays Compacted
    assert type(error_from_response(*_answer(410, {"error": {"code": "compacted"}}))) is Compacted


def test_get_with_a_default_still_raises_archived() -> None:
    with Client("http://127.0.0.1:1") as c:
        answer = _answer(410, {"error": {"code": "archived", "message": "m", "segment": "s"}})
        c._drive = lambda plan: _parse_once(plan, answer)  # type: ignore[method-assign]
        with pytest.raises(Archived):
            c.get("k", default=None)


def _parse_once(plan: Any, answer: tuple[int, str, bytes]) -> Any:
    _, request, _ = next(plan)
    return request.parse(*answer)


def _bodies(c: Client) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    def execute(request: Any, endpoint: Any = None) -> dict[str, Any]:
        sent.append({"path": request.path, **msgpack.unpackb(request.body, raw=False)})
        return {}

    c._execute = execute  # type: ignore[method-assign]
    return sent


def test_the_ops_request_bodies() -> None:
    with Client("http://127.0.0.1:1", ns="agents") as c:
        sent = _bodies(c)
        c.archive_plan("agent/", within="ckpt", keep_last=10, max_age="2d", limit=7)
        c.archive_seal(
            {"id": "s1", "url": "u", "sha256": "ab" * 32, "bytes": 3},
            keys=[("k", 4)],
            streams=[("log", 1, 9)],
            idempotency_key="ik",
        )
        c.archive_restore_op(
            "s1", keys=[("k", b"v")], streams=[("log", [[1, b"d", "", 5, 6, None, {}]])]
        )
        c.archive_list(all_namespaces=True, limit=5)
    plan, seal, restore, listed = sent
    assert plan == {
        "path": "/v1/archive/plan",
        "ns": "agents",
        "target": "keys",
        "prefix": "agent/",
        "keep_last": 10,
        "max_age_s": 172800,
        "within": "ckpt",
        "limit": 7,
    }
    assert seal == {
        "path": "/v1/archive/seal",
        "ns": "agents",
        "idempotency_key": "ik",
        "segment": {"id": "s1", "url": "u", "sha256": "ab" * 32, "bytes": 3},
        "keys": [["k", 4]],
        "streams": [["log", 1, 9]],
    }
    assert restore["path"] == "/v1/archive/restore" and restore["segment"] == "s1"
    assert restore["keys"] == [["k", b"v"]]
    assert restore["streams"] == [["log", [[1, b"d", "", 5, 6, None, {}]]]]
    assert len(restore["idempotency_key"]) == 32
    assert listed == {"path": "/v1/archive/list", "limit": 5}


async def test_archived_modes_are_checked_in_both_clients() -> None:
    with Client("http://127.0.0.1:1") as c:
        with pytest.raises(InvalidRequest, match="archived must be one of"):
            c.get("k", archived="maybe")
        with pytest.raises(InvalidRequest, match="archived must be one of error, fetch"):
            c.read_stream("s", archived="restore")
    a = AsyncClient("http://127.0.0.1:1")
    with pytest.raises(InvalidRequest):
        await a.get("k", archived="maybe")
    await a.close()


def test_stream_info_carries_archived_before() -> None:
    info = stream_info(
        {
            "stream": "s",
            "first_seq": 41,
            "last_seq": 50,
            "count": 10,
            "bytes": 1,
            "create_revision": 1,
            "mod_revision": 2,
            "archived_before": 1,
            "revision": 3,
        }
    )
    assert info.archived_before == 1
    assert stream_info({"stream": "s"}).archived_before is None


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_archive_store_writes_durably_and_lists(kind: str, tmp_path: Any) -> None:
    from statekeeper.client.archive.storage import (
        ArchiveStore,
        ArchiveWriteError,
        read_segment_url,
        segment_path,
    )

    url = str(tmp_path / "arch") if kind == "file" else f"memory://sk-{uuid.uuid4().hex}"
    store = ArchiveStore(url)
    assert store.local == (kind == "file")
    path = segment_path("team/a", "s1")
    assert path == "segments/team%2Fa/s1.skseg"
    store.put_durable(path, b"one")
    store.put_durable(path, b"two")  # replaced whole
    assert store.get(path) == b"two"
    assert read_segment_url(store.url_of(path), (store.url,), 3) == b"two"
    assert store.list("segments") == [path] and store.list("manifest") == []
    if kind == "file":
        assert sorted(p.name for p in (tmp_path / "arch/segments/team%2Fa").iterdir()) == [
            "s1.skseg"
        ]  # no temporary file left behind
    else:  # a backend that does not give back what was written is refused
        store.fs.cat_file = lambda p: b"tw0"  # type: ignore[method-assign]
        with pytest.raises(ArchiveWriteError):
            store.put_durable(path, b"two")
        del store.fs.cat_file
    store.delete(path)
    store.delete(path)  # absent: nothing
    assert not store.exists(path)
