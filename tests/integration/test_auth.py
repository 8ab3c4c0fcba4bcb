"""Authentication and authorization on a real 3-node cluster with [auth] enabled = true
(docs/protocol.md, "Authentication and authorization"): 401 without a valid token, open
routes, grants by namespace / role / key prefix, minting rules, revocation on every node,
expiry, the CLI, both clients (watch included), denial logs without secrets; and, with auth
disabled, the warning in node.log and /v1/status."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from statekeeper.client import (
    AsyncClient,
    Client,
    NotFound,
    PermissionDenied,
    RetryPolicy,
    Unauthenticated,
)
from statekeeper.client.auth.tokens import parse_token, root_token
from statekeeper.cluster.supervisor import LocalCluster
from tests.integration.cluster_fixture import running_cluster

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NO_RETRY = RetryPolicy.disabled()


@pytest.fixture(scope="module")
def auth_cluster(tmp_path_factory: pytest.TempPathFactory):
    with running_cluster(tmp_path_factory.mktemp("auth"), auth=True) as lc:
        yield lc


def _root(lc: LocalCluster) -> Client:
    return Client(lc.config.http_urls(), token=root_token(lc.config.secret))


def _raw(url: str, path: str, body: dict | None = None, headers: dict | None = None):
    """(status, headers, decoded body) of one request, no client involved."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url + path, data=data, headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.headers, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, e.headers, json.loads(e.read() or b"null")


def _logs(lc: LocalCluster) -> str:
    return "".join(lc.log_file(n).read_text(errors="replace") for n in lc.node_ids)


def _token(lc: LocalCluster, **kw) -> tuple[str, str]:
    with _root(lc) as root:
        made = root.auth_token_create(**kw)
    return made.token, made.id


def test_no_token_is_401_and_open_routes_are_open(auth_cluster: LocalCluster) -> None:
    url = auth_cluster.url("node-0")
    for headers, why in [
        ({}, "no Authorization header"),
        ({"Authorization": "Basic abc"}, "malformed Authorization"),
        ({"Authorization": "Bearer nonsense"}, "malformed token"),
        ({"Authorization": "Bearer sk_root_AAAA"}, "wrong root token"),
        ({"Authorization": "Bearer sk_0123456789abcdef_" + "A" * 43}, "unknown token"),
    ]:
        status, hdrs, body = _raw(url, "/v1/kv/get", {"key": "k"}, headers)
        assert status == 401, (why, body)
        assert body["error"]["code"] == "unauthenticated" and why in body["error"]["message"]
        assert hdrs["WWW-Authenticate"] == "Bearer"
    # The secret of a real token, and a wrong one for its id.
    token, token_id = _token(auth_cluster, ns="agent-42", role="writer")
    wrong = f"sk_{token_id}_{'B' * 43}"
    status, _, body = _raw(url, "/v1/kv/get", {"key": "k"}, {"Authorization": f"Bearer {wrong}"})
    assert status == 401 and "wrong secret" in body["error"]["message"]
    assert token not in json.dumps(body)
    for path in ("/v1/status", "/v1/health/live", "/v1/health/ready", "/v1/openapi.json"):
        status, _, body = _raw(url, path)
        assert status == 200, path
    assert _raw(url, "/v1/status")[2]["auth"] == {"enabled": True}
    # The clients raise Unauthenticated without retrying it.
    with Client(auth_cluster.config.http_urls(), token="sk_root_wrong") as c:
        with pytest.raises(Unauthenticated) as ei:
            c.get("k")
        assert ei.value.attempts == 1


def test_metrics_are_open_and_count_denials(auth_cluster: LocalCluster) -> None:
    """GET /metrics needs no token (docs/protocol.md#metrics); denials are counted by code."""
    from prometheus_client.parser import text_string_to_metric_families

    url = auth_cluster.url("node-1")
    assert _raw(url, "/v1/kv/get", {"key": "k"})[0] == 401
    token, _ = _token(auth_cluster, ns="agent-7", role="reader")
    put = {"ns": "agent-7", "key": "k", "value": "v"}
    assert _raw(url, "/v1/kv/put", put, {"Authorization": f"Bearer {token}"})[0] == 403
    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    denials = {
        s.labels["code"]: s.value
        for f in text_string_to_metric_families(text)
        if f.name == "statekeeper_auth_denials"
        for s in f.samples
        if s.name == "statekeeper_auth_denials_total"
    }
    assert denials["unauthenticated"] >= 1 and denials["permission_denied"] >= 1
    assert token not in text


def test_writer_token_is_scoped_and_denials_apply_nothing(auth_cluster: LocalCluster) -> None:
    token, token_id = _token(auth_cluster, ns="agent-42", role="writer", name="agent 42")
    with Client(auth_cluster.config.http_urls(), ns="agent-42", token=token) as c:
        c.put("plan", b"step 1")
        assert c.get("plan").value == b"step 1"
        assert c.auth_whoami().id == token_id
        with pytest.raises(PermissionDenied) as ei:
            c.put("plan", b"stolen", ns="agent-43")
        assert ei.value.attempts == 1
        assert ei.value.details.get("ns") == "agent-43" and "put" in ei.value.message
        with pytest.raises(PermissionDenied):
            c.get("plan", ns="agent-43")
        with pytest.raises(PermissionDenied):
            c.compact(1)
        with pytest.raises(PermissionDenied):
            c.auth_token_list()
        with pytest.raises(PermissionDenied):  # a batch is refused whole
            with c.batch() as b:
                b.put("ok", b"1")
                b.put("x", b"1", ns="agent-43")
        with pytest.raises(PermissionDenied):  # so is a txn touching another namespace
            c.txn([], [c.ops.put("t", b"1"), c.ops.put("t", b"1", ns="agent-43")])
    with _root(auth_cluster) as root:
        for ns, key in [
            ("agent-43", "plan"),
            ("agent-42", "ok"),
            ("agent-43", "x"),
            ("agent-42", "t"),
            ("agent-43", "t"),
        ]:
            with pytest.raises(NotFound):
                root.get(key, ns=ns)
    logs = _logs(auth_cluster)
    assert re.search(rf"permission_denied: token {token_id}, op put, ns agent-43", logs)
    secret = parse_token(token)[1]
    assert secret not in logs and token not in logs


def test_reader_and_prefix_grants(auth_cluster: LocalCluster) -> None:
    with _root(auth_cluster) as root:
        root.put("chat/1", b"hi", ns="agent-7")
        root.put("notes", b"private", ns="agent-7")
    reader, _ = _token(auth_cluster, ns="agent-7", role="reader")
    with Client(auth_cluster.config.http_urls(), ns="agent-7", token=reader) as c:
        assert c.get("notes").value == b"private"
        with pytest.raises(PermissionDenied):
            c.put("notes", b"overwritten")
    chat, _ = _token(auth_cluster, ns="agent-7", role="writer", prefix="chat/")
    with Client(auth_cluster.config.http_urls(), ns="agent-7", token=chat) as c:
        c.put("chat/2", b"yo")
        assert [kv.key for kv in c.range(prefix="chat/").kvs] == ["chat/1", "chat/2"]
        with pytest.raises(PermissionDenied):
            c.get("notes")
        with pytest.raises(PermissionDenied):
            c.range()  # the whole namespace
        with pytest.raises(PermissionDenied):
            c.put("notes", b"x")
        with pytest.raises(PermissionDenied):
            c.delete("no", prefix=True)
    with _root(auth_cluster) as root:
        assert root.get("notes", ns="agent-7").value == b"private"


def test_minting_needs_admin_over_every_grant(auth_cluster: LocalCluster) -> None:
    admin, _ = _token(auth_cluster, ns="agent-*", role="admin")
    with Client(auth_cluster.config.http_urls(), token=admin) as c:
        made = c.auth_token_create(ns="agent-42", role="writer", ttl=60)
        with pytest.raises(PermissionDenied):
            c.auth_token_create(ns="billing", role="reader")
        with pytest.raises(PermissionDenied):
            c.auth_token_create(ns="*", role="reader")
        c.put("k", b"v", ns="agent-99")  # admin covers write in its scope
        c.auth_token_revoke(made.id)
    writer, _ = _token(auth_cluster, ns="agent-42", role="writer")
    with Client(auth_cluster.config.http_urls(), token=writer) as c:
        with pytest.raises(PermissionDenied):
            c.auth_token_create(ns="agent-42", role="reader")
    with _root(auth_cluster) as root:
        listed = {t.id: t for t in root.auth_token_list()}
        assert made.id not in listed
        assert all(not hasattr(t, "hash") for t in listed.values())


def _refused_everywhere(lc: LocalCluster, token: str, deadline: float) -> dict[str, float]:
    """Poll each node until it refuses the token; node -> seconds it took."""
    took: dict[str, float] = {}
    t0 = time.monotonic()
    while len(took) < len(lc.node_ids) and time.monotonic() < deadline:
        for nid in lc.node_ids:
            if nid in took:
                continue
            status, _, _ = _raw(
                lc.url(nid),
                "/v1/kv/get",
                {"ns": "agent-42", "key": "k", "consistency": "serializable"},
                {"Authorization": f"Bearer {token}"},
            )
            if status == 401:
                took[nid] = time.monotonic() - t0
        time.sleep(0.02)
    return took


def _cli(lc: LocalCluster, *argv: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEKEEPER_")}
    return subprocess.run(
        [sys.executable, "-m", "statekeeper.cluster.cli", *argv, "--config", str(lc.config_path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_create_list_revoke_and_revocation_on_every_node(auth_cluster: LocalCluster) -> None:
    out = _cli(
        auth_cluster,
        "auth",
        "token",
        "create",
        "--ns",
        "agent-42",
        "--role",
        "writer",
        "--ttl",
        "30d",
        "--name",
        "cli-made",
    )
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip()
    token_id, secret = parse_token(token)
    assert out.stdout == token + "\n"  # the token once, alone on stdout
    assert token_id in out.stderr and secret not in out.stderr
    listed = _cli(auth_cluster, "auth", "token", "list")
    assert listed.returncode == 0 and token_id in listed.stdout and "cli-made" in listed.stdout
    assert secret not in listed.stdout
    for nid in auth_cluster.node_ids:  # works on every node
        status, _, body = _raw(
            auth_cluster.url(nid),
            "/v1/kv/put",
            {"ns": "agent-42", "key": "k", "value": "v"},
            {"Authorization": f"Bearer {token}"},
        )
        assert status == 200, body
    refused = _cli(auth_cluster, "auth", "token", "create", "--token", token)
    assert refused.returncode == 2 and token not in refused.stderr + refused.stdout
    revoked = _cli(auth_cluster, "auth", "token", "revoke", token_id)
    assert revoked.returncode == 0, revoked.stderr
    took = _refused_everywhere(auth_cluster, token, time.monotonic() + 2.0)
    assert set(took) == set(auth_cluster.node_ids), took
    print(f"revocation effective after (s): { {n: round(t, 3) for n, t in took.items()} }")
    status, _, body = _raw(
        auth_cluster.url("node-1"),
        "/v1/kv/get",
        {"ns": "agent-42", "key": "k"},
        {"Authorization": f"Bearer {token}"},
    )
    assert status == 401 and "never created, or revoked" in body["error"]["message"]
    whoami = _cli(auth_cluster, "auth", "whoami")
    assert whoami.returncode == 0 and whoami.stdout.startswith("root")
    assert secret not in _logs(auth_cluster)


def test_expiry_is_checked_by_the_server(auth_cluster: LocalCluster) -> None:
    token, _ = _token(auth_cluster, ns="agent-42", role="reader", ttl=2)
    with Client(auth_cluster.config.http_urls(), ns="agent-42", token=token) as c:
        with pytest.raises(NotFound):
            c.get("nothing")
        time.sleep(2.5)
        with pytest.raises(Unauthenticated) as ei:
            c.get("nothing")
        assert "expired" in ei.value.message


def test_both_clients_send_the_token_watch_included(auth_cluster: LocalCluster) -> None:
    token, _ = _token(auth_cluster, ns="agent-5", role="writer")
    urls = auth_cluster.config.http_urls()
    with Client(urls, ns="agent-5", token=token) as c:
        rev = c.put("w", b"1").revision
        events = c.watch(key="w", start_revision=rev)
        assert next(iter(events)).kv.value == b"1"
        events.close()
    with Client(urls, ns="agent-5", token="sk_root_wrong") as c:
        with pytest.raises(Unauthenticated):
            next(iter(c.watch(key="w", start_revision=rev)))

    async def run() -> None:
        async with AsyncClient(urls, ns="agent-5", token=token) as a:
            r = (await a.put("w", b"2")).revision
            assert (await a.get("w")).value == b"2"
            async for ev in a.watch(key="w", start_revision=r):
                assert ev.kv.value == b"2"
                break
            with pytest.raises(PermissionDenied):
                await a.put("w", b"3", ns="agent-6")
        async with AsyncClient(urls, ns="agent-5") as anon:
            with pytest.raises(Unauthenticated):
                await anon.get("w")

    asyncio.run(run())


def test_token_from_the_environment(
    auth_cluster: LocalCluster, tmp_path: Path, monkeypatch
) -> None:
    token, token_id = _token(auth_cluster, ns="agent-42", role="reader")
    path = tmp_path / "token"
    path.write_text(token + "\n")
    monkeypatch.delenv("STATEKEEPER_TOKEN", raising=False)
    monkeypatch.setenv("STATEKEEPER_TOKEN_FILE", str(path))
    with Client(auth_cluster.config.http_urls()) as c:
        assert c.auth_whoami().id == token_id
        assert token not in repr(c)


@pytest.mark.cluster_options(size=1)
def test_auth_disabled_warns_in_log_and_status(cluster: LocalCluster) -> None:
    status, _, body = _raw(cluster.url("node-0"), "/v1/status")
    assert body["auth"]["enabled"] is False
    assert "auth is disabled" in body["auth"]["warning"]
    assert "auth is disabled: any client that reaches" in cluster.log_file("node-0").read_text()
    with Client(cluster.config.http_urls()) as c:
        c.put("k", b"v")  # no token needed
        assert c.auth_whoami().id is None


def test_lease_ops_check_the_leases_namespace_on_every_node(auth_cluster: LocalCluster) -> None:
    token, _ = _token(auth_cluster, ns="agent-9", role="writer")
    other, _ = _token(auth_cluster, ns="agent-8", role="writer")
    for nid in auth_cluster.node_ids:
        # Granted through the leader, revoked at once through this node (a follower may
        # not have applied the grant yet: it passes a read barrier before deciding).
        with Client(auth_cluster.config.http_urls(), ns="agent-9", token=token) as c:
            lease = c.lease_grant(10).lease
        url = auth_cluster.url(nid)
        with Client(url, token=other, retry=NO_RETRY, prefer_leader=False) as stranger:
            # Another tenant's lease is not found, its namespace not named (issue 27, 11).
            with pytest.raises(NotFound) as ei:
                stranger.lease_revoke(lease)
            assert "agent-9" not in str(ei.value)
            with pytest.raises(NotFound):
                stranger.lease_info(lease)
        with Client(url, token=token, retry=NO_RETRY, prefer_leader=False) as mine:
            assert mine.lease_info(lease).ns == "agent-9"
            mine.lease_revoke(lease)
            with pytest.raises(NotFound):  # lease_not_found, as without auth
                mine.lease_revoke(lease)


def test_a_token_is_usable_on_every_node_right_after_it_is_created(
    auth_cluster: LocalCluster,
) -> None:
    """A follower that has not applied the create yet (it may lag a heartbeat) passes a read
    barrier before it calls a well-formed token unknown: no 401 for a fresh token."""
    lc = auth_cluster
    leader = lc.leader_id()
    follower = next(n for n in lc.node_ids if n != leader)
    for i in range(3):
        # The follower is stopped while the token is created: when it resumes, the first
        # request reaches its HTTP loop before its raft thread has heard of the token.
        lc.pause_node(follower)
        try:
            token, _ = _token(lc, ns="fresh", role="writer")
        finally:
            lc.resume_node(follower)
        with Client(lc.url(follower), ns="fresh", token=token, retry=NO_RETRY) as c:
            c.put(f"k{i}", "v")
    for url in lc.config.http_urls():  # and every node knows it by now
        with Client(url, ns="fresh", token=token, retry=NO_RETRY) as c:
            assert c.get("k2").text == "v"


def test_a_flood_of_unauthenticated_requests_leaves_the_log_small(
    auth_cluster: LocalCluster,
) -> None:
    """Issue 27, item 1: each 401 logged the whole path, so `/v1/kv/<60 KB>` added ~60 KB
    to node.log (and the quota counted node.log). Now an unknown op is refused before
    authentication, and 401 lines are capped and rate-limited."""
    import http.client

    node = auth_cluster.config.node("node-2")
    log = auth_cluster.log_file("node-2")
    before = log.stat().st_size
    conn = http.client.HTTPConnection(node.host, node.http_port, timeout=10)
    statuses = set()
    try:
        for i in range(300):
            path = "/v1/kv/" + "x" * 60_000 if i % 2 else "/v1/kv/get"
            conn.request("POST", path, b"{}", {"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            statuses.add((path[:8], resp.status))
    finally:
        conn.close()
    assert log.stat().st_size - before < 64 * 1024
    assert statuses == {("/v1/kv/x", 400), ("/v1/kv/g", 401)}


def test_a_token_minted_by_a_token_dies_with_it(auth_cluster: LocalCluster) -> None:
    # Issue 27 item 6: a 1-hour namespace admin minted a never-expiring admin token that
    # kept working after the admin was revoked.
    admin, admin_id = _token(auth_cluster, ns="alice", role="admin", ttl=3600)
    urls = auth_cluster.config.http_urls()
    with Client(urls, token=admin) as c:
        admin_exp = c.auth_whoami().expires_ms
        child = c.auth_token_create(ns="alice", role="admin", ttl=0)
    with Client(urls, token=child.token) as c:
        grandchild = c.auth_token_create(ns="alice", role="reader")
    assert child.expires_ms == admin_exp and grandchild.expires_ms == admin_exp
    with _root(auth_cluster) as root:
        root.auth_token_revoke(admin_id)
    for token in (child.token, grandchild.token):
        with Client(urls, token=token, retry=NO_RETRY) as c, pytest.raises(Unauthenticated):
            c.auth_whoami()


def test_an_open_watch_ends_unauthenticated_when_its_token_is_revoked(
    auth_cluster: LocalCluster,
) -> None:
    """Authentication ran once when a watch opened: a revoked or expired reader token kept
    receiving writes (issue 27, item 2). Now the stream ends with an `unauthenticated`
    frame, which both clients raise as Unauthenticated instead of resuming."""
    lc = auth_cluster
    follower = next(n for n in lc.node_ids if n != lc.leader_id())
    reader, reader_id = _token(lc, ns="watched", role="reader")
    with _root(lc) as root:
        rev = root.put("k", b"0", ns="watched").revision
        with Client(lc.url(follower), ns="watched", token=reader, retry=NO_RETRY) as c:
            events = iter(c.watch(key="k", start_revision=rev))
            assert next(events).kv.value == b"0"  # the stream is open
            root.auth_token_revoke(reader_id)
            root.put("k", b"after revoke", ns="watched")
            with pytest.raises(Unauthenticated) as ei:
                next(events)
            assert "revoked" in ei.value.message


def test_an_open_watch_ends_unauthenticated_when_its_token_expires(
    auth_cluster: LocalCluster,
) -> None:
    """The same when the token's TTL runs out with the watch open (the AsyncClient)."""
    lc = auth_cluster
    follower = next(n for n in lc.node_ids if n != lc.leader_id())
    short, _ = _token(lc, ns="watched", role="reader", ttl=2)

    async def expire() -> None:
        async with AsyncClient(lc.url(follower), ns="watched", token=short, retry=NO_RETRY) as a:
            async with AsyncClient(lc.config.http_urls(), token=root_token(lc.config.secret)) as r:
                start = (await r.put("k", b"1", ns="watched")).revision
                events = a.watch(key="k", start_revision=start).__aiter__()
                assert (await events.__anext__()).kv.value == b"1"

                async def write_after_expiry() -> None:
                    await asyncio.sleep(3)
                    await r.put("k", b"after expiry", ns="watched")

                writer = asyncio.create_task(write_after_expiry())
                with pytest.raises(Unauthenticated) as ei:
                    await events.__anext__()
                await writer
                assert "expired" in ei.value.message

    asyncio.run(expire())


def test_a_long_poll_ends_unauthenticated_when_its_token_is_revoked(
    auth_cluster: LocalCluster,
) -> None:
    """A read_stream long poll (what subscribe runs) re-checks its token too (issue 27,
    item 2): after the revoke it answers 401, not the events appended afterwards."""
    lc = auth_cluster
    reader, reader_id = _token(lc, ns="polled", role="reader")
    url = lc.url(next(n for n in lc.node_ids if n != lc.leader_id()))
    with _root(lc) as root:
        root.append("s", [b"0"], ns="polled")
        with Client(url, ns="polled", token=reader, retry=NO_RETRY) as c:
            first = c.read_stream("s", start=1)
            assert len(first.events) == 1
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                poll = pool.submit(c.read_stream, "s", start=2, wait=20)
                time.sleep(0.5)  # (the poll is waiting; if not yet, it is refused at once)
                root.auth_token_revoke(reader_id)
                root.append("s", [b"after revoke"], ns="polled")
                with pytest.raises(Unauthenticated):
                    poll.result(timeout=30)
