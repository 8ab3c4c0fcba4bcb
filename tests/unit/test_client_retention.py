"""The client's retention operations and truncate_stream, sans-IO: request paths and
bodies (through a Client whose _execute records the Request), age parsing, and the
`statekeeper gc` argument parsing and `within` display. No network."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from typing import Any

import msgpack
import pytest

from statekeeper.client import AsyncClient, Client, InvalidRequest
from statekeeper.client.retention.commands import parse_age
from statekeeper.cluster import gc_cli
from statekeeper.cluster.cli import build_parser
from statekeeper.cluster.gc_cli import rules_text


class Recording(Client):
    """A Client that records requests instead of sending them."""

    def __init__(self) -> None:
        super().__init__(["http://127.0.0.1:1"], ns="agents")
        self.sent: list[Any] = []

    def _execute(self, request, endpoint=None):  # type: ignore[override]
        self.sent.append(request)
        return {"ok": True}


def body(req) -> dict:
    return msgpack.unpackb(req.body, raw=False)


def test_requests():
    c = Recording()
    try:
        c.retention_set("agent/", keep_last=10, keep_every=100, max_age="30d")
        c.retention_delete("log/", target="streams")
        c.retention_list(all_namespaces=True, limit=5)
        c.retention_status()
        c.truncate_stream("log/x", 7)
        paths = [r.path for r in c.sent]
        assert paths == [
            "/v1/retention/set",
            "/v1/retention/delete",
            "/v1/retention/list",
            "/v1/retention/status",
            "/v1/streams/truncate",
        ]
        b = body(c.sent[0])
        assert {k: b[k] for k in ("ns", "prefix", "target", "keep_last", "keep_every")} == {
            "ns": "agents",
            "prefix": "agent/",
            "target": "keys",
            "keep_last": 10,
            "keep_every": 100,
        }
        assert b["max_age_s"] == 30 * 86_400 and b["idempotency_key"]
        assert body(c.sent[1])["target"] == "streams"
        assert "ns" not in body(c.sent[2]) and body(c.sent[2])["limit"] == 5
        assert body(c.sent[3])["ns"] == "agents"
        t = body(c.sent[4])
        assert (t["stream"], t["before_seq"], t["ns"]) == ("log/x", 7, "agents")
    finally:
        c.close()


@pytest.mark.parametrize(
    "age, seconds",
    [(90, 90), (1.5, 1), ("45s", 45), ("90m", 5400), ("12h", 43_200), ("2d", 172_800),
     ("1w", 604_800), ("30", 30), (datetime.timedelta(hours=1), 3600)],
)
def test_parse_age(age, seconds):
    assert parse_age(age) == seconds


@pytest.mark.parametrize("bad", ["", "3y", "-1d", 0, 0.5, True, None])
def test_parse_age_refuses(bad):
    with pytest.raises(InvalidRequest):
        parse_age(bad)


def test_within_request_shape():
    c = Recording()
    try:
        c.retention_set("agent/", keep_last=10, within="ckpt")
        c.retention_set("agent/", keep_last=10)
        assert body(c.sent[0])["within"] == "ckpt"
        assert "within" not in body(c.sent[1])  # absent, not null: the default
    finally:
        c.close()


def test_within_request_shape_async():
    sent = []

    class AsyncRecording(AsyncClient):
        async def _execute(self, request, endpoint=None):  # type: ignore[override]
            sent.append(request)
            return {"ok": True}

    async def go():
        c = AsyncRecording(["http://127.0.0.1:1"], ns="agents")
        try:
            await c.retention_set("agent/", keep_last=3, max_age="1d", within="ckpt")
        finally:
            await c.close()

    asyncio.run(go())
    b = body(sent[0])
    assert (b["ns"], b["prefix"], b["within"], b["keep_last"]) == ("agents", "agent/", "ckpt", 3)


def test_gc_cli_parses_within():
    p = build_parser()
    a = p.parse_args(["gc", "policy", "set", "--prefix", "agent/", "--within", "ckpt",
                      "--keep-last", "10"])
    assert (a.prefix, a.within, a.keep_last) == ("agent/", "ckpt", 10)
    assert p.parse_args(["gc", "policy", "set", "--prefix", "x/", "--keep-last", "1"]).within is None


def test_gc_cli_shows_within():
    p = {"keep_last": 10, "keep_every": None, "max_age_s": 86_400, "within": "ckpt"}
    assert rules_text(p) == "keep_last=10 max_age=1d within=ckpt"
    assert rules_text({**p, "within": None}) == "keep_last=10 max_age=1d"


def test_gc_cli_passes_within(monkeypatch, capsys):
    c = Recording()
    monkeypatch.setattr(gc_cli, "open_client", lambda args: contextlib.nullcontext(c))
    calls = []
    monkeypatch.setattr(
        c, "retention_set",
        lambda prefix, **kw: calls.append((prefix, kw)) or {
            "created": True, "revision": 3,
            "policy": {"keep_last": 2, "within": kw["within"]},
        },
    )
    args = build_parser().parse_args(
        ["gc", "policy", "set", "--prefix", "agent/", "--within", "ckpt", "--keep-last", "2"]
    )
    assert gc_cli.cmd_policy(args) == 0
    assert calls[0][0] == "agent/" and calls[0][1]["within"] == "ckpt"
    assert "keep_last=2 within=ckpt" in capsys.readouterr().out
    c.close()


def test_gc_cli_parses():
    p = build_parser()
    a = p.parse_args(["gc", "policy", "set", "--ns", "x", "--prefix", "agent/",
                      "--keep-last", "10", "--keep-every", "100", "--max-age", "30d"])
    assert (a.action, a.ns, a.prefix, a.keep_last, a.keep_every, a.max_age) == (
        "set", "x", "agent/", 10, 100, "30d")
    s = p.parse_args(["gc", "status", "--json"])
    assert s.json and s.ns == "default"
