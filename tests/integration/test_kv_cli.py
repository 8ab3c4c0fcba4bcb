"""The etcdctl-like CLI (cluster/kv_cli.py) against the shared cluster (TLS and auth, through
$STATEKEEPER_CA_FILE and $STATEKEEPER_TOKEN), as a script would run it: a subprocess,
`python -m statekeeper.cluster.cli ... --endpoints ...`, its stdout and its exit code."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from statekeeper.client import Client
from statekeeper.cluster.supervisor import LocalCluster

ROOT = Path(__file__).resolve().parents[2]


def _urls(lc: LocalCluster) -> list[str]:
    return [lc.url(i) for i in lc.node_ids]


def _ns() -> str:
    return f"kv-{uuid.uuid4().hex[:8]}"


def run(
    lc: LocalCluster | None,
    *argv: str,
    ns: str | None = None,
    stdin: bytes | str | None = None,
    endpoints: str | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    if endpoints is None:
        assert lc is not None
        endpoints = ",".join(_urls(lc))
    cmd = [sys.executable, "-m", "statekeeper.cluster.cli", *argv, "--endpoints", endpoints]
    if ns:
        cmd += ["--ns", ns]
    data = stdin.encode() if isinstance(stdin, str) else stdin
    p = subprocess.run(cmd, input=data, capture_output=True, timeout=60, cwd=ROOT, env=env)
    return subprocess.CompletedProcess(
        p.args, p.returncode, p.stdout.decode("utf-8"), p.stderr.decode("utf-8")
    )


def ok(p: subprocess.CompletedProcess, code: int = 0) -> str:
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    return p.stdout


def test_put_get_in_three_formats_and_missing_key_exits_3(shared_cluster: LocalCluster) -> None:
    ns = _ns()
    assert ok(run(shared_cluster, "put", "greeting", "hello world", ns=ns)) == "OK\n"
    assert ok(run(shared_cluster, "get", "greeting", ns=ns)) == "greeting\nhello world\n"
    doc = json.loads(ok(run(shared_cluster, "get", "greeting", "-w", "json", ns=ns)))
    assert doc["count"] == 1 and doc["revision"] >= doc["kvs"][0]["mod_revision"]
    assert doc["kvs"][0]["key"] == "greeting" and doc["kvs"][0]["value"] == "hello world"
    assert doc["kvs"][0]["version"] == 1
    lines = ok(run(shared_cluster, "get", "greeting", "-w", "table", ns=ns)).splitlines()
    assert lines[0].split() == ["KEY", "VERSION", "MOD_REVISION", "VALUE"]
    assert lines[1].split()[0] == "greeting" and lines[1].endswith("hello world")

    missing = run(shared_cluster, "get", "nope", ns=ns)
    assert ok(missing, 3) == "" and "key not found: nope" in missing.stderr
    assert json.loads(ok(run(shared_cluster, "get", "nope", "-w", "json", ns=ns), 3))["count"] == 0
    # put -w json gives the revision the get reported
    put = json.loads(ok(run(shared_cluster, "put", "greeting", "again", "-w", "json", ns=ns)))
    got = json.loads(ok(run(shared_cluster, "get", "greeting", "-w", "json", ns=ns)))
    assert got["kvs"][0]["mod_revision"] == put["revision"] and got["kvs"][0]["version"] == 2
    old = ok(run(shared_cluster, "get", "greeting", "--rev", str(put["revision"] - 1), ns=ns))
    assert old == "greeting\nhello world\n"


def test_put_from_stdin_binary_values_and_options(shared_cluster: LocalCluster) -> None:
    ns = _ns()
    text = "line one\nline two\n"
    ok(run(shared_cluster, "put", "doc", "-", ns=ns, stdin=text))
    assert ok(run(shared_cluster, "get", "doc", ns=ns)) == f"doc\n{text}\n"
    blob = bytes(range(250, 256)) + b"\x00\x01"
    ok(run(shared_cluster, "put", "blob", "-", ns=ns, stdin=blob))
    marker = "base64:" + base64.b64encode(blob).decode()
    assert ok(run(shared_cluster, "get", "blob", ns=ns)) == f"blob\n{marker}\n"
    kv = json.loads(ok(run(shared_cluster, "get", "blob", "-w", "json", ns=ns)))["kvs"][0]
    assert "value" not in kv and base64.b64decode(kv["value_base64"]) == blob
    with Client(_urls(shared_cluster), ns=ns) as c:
        assert c.get("blob").value == blob and c.get("doc").text == text

    # --ttl gives the key a lease; --idempotency-key replays the first put
    r = json.loads(ok(run(shared_cluster, "put", "t", "v", "--ttl", "60", "-w", "json", ns=ns)))
    assert r["lease"] and r["replayed"] is False
    lease = str(r["lease"])
    ok(run(shared_cluster, "put", "t2", "v", "--lease", lease, ns=ns))
    args = ("put", "once", "v", "--idempotency-key", f"idem-{ns}", "-w", "json")
    first = json.loads(ok(run(shared_cluster, *args, ns=ns)))
    again = json.loads(ok(run(shared_cluster, *args, ns=ns)))
    assert again["replayed"] is True and again["revision"] == first["revision"]
    with Client(_urls(shared_cluster), ns=ns) as c:
        assert c.lease_info(int(lease)).keys == ["t", "t2"]
    # a lease that does not exist, and --lease with --ttl: invalid input
    assert "lease" in run(shared_cluster, "put", "x", "v", "--lease", "999999", ns=ns).stderr
    ok(run(shared_cluster, "put", "x", "v", "--lease", "999999", ns=ns), 3)  # not found
    ok(run(shared_cluster, "put", "x", "v", "--lease", lease, "--ttl", "5", ns=ns), 2)


def test_prefix_get_range_and_prefix_delete(shared_cluster: LocalCluster) -> None:
    ns = _ns()
    with Client(_urls(shared_cluster), ns=ns) as c:
        for k in ("a/1", "a/2", "a/3", "b/1", "c"):
            c.put(k, f"v-{k}")
    out = ok(run(shared_cluster, "get", "a/", "--prefix", "--keys-only", ns=ns))
    assert out == "a/1\na/2\na/3\n"
    doc = json.loads(ok(run(shared_cluster, "get", "a/", "--prefix", "-w", "json", ns=ns)))
    assert [kv["value"] for kv in doc["kvs"]] == ["v-a/1", "v-a/2", "v-a/3"]
    assert doc["count"] == 3 and doc["revision"] >= max(kv["mod_revision"] for kv in doc["kvs"])
    ok(run(shared_cluster, "get", "zzz/", "--prefix", ns=ns), 3)

    assert ok(run(shared_cluster, "range", "a/2", "b/2", ns=ns)) == (
        "a/2\nv-a/2\na/3\nv-a/3\nb/1\nv-b/1\n"
    )
    assert ok(run(shared_cluster, "range", "b", "--keys-only", ns=ns)) == "b/1\nc\n"
    page = json.loads(ok(run(shared_cluster, "range", "a", "--limit", "2", "-w", "json", ns=ns)))
    assert [kv["key"] for kv in page["kvs"]] == ["a/1", "a/2"] and page["more"] is True
    rows = ok(run(shared_cluster, "range", "a", "--limit", "2", "-w", "table", ns=ns))
    assert [r.split()[0] for r in rows.splitlines()] == ["KEY", "a/1", "a/2"]
    ok(run(shared_cluster, "range", "a", "--limit", "0", ns=ns), 2)

    assert ok(run(shared_cluster, "del", "a/", "--prefix", ns=ns)) == "3\n"
    assert ok(run(shared_cluster, "del", "a/", "--prefix", ns=ns)) == "0\n"
    gone = json.loads(ok(run(shared_cluster, "del", "c", "-w", "json", ns=ns)))
    assert gone["deleted"] == 1
    assert ok(run(shared_cluster, "range", "", ns=ns)) == "b/1\nv-b/1\n"


def test_txn_success_and_failure_branches(shared_cluster: LocalCluster) -> None:
    ns = _ns()
    claim = 'version("lock") = "0"\n\nput lock "agent one"\nput owner/lock 1\n\nget lock\n'
    assert ok(run(shared_cluster, "txn", ns=ns, stdin=claim)) == "SUCCESS\nOK\nOK\n"
    # the same txn again: the key exists now, so the failure branch runs (exit 0)
    assert ok(run(shared_cluster, "txn", ns=ns, stdin=claim)) == "FAILURE\nlock\nagent one\n"
    doc = json.loads(ok(run(shared_cluster, "txn", "-w", "json", ns=ns, stdin=claim)))
    assert doc["succeeded"] is False and doc["results"][0]["value"] == "agent one"

    swap = (
        'value("lock") = "agent one"\nexists("owner/lock")\nmod("lock") > "0"\n\n'
        "del owner/ --prefix\nput lock two\n\nget lock\n"
    )
    doc = json.loads(ok(run(shared_cluster, "txn", "-w", "json", ns=ns, stdin=swap)))
    assert doc["succeeded"] is True and doc["results"][0]["deleted"] == 1
    with Client(_urls(shared_cluster), ns=ns) as c:
        assert c.get("lock").text == "two" and c.get("owner/lock", default=None) is None
        assert c.get("lock").mod_revision == doc["revision"]
    table = ok(run(shared_cluster, "txn", "-w", "table", ns=ns, stdin='missing("lock")\n'))
    assert table.splitlines()[1].split()[0] == "FAILURE"

    for bad in (
        'version("lock") = "x"\n',
        'frob("lock") = "1"\n',
        "\nput onlykey\n",
        "\nincr lock\n",
        "a\n\nb\n\nc\n\nd\n",
    ):
        p = run(shared_cluster, "txn", ns=ns, stdin=bad)
        assert p.returncode == 2 and p.stderr.startswith("statekeeper: error:"), p
    with Client(_urls(shared_cluster), ns=ns) as c:
        assert c.get("lock").text == "two"


def test_compact_then_an_old_revision_fails_clearly(shared_cluster: LocalCluster) -> None:
    ns = _ns()
    first = json.loads(ok(run(shared_cluster, "put", "k", "v1", "-w", "json", ns=ns)))
    second = json.loads(ok(run(shared_cluster, "put", "k", "v2", "-w", "json", ns=ns)))
    out = ok(run(shared_cluster, "compact", str(second["revision"]), ns=ns))
    assert out == f"compacted revision {second['revision']}\n"
    old = run(shared_cluster, "get", "k", "--rev", str(first["revision"]), ns=ns)
    assert old.returncode == 1 and old.stdout == ""
    assert old.stderr.startswith("statekeeper: error:") and "compact" in old.stderr.lower()
    assert ok(run(shared_cluster, "get", "k", "--rev", str(second["revision"]), ns=ns)) == (
        "k\nv2\n"
    )
    doc = json.loads(ok(run(shared_cluster, "compact", str(second["revision"]), "-w", "json")))
    assert doc["compact_revision"] >= second["revision"]
    ok(run(shared_cluster, "compact", "notanumber"), 2)


def test_member_list_and_endpoint_status(shared_cluster: LocalCluster) -> None:
    lc = shared_cluster
    config = ("--config", str(lc.config_path))
    members = json.loads(ok(run(lc, "member", "list", "-w", "json", *config)))
    assert sorted(m["id"] for m in members) == sorted(lc.node_ids)
    assert sorted(m["role"] for m in members) == ["follower", "follower", "leader"]
    for m in members:
        assert m["url"] == lc.url(m["id"]) and m["error"] is None
        assert m["raft_address"] == lc.config.node(m["id"]).raft_address
    table = ok(run(lc, "member", "list", *config)).splitlines()
    assert table[0].split()[:4] == ["ID", "URL", "RAFT", "ADDRESS"] and len(table) == 4
    simple = ok(run(lc, "member", "list", "-w", "simple", *config)).splitlines()
    assert sorted(line.split(", ")[0] for line in simple) == sorted(lc.node_ids)

    rows = json.loads(ok(run(lc, "endpoint", "status", "-w", "json")))
    leader = next(r["id"] for r in rows if r["role"] == "leader")
    for r in rows:
        assert r["leader"] == leader and r["term"] >= 1 and r["revision"] >= 0
        assert r["applied"] >= 1 and r["error"] is None
    table = ok(run(lc, "endpoint", "status")).splitlines()
    assert table[0].split()[:5] == ["ENDPOINT", "ID", "ROLE", "TERM", "LEADER"]
    assert len(table) == 4
    assert len(ok(run(lc, "endpoint", "status", "-w", "simple")).splitlines()) == 3


def test_endpoint_health_and_unreachable_endpoints(shared_cluster: LocalCluster) -> None:
    lc = shared_cluster
    out = ok(run(lc, "endpoint", "health", "-w", "simple")).splitlines()
    assert len(out) == 3 and all(" is healthy (took " in line for line in out)
    rows = json.loads(ok(run(lc, "endpoint", "health", "-w", "json")))
    assert all(r["live"] and r["ready"] and r["healthy"] for r in rows)

    dead = "https://127.0.0.1:9"  # nothing listens on the discard port
    both = ",".join([*_urls(lc), dead])
    health = run(lc, "endpoint", "health", endpoints=both)
    assert health.returncode == 1 and dead in health.stdout and "no answer" in health.stdout
    status = json.loads(ok(run(lc, "endpoint", "status", "-w", "json", endpoints=both), 1))
    assert [r["error"] is not None for r in status] == [False, False, False, True]
    assert run(lc, "member", "list", endpoints=both).returncode == 1

    p = run(None, "get", "k", endpoints=dead)
    assert p.returncode == 1 and p.stdout == "" and p.stderr.startswith("statekeeper: error:")
    assert run(None, "put", "k", "v", endpoints=dead).returncode == 1


def test_bad_arguments_exit_2() -> None:
    for argv in (
        ["get"],
        ["put", "k"],
        ["get", "k", "-w", "yaml"],
        ["range"],
        ["get", "k", "--rev", "x"],
        ["member"],
        ["endpoint", "frob"],
    ):
        p = run(None, *argv, endpoints="http://127.0.0.1:9")
        assert p.returncode == 2 and "error" in p.stderr, (argv, p)


def test_token_file_and_a_missing_token(shared_cluster: LocalCluster, tmp_path: Path) -> None:
    """The token comes from --token-file like the other client commands; without any, the
    TLS+auth cluster refuses the request (exit 1, one line)."""
    ns = _ns()
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEKEEPER_TOKEN")}
    token = tmp_path / "token"
    token.write_text(os.environ["STATEKEEPER_TOKEN"] + "\n")
    token.chmod(0o600)
    ok(run(shared_cluster, "put", "k", "v", "--token-file", str(token), ns=ns, env=env))
    got = run(shared_cluster, "get", "k", "--token-file", str(token), ns=ns, env=env)
    assert ok(got) == "k\nv\n"
    refused = run(shared_cluster, "get", "k", ns=ns, env=env)
    assert refused.returncode == 1 and refused.stdout == ""
    assert (
        refused.stderr.startswith("statekeeper: error:") and len(refused.stderr.splitlines()) == 1
    )
