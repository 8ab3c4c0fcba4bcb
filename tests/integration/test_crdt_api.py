"""The CRDT ops over HTTP against a real 3-node cluster, raw (no client-side CRDT code):
merge and crdt_get through every node in msgpack and JSON, concurrent merges without a CAS
loop converging to the sum, a repeated merge taking no revision, merge in a txn and a batch,
the envelope seen by kv get; and bad input: a coded 4xx, nothing applied."""

from __future__ import annotations

import base64
import json
import threading
import uuid

import msgpack
import pytest

from statekeeper.client.crdt import model
from statekeeper.cluster.supervisor import LocalCluster
from tests.integration.cluster_fixture import raw_connection, raw_headers

pytestmark = pytest.mark.integration

MSGPACK = "application/msgpack"
JSON = "application/json"


def _ns() -> str:
    return f"crdt-{uuid.uuid4().hex[:8]}"


def _post(lc: LocalCluster, path: str, body: dict, *, node: int = 0, fmt: str = MSGPACK):
    """(status, decoded answer) of one POST to node `node` (index into lc.node_ids)."""
    conn = raw_connection(lc, lc.node_ids[node], timeout=15)
    try:
        if fmt == MSGPACK:
            data = msgpack.packb(body, use_bin_type=True)
        else:
            data = json.dumps(body).encode()
        conn.request("POST", path, body=data, headers=raw_headers(fmt))
        r = conn.getresponse()
        raw = r.read()
        if r.getheader("Content-Type", "").startswith(MSGPACK):
            return r.status, msgpack.unpackb(raw, raw=False, strict_map_key=False)
        return r.status, json.loads(raw)
    finally:
        conn.close()


def _merge(lc, ns, key, t, state, *, node=0, **kw):
    body = {"ns": ns, "key": key, "type": t, "state": model.encode(t, state), **kw}
    return _post(lc, "/v1/crdt/merge", body, node=node)


def _get(lc, ns, key, *, node=0, **kw):
    return _post(lc, "/v1/crdt/get", {"ns": ns, "key": key, **kw}, node=node)


def _inc(rid: str, n: int) -> dict:
    return model.gcounter_inc(model.empty("gcounter"), rid, n)


def _revision(lc: LocalCluster, ns: str) -> int:
    return _post(lc, "/v1/kv/get", {"ns": ns, "key": "probe"})[1]["revision"]


# -- merge and read --------------------------------------------------------------------------


def test_merge_through_every_node_and_read_back_everywhere(shared_cluster: LocalCluster):
    lc, ns = shared_cluster, _ns()
    revisions = []
    for i in range(3):  # one replica per node; followers forward the write inside raft
        status, r = _merge(lc, ns, "visits", "gcounter", _inc(f"r{i}", i + 1), node=i)
        assert status == 200 and r["changed"] is True, r
        revisions.append(r["revision"])
    assert r["value"] == 6 and revisions == sorted(revisions)
    # The same delta again (a retry without idempotency key): ok, nothing new, no revision.
    status, again = _merge(lc, ns, "visits", "gcounter", _inc("r2", 3), node=1)
    assert status == 200 and again == {"revision": again["revision"], "changed": False, "value": 6}
    assert again["revision"] >= revisions[-1]
    state = model.merge(
        "gcounter", model.merge("gcounter", _inc("r0", 1), _inc("r1", 2)), _inc("r2", 3)
    )
    for i in range(3):
        status, g = _get(lc, ns, "visits", node=i, state=True)
        assert status == 200
        assert g == {
            "revision": g["revision"],
            "type": "gcounter",
            "value": 6,
            "state": model.encode("gcounter", state),
            "mod_revision": revisions[-1],
            "version": 3,
        }
    # The key is an ordinary kv key holding the envelope.
    status, kv = _post(lc, "/v1/kv/get", {"ns": ns, "key": "visits"})
    assert status == 200
    envelope = msgpack.unpackb(kv["kv"]["value"], raw=False)
    assert envelope == [b"skcrdt", 1, "gcounter", state]
    # And at a past revision.
    status, past = _get(lc, ns, "visits", revision=revisions[0])
    assert (status, past["value"], "state" in past) == (200, 1, False)


def test_idempotency_key_replays(shared_cluster: LocalCluster):
    lc, ns = shared_cluster, _ns()
    ik = str(uuid.uuid4())
    s1, first = _merge(lc, ns, "c", "gcounter", _inc("a", 1), idempotency_key=ik)
    _merge(lc, ns, "c", "gcounter", _inc("b", 1))
    s2, replay = _merge(lc, ns, "c", "gcounter", _inc("a", 1), idempotency_key=ik, node=2)
    assert (s1, s2) == (200, 200) and replay == {**first, "replayed": True}


def test_json_wire(shared_cluster: LocalCluster):
    lc, ns = shared_cluster, _ns()
    delta = model.orset_add(model.empty("orset"), "a", b"\xff\x00")
    body = {
        "ns": ns,
        "key": "s",
        "type": "orset",
        "state_b64": base64.b64encode(model.encode("orset", delta)).decode(),
    }
    status, r = _post(lc, "/v1/crdt/merge", body, fmt=JSON)
    assert status == 200 and r["value"] == [{"b64": "/wA="}], r
    delta = model.orset_add(model.empty("orset"), "b", "text")
    body["state_b64"] = base64.b64encode(model.encode("orset", delta)).decode()
    status, r = _post(lc, "/v1/crdt/merge", body, fmt=JSON)
    assert status == 200 and r["value"] == ["text", {"b64": "/wA="}]
    status, g = _post(lc, "/v1/crdt/get", {"ns": ns, "key": "s", "state": True}, fmt=JSON)
    assert status == 200 and g["type"] == "orset"
    stored = model.decode("orset", base64.b64decode(g["state_b64"]))
    assert model.value("orset", stored) == ["text", b"\xff\x00"]


def test_concurrent_merges_need_no_cas_and_converge(shared_cluster: LocalCluster):
    lc, ns = shared_cluster, _ns()
    per_agent, agents = 15, 3
    errors: list = []

    def agent(i: int) -> None:
        local = model.empty("pncounter")
        for n in range(per_agent):
            amount = -1 if n % 5 == 4 else 2
            delta = model.pncounter_add(local, f"agent-{i}", amount)
            local = model.merge("pncounter", local, delta)
            status, r = _post(
                lc,
                "/v1/crdt/merge",
                {
                    "ns": ns,
                    "key": "c",
                    "type": "pncounter",
                    "state": model.encode("pncounter", delta),
                },
                node=i % 3,
            )
            if status != 200 or not r["changed"]:
                errors.append((status, r))

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(agents)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    expected = agents * sum(-1 if n % 5 == 4 else 2 for n in range(per_agent))
    for i in range(3):
        status, g = _get(lc, ns, "c", node=i)
        assert (status, g["value"], g["version"]) == (200, expected, agents * per_agent)


def test_merge_in_a_txn_and_a_batch(shared_cluster: LocalCluster):
    lc, ns = shared_cluster, _ns()
    m = {
        "op": "merge",
        "key": "c",
        "type": "gcounter",
        "state": model.encode("gcounter", _inc("a", 4)),
    }
    status, r = _post(
        lc, "/v1/kv/txn", {"ns": ns, "success": [m, {"op": "put", "key": "k", "value": b"v"}]}
    )
    assert status == 200 and r["succeeded"], r
    assert r["results"][0] == {"revision": r["revision"], "changed": True, "value": 4}
    status, b = _post(
        lc,
        "/v1/batch",
        {"ops": [{**m, "ns": ns}, {"op": "crdt_get", "ns": ns, "key": "c", "state": True}]},
    )
    assert status == 200, b
    assert b["results"][0] == {"revision": r["revision"], "changed": False, "value": 4}
    assert b["results"][1]["value"] == 4
    # A txn may not write a CRDT key twice.
    status, bad = _post(lc, "/v1/kv/txn", {"ns": ns, "success": [m, {**m}]})
    assert (status, bad["error"]["code"]) == (400, "invalid_argument")


# -- bad input --------------------------------------------------------------------------------


def test_bad_input_gets_a_coded_4xx_and_applies_nothing(shared_cluster: LocalCluster):
    lc, ns = shared_cluster, _ns()
    assert _post(lc, "/v1/kv/put", {"ns": ns, "key": "plain", "value": b"hello"})[0] == 200
    assert _merge(lc, ns, "g", "gcounter", _inc("a", 1))[0] == 200
    before = _revision(lc, ns)
    big = model.orset_add(model.empty("orset"), "a", "x" * 3000)
    cases = [
        # (body, status, code)
        (
            {"key": "plain", "type": "gcounter", "state": model.encode("gcounter", {})},
            409,
            "crdt_type_mismatch",
        ),
        (
            {
                "key": "g",
                "type": "pncounter",
                "state": model.encode("pncounter", model.empty("pncounter")),
            },
            409,
            "crdt_type_mismatch",
        ),
        # The state's bytes are opaque to the OpenAPI document: a code of their own.
        ({"key": "g", "type": "gcounter", "state": b"\xc1junk"}, 400, "invalid_crdt_state"),
        (
            {"key": "g", "type": "gcounter", "state": msgpack.packb({"a": -3})},
            400,
            "invalid_crdt_state",
        ),
        ({"key": "g", "type": "hyperloglog", "state": b"\x80"}, 400, "invalid_argument"),
        ({"key": "g", "type": "gcounter"}, 400, "invalid_argument"),
        ({"key": "", "type": "gcounter", "state": b"\x80"}, 400, "invalid_argument"),
        ({"key": "k" * 5000, "type": "gcounter", "state": b"\x80"}, 413, "key_too_large"),
    ]
    for body, want_status, want_code in cases:
        status, r = _post(lc, "/v1/crdt/merge", {"ns": ns, **body})
        assert (status, r["error"]["code"]) == (want_status, want_code), (body, r)
    status, r = _post(
        lc,
        "/v1/crdt/merge",
        {"ns": ns, "key": "g", "type": "gcounter", "state": b"\x80" * 2 * 1024 * 1024},
    )
    assert status == 413 and r["error"]["code"] in ("value_too_large", "request_too_large")
    status, r = _merge(lc, ns, "plain", "gcounter", {})
    assert r["error"]["found"] is None
    assert _merge(lc, ns, "g", "orset", big)[1]["error"]["found"] == "gcounter"
    assert _revision(lc, ns) == before  # nothing applied
    status, r = _get(lc, ns, "missing")
    assert (status, r["error"]["code"], r["error"]["revision"]) == (404, "not_found", before)
    status, r = _get(lc, ns, "plain")
    assert (status, r["error"]["code"]) == (409, "crdt_type_mismatch")
    # The node keeps serving.
    assert _get(lc, ns, "g")[1]["value"] == 1
