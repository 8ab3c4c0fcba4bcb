"""The archive ops over raw HTTP on a real 3-node cluster (docs/protocol.md, "Archival"):
plan -> seal -> 410 `archived` on get and read_stream -> restore, byte-identical, on every
node; JSON and msgpack bodies. The archiver itself (client/archive/) is tested in
tests/integration/test_archive.py."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid

import msgpack
import pytest

from statekeeper.cluster.supervisor import LocalCluster

pytestmark = pytest.mark.integration

SEG = {
    "id": "20261201T005300Z-00c0ffee",
    "url": "file:///x/s.skseg",
    "sha256": "0" * 64,
    "bytes": 1,
}


def post(url: str, path: str, body: dict, fmt: str = "msgpack") -> tuple[int, dict]:
    if fmt == "msgpack":
        data, ctype = msgpack.packb(body, use_bin_type=True), "application/msgpack"
    else:
        data, ctype = json.dumps(body).encode(), "application/json"
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    return status, (msgpack.unpackb(raw, raw=False) if fmt == "msgpack" else json.loads(raw))


def test_archive_ops_over_http(cluster: LocalCluster) -> None:
    urls = [cluster.url(n) for n in cluster.node_ids]
    url = urls[0]
    ns = f"arch-{uuid.uuid4().hex[:8]}"
    for i in range(5):
        assert (
            post(url, "/v1/kv/put", {"ns": ns, "key": f"a/ckpt/{i}", "value": b"\xff%d" % i})[0]
            == 200
        )
    events = [{"data": b"e%d" % i, "id": f"id{i}", "type": "t"} for i in range(6)]
    assert post(url, "/v1/streams/append", {"ns": ns, "stream": "log", "events": events})[0] == 200

    status, plan = post(
        url, "/v1/archive/plan", {"ns": ns, "prefix": "a/", "within": "ckpt", "keep_last": 2}
    )
    assert status == 200 and [k[0] for k in plan["keys"]] == ["a/ckpt/0", "a/ckpt/1", "a/ckpt/2"]
    status, splan = post(
        url,
        "/v1/archive/plan",
        {"ns": ns, "target": "streams", "prefix": "", "keep_last": 2},
        "json",
    )
    assert status == 200 and splan["streams"] == [["log", 1, 5]]
    _, page = post(url, "/v1/streams/read", {"ns": ns, "stream": "log", "limit": 4})
    original = page["events"]

    seal = {
        "ns": ns,
        "segment": SEG,
        "keys": [k[:2] for k in plan["keys"]],
        "streams": splan["streams"],
        "idempotency_key": "seal-1",
    }
    status, sealed = post(urls[1], "/v1/archive/seal", seal)  # through a follower
    assert status == 200 and (sealed["sealed_keys"], sealed["sealed_events"]) == (3, 4)
    status, again = post(urls[1], "/v1/archive/seal", seal)
    assert again.get("replayed") is True and again["revision"] == sealed["revision"]

    for u in urls:  # every node answers archived once it has applied the seal
        status, body = post(
            u, "/v1/kv/get", {"ns": ns, "key": "a/ckpt/1", "min_revision": sealed["revision"]}
        )
        assert status == 410 and body["error"]["code"] == "archived"
        assert body["error"]["segment"] == SEG["id"] and body["error"]["url"] == SEG["url"]
    status, body = post(url, "/v1/streams/read", {"ns": ns, "stream": "log", "start": 1}, "json")
    assert status == 410 and body["error"]["from_seq"] == 1 and body["error"]["before_seq"] == 5
    _, info = post(url, "/v1/streams/info", {"ns": ns, "stream": "log"})
    assert info["archived_before"] == 1 and info["first_seq"] == 5
    _, listed = post(url, "/v1/archive/list", {"ns": ns})
    assert [(s["id"], s["keys"], s["events"]) for s in listed["segments"]] == [(SEG["id"], 3, 4)]

    ev_items = [
        [e["seq"], e["data"], e["type"], e["time"], e["revision"], e.get("id"), e.get("meta")]
        for e in original
    ]
    restore = {
        "ns": ns,
        "segment": SEG["id"],
        "keys": [["a/ckpt/1", b"\xff1"]],
        "streams": [["log", ev_items]],
        "idempotency_key": "restore-1",
    }
    status, restored = post(url, "/v1/archive/restore", restore)
    assert status == 200 and (restored["restored_keys"], restored["restored_events"]) == (1, 4)
    _, got = post(url, "/v1/kv/get", {"ns": ns, "key": "a/ckpt/1"})
    assert got["kv"]["value"] == b"\xff1" and got["kv"]["create_revision"] == restored["revision"]
    _, page = post(url, "/v1/streams/read", {"ns": ns, "stream": "log", "limit": 4})
    assert page["events"] == original
    # JSON restore of a key: a UTF-8 string or {"b64": ...}
    status, j = post(
        url,
        "/v1/archive/restore",
        {"ns": ns, "segment": SEG["id"], "keys": [["a/ckpt/0", {"b64": "/zA="}]]},
        "json",
    )
    assert status == 200 and j["restored_keys"] == 1
    _, got = post(url, "/v1/kv/get", {"ns": ns, "key": "a/ckpt/0"})
    assert got["kv"]["value"] == b"\xff0"
