"""What a web page may make a browser send to a node with auth off (issue 27 item 10):
no POST without a JSON/msgpack Content-Type (CSRF without a preflight), no request with a
foreign Origin, no Host naming another site (DNS rebinding). The real Api in-process, no
network and no raft: every refusal comes before routing."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from types import SimpleNamespace

import pytest

from statekeeper.node.api import routes as http_api
from statekeeper.node.api import web_guard
from statekeeper.node.api.routes import Api
from statekeeper.node.api.server import Request
from statekeeper.node.api.web_guard import WebGuard
from statekeeper.node.config import local_cluster
from statekeeper.node.config_tables import AuthSettings, HttpSettings
from statekeeper.node.errors import OpError
from statekeeper.node.openapi import document as openapi

JSON_TYPE = {"content-type": "application/json"}


def _api(auth: bool = False, **http) -> Api:
    cfg = local_cluster(secret="s" * 32)
    cfg = dataclasses.replace(cfg, auth=AuthSettings(enabled=auth), http=HttpSettings(**http))
    # The state machine: a stand-in that holds the token table only (auth needs it).
    sm = SimpleNamespace(tokens={}, lease_ns=lambda lease: None)
    return Api(cfg, "node-0", sm, None, None)


def _send(api: Api, method: str, path: str, headers: dict[str, str]) -> tuple[int, str]:
    body = b'{"key": "k", "value": "v"}' if method == "POST" else b""
    resp = asyncio.run(api.dispatch(Request(method, path, "", headers, body, "127.0.0.1:9")))
    return resp.status, json.loads(resp.body)["error"]["code"]


def test_a_post_without_content_type_is_415() -> None:
    """It read as JSON: a page's fetch(url, {method: "POST", body}) wrote without a preflight."""
    headers = {"host": "127.0.0.1:7000"}
    assert _send(_api(), "POST", "/v1/kv/put", headers) == (415, "unsupported_media_type")


def test_a_foreign_origin_is_403() -> None:
    headers = {"host": "127.0.0.1:7000", "origin": "https://evil.example", **JSON_TYPE}
    assert _send(_api(), "POST", "/v1/kv/put", headers) == (403, "origin_not_allowed")
    assert _send(_api(), "GET", "/v1/status", headers) == (403, "origin_not_allowed")


def test_a_rebinding_host_is_421_with_auth_off() -> None:
    headers = {"host": "evil.example:7000"}
    assert _send(_api(), "GET", "/v1/status", headers) == (421, "host_not_allowed")
    assert _send(_api(), "POST", "/v1/kv/get", {**headers, **JSON_TYPE}) == (
        421,
        "host_not_allowed",
    )


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1:7000",
        "127.0.0.1:21000",  # a proxy on another port (chaos toxiproxy)
        "10.1.2.3",
        "[::1]:7000",
        "localhost:7000",
        "LOCALHOST.",
        "node-0.internal:7000",  # a node's configured host
        "lb.example",  # [http] allowed_hosts
    ],
)
def test_hosts_that_name_the_node_pass(host: str) -> None:
    guard = WebGuard(("127.0.0.1", "node-0.internal"), (), ("lb.example",), False)
    guard.check("GET", {"host": host})


def test_remembered_verdicts_stay_the_same_and_the_table_stays_bounded() -> None:
    """Verdicts are cached per Host value (issue 28): a refused value stays refused on every
    later request, and made-up values beyond the table's size are still judged."""
    guard = WebGuard(("127.0.0.1",), (), (), False)
    for _ in range(3):
        guard.check("GET", {"host": "127.0.0.1:7000"})
        with pytest.raises(OpError) as refused:
            guard.check("GET", {"host": "evil.example:7000"})
        assert refused.value.code == "host_not_allowed"
    for i in range(web_guard.HOST_VERDICTS_KEPT + 10):
        with pytest.raises(OpError):
            guard.check("GET", {"host": f"evil{i}.example"})
    assert len(guard._host_verdicts) == web_guard.HOST_VERDICTS_KEPT
    with pytest.raises(OpError):  # past the table's size: judged afresh, still refused
        guard.check("GET", {"host": "late.example"})
    guard.check("GET", {"host": "10.9.9.9"})


def test_any_host_with_auth_on_and_a_configured_origin_pass() -> None:
    WebGuard(("127.0.0.1",), (), (), True).check("GET", {"host": "evil.example"})
    guard = WebGuard(("127.0.0.1",), ("https://ui.example",), (), False)
    guard.check("POST", {"host": "127.0.0.1", "origin": "https://ui.example", **JSON_TYPE})
    guard.check("POST", {"host": "127.0.0.1", "content-type": "application/msgpack"})


def test_the_served_document_declares_bearer_auth_when_auth_is_on() -> None:
    """It declared none (schemathesis then flagged the 401s: issue 27 item 14)."""
    api = _api(auth=True)
    req = Request("GET", "/v1/openapi.json", "", {"host": "127.0.0.1:7000"}, b"", "127.0.0.1:9")
    doc = json.loads(asyncio.run(api.dispatch(req)).body)
    assert doc["components"]["securitySchemes"]["bearerAuth"] == {
        **doc["components"]["securitySchemes"]["bearerAuth"],
        "type": "http",
        "scheme": "bearer",
    }
    for path, item in doc["paths"].items():
        for op in item.values():
            needs_token = path not in http_api.OPEN_ROUTES
            assert op.get("security") == ([{"bearerAuth": []}] if needs_token else None), path
    assert openapi.OPEN_PATHS == http_api.OPEN_ROUTES
    # Auth off: no token is needed, and the document says none.
    assert "securitySchemes" not in openapi.document()["components"]
