"""Bad input against a real node: a clear 4xx with a stable code, nothing partially
applied, and the node keeps serving. Raw HTTP on purpose (no client-side validation)."""

from __future__ import annotations

import json
import socket

import msgpack
import pytest

from statekeeper.cluster.supervisor import LocalCluster
from tests.integration.cluster_fixture import raw_connection, raw_headers

pytestmark = pytest.mark.integration

KIB = 1024
MIB = 1024 * 1024


def _post(lc: LocalCluster, path: str, body: bytes, ctype: str = "application/json") -> tuple[int, dict]:
    conn = raw_connection(lc, lc.node_ids[1], timeout=15)
    try:
        conn.request("POST", path, body=body, headers=raw_headers(ctype))
        r = conn.getresponse()
        raw = r.read()
        if r.getheader("Content-Type", "").startswith("application/msgpack"):
            return r.status, msgpack.unpackb(raw, raw=False)
        return r.status, json.loads(raw)
    finally:
        conn.close()


def _j(obj) -> bytes:
    return json.dumps(obj).encode()


def _revision(lc: LocalCluster) -> int:
    status, body = _post(lc, "/v1/kv/get", _j({"key": "probe"}))
    return body["revision"]


CASES = [
    # (name, path, body, content-type, status, code)
    ("truncated json", "/v1/kv/put", b'{"key": "a", "val', "application/json", 400, "malformed_body"),
    ("truncated msgpack", "/v1/kv/put", msgpack.packb({"key": "a", "value": b"x" * 50})[:-7], "application/msgpack", 400, "malformed_body"),
    ("empty body", "/v1/kv/put", b"", "application/json", 400, "malformed_body"),
    ("not an object", "/v1/kv/put", b"[1, 2, 3]", "application/json", 400, "malformed_body"),
    ("garbage bytes", "/v1/kv/put", bytes(range(256)), "application/msgpack", 400, "malformed_body"),
    ("unknown media type", "/v1/kv/put", b"key=a", "application/x-www-form-urlencoded", 415, "unsupported_media_type"),
    ("unknown op path", "/v1/kv/frobnicate", _j({"key": "a"}), "application/json", 400, "unknown_op"),
    ("unknown endpoint", "/v1/nope", _j({}), "application/json", 404, "not_found"),
    ("key wrong type", "/v1/kv/put", _j({"key": 12, "value": "x"}), "application/json", 400, "invalid_argument"),
    ("value wrong type", "/v1/kv/put", _j({"key": "a", "value": {"x": 1}}), "application/json", 400, "invalid_argument"),
    ("missing key", "/v1/kv/put", _j({"value": "x"}), "application/json", 400, "invalid_argument"),
    ("NUL in key", "/v1/kv/put", _j({"key": "a\u0000b", "value": "x"}), "application/json", 400, "invalid_argument"),
    ("bad base64", "/v1/kv/put", _j({"key": "a", "value_b64": "!!!"}), "application/json", 400, "invalid_argument"),
    ("key > 4 KiB", "/v1/kv/put", _j({"key": "k" * (4 * KIB + 1), "value": "x"}), "application/json", 413, "key_too_large"),
    ("value > 1 MiB", "/v1/kv/put", msgpack.packb({"key": "a", "value": b"v" * (MIB + 1)}), "application/msgpack", 413, "value_too_large"),
    ("request > 4 MiB", "/v1/batch", msgpack.packb({"ops": [{"op": "put", "key": f"k{i}", "value": b"v" * (MIB - 100)} for i in range(5)]}), "application/msgpack", 413, "request_too_large"),
    ("bad consistency", "/v1/kv/get", _j({"key": "a", "consistency": "eventual"}), "application/json", 400, "invalid_argument"),
    ("bad cas expectation", "/v1/kv/cas", _j({"key": "a", "value": "x", "expect": {"colour": 3}}), "application/json", 400, "invalid_argument"),
    ("txn writes a key twice", "/v1/kv/txn", _j({"compare": [], "success": [{"op": "put", "key": "t", "value": "1"}, {"op": "put", "key": "t", "value": "2"}]}), "application/json", 400, "invalid_argument"),
    ("nested txn", "/v1/kv/txn", _j({"compare": [], "success": [{"op": "txn", "compare": [], "success": []}]}), "application/json", 400, "invalid_argument"),
    ("unknown op in batch", "/v1/batch", _j({"ops": [{"op": "put", "key": "b1", "value": "x"}, {"op": "explode"}]}), "application/json", 400, "unknown_op"),
    ("bad op in batch", "/v1/batch", _j({"ops": [{"op": "put", "key": "b1", "value": "x"}, {"op": "put", "key": 5}]}), "application/json", 400, "invalid_argument"),
    ("future revision", "/v1/kv/get", _j({"key": "a", "revision": 10**12}), "application/json", 400, "future_revision"),
    # Leases: an unknown lease is 404 lease_not_found; a bad TTL or mixed fields 400; the
    # node-internal lease_expire has no route and no batch accepts it.
    ("revoke unknown lease", "/v1/leases/revoke", _j({"lease": 10**9}), "application/json", 404, "lease_not_found"),
    ("info of unknown lease", "/v1/leases/info", _j({"lease": 10**9}), "application/json", 404, "lease_not_found"),
    ("put with unknown lease", "/v1/kv/put", _j({"key": "b1", "value": "x", "lease": 10**9}), "application/json", 404, "lease_not_found"),
    ("txn put with unknown lease", "/v1/kv/txn", _j({"compare": [], "success": [{"op": "put", "key": "b1", "value": "x"}, {"op": "put", "key": "b2", "value": "x", "lease": 10**9}]}), "application/json", 404, "lease_not_found"),
    ("ttl below the minimum", "/v1/leases/grant", _j({"ttl_ms": 1999}), "application/json", 400, "invalid_argument"),
    ("ttl above one day", "/v1/leases/grant", _j({"ttl_ms": 86_400_001}), "application/json", 400, "invalid_argument"),
    ("put ttl below the minimum", "/v1/kv/put", _j({"key": "b1", "value": "x", "ttl_ms": 10}), "application/json", 400, "invalid_argument"),
    ("put with lease and ttl_ms", "/v1/kv/put", _j({"key": "b1", "value": "x", "lease": 1, "ttl_ms": 5000}), "application/json", 400, "invalid_argument"),
    ("keepalive of no lease", "/v1/leases/keepalive", _j({"leases": []}), "application/json", 400, "invalid_argument"),
    ("lease id not an int", "/v1/leases/revoke", _j({"lease": "7"}), "application/json", 400, "invalid_argument"),
    ("lease_expire in a batch", "/v1/batch", _j({"ops": [{"op": "put", "key": "b1", "value": "x"}, {"op": "lease_expire", "leases": [1]}]}), "application/json", 400, "unknown_op"),
    ("lease_expire as a path", "/v1/leases/expire", _j({"leases": [1]}), "application/json", 404, "not_found"),
    # Locks and fencing: a fence that is not the holder's is 409 fence_mismatch for every
    # fenced write (nothing applied, not even a txn's first op); an unknown lease 404; a
    # waiter that is gone 404 lock_not_held; bad names and fences 400/413.
    ("fenced put, nobody holds", "/v1/kv/put", _j({"key": "b1", "value": "x", "fence": {"name": "nobody", "token": 1}}), "application/json", 409, "fence_mismatch"),
    ("fenced delete, nobody holds", "/v1/kv/delete", _j({"key": "b1", "fence": {"name": "nobody", "token": 1}}), "application/json", 409, "fence_mismatch"),
    ("fenced cas, nobody holds", "/v1/kv/cas", _j({"key": "b1", "value": "x", "expect": {"version": 0}, "fence": {"name": "nobody", "token": 1}}), "application/json", 409, "fence_mismatch"),
    ("fenced txn, nobody holds", "/v1/kv/txn", _j({"compare": [], "success": [{"op": "put", "key": "b1", "value": "x"}], "fence": {"name": "nobody", "token": 1}}), "application/json", 409, "fence_mismatch"),
    ("fenced append, nobody holds", "/v1/streams/append", _j({"stream": "b1", "events": [{"data": "x"}], "fence": {"name": "nobody", "token": 1}}), "application/json", 409, "fence_mismatch"),
    ("fence inside a txn op", "/v1/kv/txn", _j({"compare": [], "success": [{"op": "put", "key": "b1", "value": "x", "fence": {"name": "l", "token": 1}}]}), "application/json", 400, "invalid_argument"),
    ("fence without token", "/v1/kv/put", _j({"key": "b1", "value": "x", "fence": {"name": "l"}}), "application/json", 400, "invalid_argument"),
    ("fence token zero", "/v1/kv/put", _j({"key": "b1", "value": "x", "fence": {"name": "l", "token": 0}}), "application/json", 400, "invalid_argument"),
    ("fence not an object", "/v1/kv/put", _j({"key": "b1", "value": "x", "fence": 7}), "application/json", 400, "invalid_argument"),
    ("acquire with unknown lease", "/v1/locks/acquire", _j({"name": "l", "lease": 10**9}), "application/json", 404, "lease_not_found"),
    ("acquire without lease", "/v1/locks/acquire", _j({"name": "l"}), "application/json", 400, "invalid_argument"),
    ("release of a waiter that is gone", "/v1/locks/release", _j({"name": "l", "fence": 10**9}), "application/json", 404, "lock_not_held"),
    ("release without fence", "/v1/locks/release", _j({"name": "l"}), "application/json", 400, "invalid_argument"),
    ("empty lock name", "/v1/locks/acquire", _j({"name": "", "lease": 1}), "application/json", 400, "invalid_argument"),
    ("lock name not a string", "/v1/locks/acquire", _j({"name": 5, "lease": 1}), "application/json", 400, "invalid_argument"),
    ("NUL in lock name", "/v1/locks/release", _j({"name": "a\u0000b", "fence": 1}), "application/json", 400, "invalid_argument"),
    ("lock name too long", "/v1/locks/acquire", _j({"name": "n" * (4 * KIB - 27), "lease": 1}), "application/json", 413, "key_too_large"),
    ("bad owner", "/v1/locks/acquire", _j({"name": "l", "lease": 1, "owner": ""}), "application/json", 400, "invalid_argument"),
    ("lock_acquire in a txn", "/v1/kv/txn", _j({"compare": [], "success": [{"op": "lock_acquire", "name": "l", "lease": 1}]}), "application/json", 400, "invalid_argument"),
    ("lock_list bad limit", "/v1/locks/list", _j({"limit": 0}), "application/json", 400, "invalid_argument"),
    # Unknown fields (issue 30 item 4): refused, naming them, on both wires, nested ones too.
    ("put with ttl (json)", "/v1/kv/put", _j({"key": "b1", "value": "x", "ttl": 30}), "application/json", 400, "unknown_field"),
    ("put with ttl (msgpack)", "/v1/kv/put", msgpack.packb({"key": "b1", "value": b"x", "ttl": 30}), "application/msgpack", 400, "unknown_field"),
    ("txn op with ttl", "/v1/kv/txn", _j({"success": [{"op": "put", "key": "b1", "value": "x", "ttl": 30}]}), "application/json", 400, "unknown_field"),
    ("compare with typo", "/v1/kv/txn", msgpack.packb({"compare": [{"key": "b1", "target": "version", "op": "==", "vaule": 0}], "success": [{"op": "put", "key": "b1", "value": b"x"}]}), "application/msgpack", 400, "unknown_field"),
    ("batch entry with ttl", "/v1/batch", _j({"ops": [{"op": "put", "key": "b1", "value": "x"}, {"op": "put", "key": "b2", "value": "x", "ttl": 30}]}), "application/json", 400, "unknown_field"),
    ("batch body with typo", "/v1/batch", _j({"ops": [{"op": "put", "key": "b1", "value": "x"}], "consistncy": "serializable"}), "application/json", 400, "unknown_field"),
    ("event with metadata", "/v1/streams/append", msgpack.packb({"stream": "b1", "events": [{"data": b"x", "metadata": {}}]}), "application/msgpack", 400, "unknown_field"),
    ("write with read options", "/v1/kv/put", _j({"key": "b1", "value": "x", "consistency": "serializable"}), "application/json", 400, "unknown_field"),
    ("value_b64 on a get", "/v1/kv/get", _j({"key": "b1", "value_b64": "eA=="}), "application/json", 400, "unknown_field"),
    ("another op's name in the body", "/v1/kv/put", _j({"op": "delete", "key": "b1", "value": "x"}), "application/json", 400, "invalid_argument"),
]


@pytest.mark.parametrize(
    ("name", "path", "body", "ctype", "status", "code"), CASES, ids=[c[0] for c in CASES]
)
def test_bad_input_gets_a_coded_4xx_and_changes_nothing(
    shared_cluster: LocalCluster, name, path, body, ctype, status, code
) -> None:
    before = _revision(shared_cluster)
    got_status, answer = _post(shared_cluster, path, body, ctype)
    assert (got_status, answer["error"]["code"]) == (status, code), answer
    assert answer["error"]["message"]
    # Nothing partially applied: not even the valid first op of a rejected batch.
    assert _revision(shared_cluster) == before
    assert _post(shared_cluster, "/v1/kv/get", _j({"key": "b1"}))[0] == 404


def test_an_unknown_field_is_named_with_the_known_ones(shared_cluster: LocalCluster) -> None:
    status, answer = _post(shared_cluster, "/v1/kv/put", _j({"key": "b1", "value": "x", "ttl": 30}))
    assert status == 400
    err = answer["error"]
    assert err["message"].startswith("put has unknown field 'ttl' (did you mean 'ttl_ms'?)")
    assert err["unknown"] == ["ttl"] and "ttl_ms" in err["known"]


def test_missing_key_and_failed_cas_have_their_own_codes(shared_cluster: LocalCluster) -> None:
    status, answer = _post(shared_cluster, "/v1/kv/get", _j({"key": "never-written"}))
    assert status == 404 and answer["error"]["code"] == "key_not_found"
    assert isinstance(answer["revision"], int)
    _post(shared_cluster, "/v1/kv/put", _j({"key": "lock", "value": "me"}))
    status, answer = _post(
        shared_cluster, "/v1/kv/cas", _j({"key": "lock", "value": "you", "expect": {"exists": False}})
    )
    assert status == 409 and answer["error"]["code"] == "compare_failed"
    assert answer["kv"]["value"] == "me"


def test_json_and_msgpack_bodies_roundtrip_binary_values(shared_cluster: LocalCluster) -> None:
    blob = bytes(range(256))
    status, _ = _post(
        shared_cluster, "/v1/kv/put", msgpack.packb({"key": "bin", "value": blob}), "application/msgpack"
    )
    assert status == 200
    status, answer = _post(shared_cluster, "/v1/kv/get", msgpack.packb({"key": "bin"}), "application/msgpack")
    assert answer["kv"]["value"] == blob
    status, answer = _post(shared_cluster, "/v1/kv/get", _j({"key": "bin"}))
    assert "value_b64" in answer["kv"]


def test_garbage_on_the_http_port_does_not_hurt_the_node(shared_cluster: LocalCluster) -> None:
    # Bytes straight on the socket: below TLS when the cluster runs it (garbage to the
    # handshake), HTTP garbage otherwise.
    node = shared_cluster.config.nodes[1]
    host, port = node.host, node.http_port
    for junk in (b"\x00\xff" * 1000, b"GET / HTTP/9.9\r\n\r\n", b"POST /v1/kv/put HTTP/1.1\r\nContent-Length: 99999999\r\n\r\nabc"):
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(junk)
            s.shutdown(socket.SHUT_WR)
            try:
                s.recv(1024)
            except OSError:
                pass
    status, _ = _post(shared_cluster, "/v1/kv/put", _j({"key": "still-alive", "value": "yes"}))
    assert status == 200
