"""What an unauthenticated or denied request may make a node write to its log (issue 27,
items 1, 12, 13), against the real Api in-process: no network, no raft (the state machine
is a stand-in that only holds the token table)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from types import SimpleNamespace

import pytest

from statekeeper.client.auth.tokens import new_token
from statekeeper.node.api.audit_log import AUDIT_LINES_PER_WINDOW, LOG_FIELD_CHARS
from statekeeper.node.api.routes import Api
from statekeeper.node.api.server import Request
from statekeeper.node.config import local_cluster
from statekeeper.node.config_tables import AuthSettings

# A generous bound on one audit line: a few request fields of LOG_FIELD_CHARS each.
MAX_LINE_CHARS = 6 * LOG_FIELD_CHARS


def _api(tokens: dict | None = None) -> Api:
    cfg = dataclasses.replace(local_cluster(secret="s" * 32), auth=AuthSettings(enabled=True))
    return Api(
        cfg, "node-0", SimpleNamespace(tokens=tokens or {}, lease_ns=lambda lease: None), None, None
    )


def _post(api: Api, path: str, body: dict | None = None, token: str | None = None):
    headers = {"content-type": "application/json"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    req = Request("POST", path, "", headers, json.dumps(body or {}).encode(), "127.0.0.1:9")
    resp = asyncio.run(api.dispatch(req))
    return resp.status, json.loads(resp.body)


def _auth_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "statekeeper.auth"]


def test_an_unknown_op_is_refused_before_authentication_logs_it(caplog) -> None:
    api = _api()
    caplog.set_level(logging.WARNING)
    caplog.clear()
    status, body = _post(api, "/v1/kv/" + "x" * 60_000)
    assert (status, body["error"]["code"]) == (400, "unknown_op")
    assert len(body["error"]["message"]) < 2 * LOG_FIELD_CHARS  # not echoed whole either
    assert _auth_lines(caplog) == []


def test_401_lines_are_rate_limited_and_short(caplog) -> None:
    api = _api()
    caplog.set_level(logging.WARNING)
    caplog.clear()
    for _ in range(200):
        assert _post(api, "/v1/kv/get", {"key": "k"})[0] == 401
    lines = _auth_lines(caplog)
    assert len(lines) <= AUDIT_LINES_PER_WINDOW + 1, len(lines)
    assert all(len(line) <= MAX_LINE_CHARS for line in lines)


def test_a_namespace_with_control_characters_is_refused_and_never_logged_raw(caplog) -> None:
    token, token_id, digest = new_token()
    rec = SimpleNamespace(
        hash=bytes.fromhex(digest),
        name="t",
        grants=(("other", "", "writer"),),
        expires_ms=0,
        created_ms=0,
    )
    api = _api({token_id: rec})
    caplog.set_level(logging.WARNING)
    caplog.clear()
    forged = "a\n2026-01-01 node-0 WARNING statekeeper.auth: \x1b[2Kforged"
    status, body = _post(api, "/v1/kv/put", {"ns": forged, "key": "k", "value": "v"}, token)
    assert (status, body["error"]["code"]) == (400, "invalid_argument"), body
    assert "control character" in body["error"]["message"]
    for line in _auth_lines(caplog):
        assert "\n" not in line and "\x1b" not in line, line


# -- the building blocks (node/api/audit_log.py) --------------------------------------------


def test_loggable_escapes_and_caps() -> None:
    from statekeeper.node.api.audit_log import loggable

    assert loggable("/v1/kv/put") == "/v1/kv/put"
    assert loggable("a\nb\x1b[31m\\x1b\u202e") == "a\\x0ab\\x1b[31m\\\\x1b\\u202e"
    long = loggable("x" * 60_000)
    assert long == "x" * LOG_FIELD_CHARS + f"...(+{60_000 - LOG_FIELD_CHARS} chars)"
    assert len(loggable("\n" * 1000)) <= LOG_FIELD_CHARS + 20


def test_audit_lines_past_the_budget_become_one_summary_line() -> None:
    from statekeeper.node.api.audit_log import AuditLog, WindowBudget

    now = [100.0]
    records: list[str] = []

    class Sink(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logger = logging.getLogger("test.audit")
    logger.propagate = False
    logger.addHandler(Sink())
    audit = AuditLog(logger, WindowBudget(3, 10.0, lambda: now[0]))
    written = [audit.warning("denied %d", i) for i in range(10)]
    assert written == [True] * 3 + [False] * 7
    assert records == ["denied 0", "denied 1", "denied 2"]
    now[0] += 10.0
    assert audit.warning("denied %d", 10)
    assert records[3].startswith("suppressed 7 more audit lines")
    assert records[4] == "denied 10"
    now[0] += 10.0
    assert audit.warning("denied %d", 11) and records[5] == "denied 11"  # nothing suppressed


def test_unknown_token_ids_cost_a_bounded_number_of_read_barriers() -> None:
    """Issue 27, item 12: every request with an unknown token id waited for a read barrier
    (a raft entry on a follower). Past the budget the node answers 401 without one."""
    from statekeeper.node.api.audit_log import WindowBudget

    api = _api()
    now = [0.0]
    budget = api.unknown_token_barriers = WindowBudget(5, 1.0, lambda: now[0])
    barriers: list[str] = []

    async def wait(consistency, min_rev):
        barriers.append(consistency)

    api.reads = SimpleNamespace(wait=wait)
    for _ in range(50):
        assert _post(api, "/v1/kv/get", {"key": "k"}, new_token()[0])[0] == 401
    assert len(barriers) == budget.per_window
    now[0] += 1.0
    assert _post(api, "/v1/kv/get", {"key": "k"}, new_token()[0])[0] == 401
    assert len(barriers) == budget.per_window + 1
