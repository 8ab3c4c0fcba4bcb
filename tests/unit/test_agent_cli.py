"""`statekeeper agent ...` over the in-memory client: help, tables, JSON, rollback, and
errors as one line."""

from __future__ import annotations

import json
import os

import pytest

from statekeeper.client.agent import Agent
from statekeeper.cluster import agent_cli, cli, client_cli
from tests.unit.test_agent_fake import MemoryClient


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> MemoryClient:
    c = MemoryClient()
    monkeypatch.setattr(agent_cli, "open_client", lambda args: c)
    a = Agent(c, "agent-7", reducer=lambda s, e: s, initial={})
    a.log("tool.ok", {"tool": "search"}, step=1)
    a.checkpoint({"plan": ["a", "b"], "raw": b"\x00\x01"}, step=1, metadata={"run": "r1"})
    a.log("tool.ok", {"tool": "fetch"}, step=2)
    a.checkpoint({"plan": ["a"]}, step=2)
    Agent(c, "other").log("x", b"raw")
    return c


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = cli.main(argv)
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("sub", ["list", "show", "history", "rollback", "checkpoints", "gc"])
def test_help(sub: str, capsys) -> None:
    code, out, _ = run(["agent", sub, "--help"], capsys)
    assert code == 0 and out.startswith(f"usage: statekeeper agent {sub}")
    assert "examples:" in out


def test_list_table_and_json(store, capsys) -> None:
    code, out, _ = run(["agent", "list"], capsys)
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:5] == ["AGENT", "CKPT", "STEP", "POSITION", "EVENTS"]
    assert lines[1].split()[:5] == ["agent-7", "2", "2", "2", "2"]
    assert lines[2].split()[:5] == ["other", "-", "-", "-", "1"]
    code, out, _ = run(["agent", "list", "--json"], capsys)
    assert [r["agent"] for r in json.loads(out)] == ["agent-7", "other"]


def test_show_prints_state_as_json(store, capsys) -> None:
    code, out, _ = run(["agent", "show", "agent-7", "--ckpt", "1"], capsys)
    assert code == 0 and "checkpoint #1" in out and '"run": "r1"' in out
    state = json.loads(out.split("state:\n", 1)[1])
    assert state == {"plan": ["a", "b"], "raw": {"$bytes": "AAE="}}
    code, out, _ = run(["agent", "show", "agent-7", "--json"], capsys)
    doc = json.loads(out)
    assert doc["checkpoint"]["ckpt"] == 2 and doc["state"] == {"plan": ["a"]}


def test_history_and_rollback(store, capsys) -> None:
    code, out, _ = run(["agent", "rollback", "agent-7", "--to", "1"], capsys)
    assert code == 0 and "the state at step 1 (checkpoint #1, copied as stored) is current again as checkpoint #3" in out
    code, out, _ = run(["agent", "history", "agent-7"], capsys)
    lines = out.splitlines()
    assert lines[0].split() == ["REV", "TIME", "KIND", "STEP", "SEQ", "CKPT", "TYPE", "SUMMARY"]
    assert [ln.split()[3] for ln in lines[1:]] == ["event", "checkpoint", "event", "checkpoint", "rollback"]
    code, out, _ = run(["agent", "history", "agent-7", "--json", "--limit", "1"], capsys)
    assert json.loads(out)[0]["kind"] == "rollback"


def test_checkpoints_newest_first_with_filters(store, capsys) -> None:
    a = Agent(store, "agent-7")  # a third checkpoint, with a number in its metadata
    a.latest()
    a.checkpoint({"plan": []}, step=3, metadata={"run": "r2", "n": 3})
    code, out, _ = run(["agent", "checkpoints", "agent-7"], capsys)
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:4] == ["CKPT", "KIND", "STEP", "POSITION"]
    assert [ln.split()[0] for ln in lines[1:]] == ["#3", "#2", "#1"]
    code, out, _ = run(["agent", "checkpoints", "agent-7", "--filter", "run=r1"], capsys)
    assert [ln.split()[0] for ln in out.splitlines()[1:]] == ["#1"] and '"run": "r1"' in out
    code, out, _ = run(["agent", "checkpoints", "agent-7", "--filter", "n=3", "--filter",
                        "run=r2", "--json"], capsys)
    assert [c["ckpt"] for c in json.loads(out)] == [3]
    code, out, _ = run(["agent", "checkpoints", "agent-7", "--limit", "2", "--json"], capsys)
    assert [c["ckpt"] for c in json.loads(out)] == [3, 2]
    code, out, _ = run(["agent", "checkpoints", "agent-7", "--filter", "run=none"], capsys)
    assert code == 0 and "no checkpoints matching run=none" in out
    code, _, err = run(["agent", "checkpoints", "agent-7", "--filter", "run"], capsys)
    assert code == 2 and "KEY=VALUE" in err


def test_gc_deletes_orphan_chunks(store, capsys) -> None:
    a = Agent(store, "agent-7", inline_limit=64, chunk_size=256)
    a.latest()
    store.fail["txn"] = RuntimeError("crash before the manifest txn")
    with pytest.raises(RuntimeError):
        a.checkpoint({"blob": os.urandom(1000)}, step=3)
    del store.fail["txn"]
    orphans = len(store.range("agent/agent-7/chunk/").kvs)
    assert orphans == 5  # 1000 bytes + the msgpack map and the envelope header: 5 chunks
    code, out, _ = run(["agent", "gc", "agent-7"], capsys)
    assert code == 0 and out.strip() == "agent agent-7: deleted 5 orphan chunk keys"
    code, out, _ = run(["agent", "gc", "agent-7", "--json"], capsys)
    assert json.loads(out) == {"agent": "agent-7", "deleted": 0}


def test_errors_are_one_line(store, capsys) -> None:
    # Not found is 3 in every command (as `get` documents), a usage mistake 2.
    code, _, err = run(["agent", "show", "nobody"], capsys)
    assert code == 3 and "has no checkpoint" in err and "Traceback" not in err
    code, _, err = run(["agent", "rollback", "agent-7"], capsys)
    assert code == 2 and "exactly one" in err
    code, _, err = run(["agent", "rollback", "agent-7", "--to", "0"], capsys)
    assert code == 3 and "no checkpoint with step <= 0" in err


def test_endpoints_come_from_flag_or_env(monkeypatch, tmp_path) -> None:
    # Without either (and no config) it refuses: tests/unit/test_client_endpoints_config.py.
    args = cli.build_parser().parse_args(["agent", "list", "--config", str(tmp_path / "none.toml")])
    monkeypatch.setenv("STATEKEEPER_ENDPOINTS", "http://a:1,http://b:2")
    assert client_cli.endpoints(args) == ["http://a:1", "http://b:2"]
    args.endpoints = "http://c:3"
    assert client_cli.endpoints(args) == ["http://c:3"]
