"""GET /v1/health/ready on a node that is stopping answers the same 503 whether the request
started before the drain or after it (node/shutdown.py step 1).

A request already read when SIGTERM arrived used to be answered by the readiness handler
(503 `not_ready`), one read after it by the server's drain (503 `unavailable`): the code
depended on a race, and test_graceful.py's leader SIGTERM test failed on it about once in
a few runs (a fresh clone's CI run, issue 29)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

from statekeeper.node.api.routes import Api
from statekeeper.node.api.server import Request
from statekeeper.node.config import ClusterConfig, NodeConfig


def _api() -> Api:
    cfg = ClusterConfig(
        nodes=(NodeConfig(id="n0", host="127.0.0.1", raft_port=1, http_port=2),), secret="s"
    )
    status = SimpleNamespace(
        ready=True, restoring=False, leader_id="n0", applied_index=5, leader_commit_index=5
    )
    raft = SimpleNamespace(status=lambda: status, leader_known=lambda: True)
    return Api(cfg, "n0", sm=None, raft=raft, proposer=None)


def _ready(api: Api) -> tuple[int, dict]:
    resp = asyncio.run(api.dispatch(Request("GET", "/v1/health/ready", "", {}, b"")))
    return resp.status, json.loads(resp.body)


def test_a_ready_node_says_ready() -> None:
    assert _ready(_api()) == (200, {"ready": True, "node_id": "n0"})


def test_a_stopping_node_answers_ready_with_unavailable_like_the_drain() -> None:
    api = _api()
    api.shutting_down = True  # what the drain sets before the server rejects new requests
    status, body = _ready(api)
    assert status == 503
    assert body["ready"] is False
    assert body["error"]["code"] == "unavailable", body
    assert "shutting down" in body["error"]["message"]
