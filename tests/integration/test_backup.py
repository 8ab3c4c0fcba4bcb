"""`statekeeper backup` of a running cluster (TLS and auth on) under a writer, and
`statekeeper restore` into a new cluster in another directory: 100,000 keys, history,
streams, a token; one revision exactly; corrupted files refused with nothing written;
writes after the restore survive a restart of every node. Real nodes, real CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from statekeeper.client import Client
from statekeeper.client.auth.tokens import root_token
from statekeeper.cluster.supervisor import LocalCluster
from statekeeper.node.backup.file import verify
from tests.integration.cluster_fixture import (
    raw_connection,
    running,
    running_cluster,
    write_test_config,
)

ROOT = Path(__file__).resolve().parents[2]
KEYS = 100_000
PER_TXN = 1000


def cli(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "statekeeper.cluster.cli", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def client(lc: LocalCluster, token: str | None = None) -> Client:
    tok = token or root_token(lc.config.secret)
    return Client(lc.config.http_urls(), token=tok, tls=lc.tls, timeout=30)


def key(i: int) -> str:
    return f"k/{i:06d}"


def load(c: Client) -> dict:
    """100k keys by txns, history of h/0, a deleted key, a stream; what to expect."""
    for b in range(KEYS // PER_TXN):
        ops = [
            {"op": "put", "key": key(i), "value": f"v{i}"}
            for i in range(b * PER_TXN, (b + 1) * PER_TXN)
        ]
        c.txn([], ops)
    history = [c.put("h/0", f"h{n}").revision for n in range(5)]
    c.put("d/gone", "x")
    c.delete("d/gone")
    for n in range(3):
        c.append("events", [f"e{n}-{j}" for j in range(10)])
    c.append("other", ["x"], ns="agents")
    token = c.auth_token_create(name="reader", ns="*", role="reader").token
    return {"history": history, "token": token}


class Writer(threading.Thread):
    """Puts w/<n> until stopped; records the revision of every acknowledged put."""

    def __init__(self, c: Client) -> None:
        super().__init__(daemon=True)
        self.c = c
        self.acked: dict[str, int] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            self.acked[f"w/{n:06d}"] = self.c.put(f"w/{n:06d}", str(n)).revision
            n += 1


def restore_refuses(backup: Path, data: bytes, new_cfg: Path, what: str, message: str) -> None:
    bad = backup.with_name(f"bad-{what}.skb")
    bad.write_bytes(data)
    p = cli("restore", str(bad), "--config", str(new_cfg))
    assert p.returncode == 2, (what, p.stdout, p.stderr)
    assert message in p.stderr, (what, p.stderr)
    assert not list(new_cfg.parent.glob("data/*/db")), what  # nothing written


def check_contents(c: Client, expect: dict, writer: dict[str, int], rev: int) -> None:
    kvs = {kv.key: kv.value for kv in c.scan("k/", page_size=10_000)}
    assert len(kvs) == KEYS
    assert all(kvs[key(i)] == f"v{i}".encode() for i in range(KEYS))
    # One revision: every writer put at or before it, none after.
    restored = {kv.key: kv.mod_revision for kv in c.scan("w/", page_size=10_000)}
    assert restored == {k: r for k, r in writer.items() if r <= rev}
    h = expect["history"]
    assert c.get("h/0").value == b"h4" and c.get("h/0").mod_revision == h[4]
    assert c.get("h/0", revision=h[1]).value == b"h1"  # history kept
    events = c.watch("h/", start_revision=h[0], progress=None)
    seen = [next(events) for _ in range(5)]
    events.close()
    assert [(e.revision, e.kv.value) for e in seen] == [(r, b"h%d" % n) for n, r in enumerate(h)]
    assert c.get("d/gone", default=None) is None
    page = c.read_stream("events", limit=100)
    assert [e.data for e in page.events] == [
        f"e{n}-{j}".encode() for n in range(3) for j in range(10)
    ]
    assert [e.seq for e in page.events] == list(range(1, 31))
    assert [e.data for e in c.read_stream("other", ns="agents").events] == [b"x"]


def from_follower(lc: LocalCluster, out: Path) -> None:
    """A follower serves a backup too (after its read barrier); HEAD takes none."""
    follower = next(n for n in lc.node_ids if n != lc.leader_id())
    conn = raw_connection(lc, follower, timeout=60)
    auth = {"Authorization": f"Bearer {root_token(lc.config.secret)}"}
    conn.request("HEAD", "/v1/admin/backup", headers=auth)
    head = conn.getresponse()
    assert (head.status, head.read()) == (200, b"")
    conn.request("GET", "/v1/admin/backup", headers=auth)  # same connection
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("X-Statekeeper-Node") == follower
    out.write_bytes(resp.read())
    meta, _, _ = verify(str(out))
    assert meta["source_node"] == follower
    assert meta["revision"] == int(resp.getheader("X-Statekeeper-Revision"))
    conn.request("GET", "/v1/admin/backup")
    assert conn.getresponse().status == 401
    conn.close()


def test_backup_under_writes_and_restore_into_a_new_cluster(tmp_path):
    backup = tmp_path / "sk.skb"
    with running_cluster(tmp_path / "src", tls=True, auth=True) as src:
        with client(src) as c:
            expect = load(c)
            writer = Writer(c)
            writer.start()
            while len(writer.acked) < 20:
                threading.Event().wait(0.05)
            acked_before = dict(writer.acked)
            p = cli("backup", "--out", str(backup), "--config", str(src.config_path), "--json")
            writer.stop.set()
            writer.join(30)
        assert p.returncode == 0, (p.stdout, p.stderr)
        taken = json.loads(p.stdout)
        assert taken["size"] == backup.stat().st_size and len(taken["sha256"]) == 64
        assert not list(backup.parent.glob("*.partial")), "a temporary was left behind"
        reader_token = tmp_path / "reader.token"
        reader_token.write_text(expect["token"])
        reader_token.chmod(0o600)
        denied = cli(
            "backup", "--out", str(tmp_path / "no.skb"), "--config", str(src.config_path),
            "--token-file", str(reader_token),
        )  # fmt: skip
        assert denied.returncode == 1 and "permission_denied" in denied.stderr, denied.stderr
        assert not list(tmp_path.glob("no.skb*"))
        from_follower(src, tmp_path / "follower.skb")
        busy = cli("restore", str(backup), "--config", str(src.config_path), "--force")
        assert busy.returncode == 1 and "running: restore seeds a stopped" in busy.stderr
    assert backup.stat().st_mode & 0o777 == 0o600
    inspect = cli("backup", "--inspect", str(backup), "--json")
    assert inspect.returncode == 0, inspect.stderr
    meta = json.loads(inspect.stdout)
    assert meta["sha256"] == taken["sha256"] and meta["revision"] == taken["revision"]
    rev = meta["revision"]
    assert all(r <= rev for r in acked_before.values())  # at least as new as the request
    assert any(r > rev for r in writer.acked.values())  # writes went on meanwhile
    assert meta["applied_index"] > 0 and meta["clock_ms"] > 0

    new = write_test_config(tmp_path / "new", tls=True, auth=True)
    data = backup.read_bytes()
    restore_refuses(
        backup,
        data[:40_000] + bytes([data[40_000] ^ 1]) + data[40_001:],
        new.path,
        "flip",
        "checksum mismatch",
    )
    restore_refuses(backup, data[: len(data) // 2], new.path, "truncated", "truncated")
    restore_refuses(backup, b"NOTABACK" + data[8:], new.path, "magic", "not a statekeeper backup")

    p = cli("restore", str(backup), "--config", str(new.path))
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert f"revision {rev}" in p.stdout
    again = cli("restore", str(backup), "--config", str(new.path))
    assert again.returncode == 2 and "already holds db" in again.stderr

    with running(LocalCluster(new.config, new.path)) as lc:
        with client(lc) as c:
            assert c.status()["revision"] == rev
            check_contents(c, expect, writer.acked, rev)
            with client(lc, expect["token"]) as reader:  # tokens were restored
                assert reader.get(key(7)).value == b"v7"
            after = c.put("after/1", "one").revision
            assert after == rev + 1
        for nid in lc.node_ids:
            lc.restart_node(nid)
        with client(lc) as c:
            assert c.get("after/1").value == b"one"
            assert c.get(key(KEYS - 1)).value == f"v{KEYS - 1}".encode()
            assert c.put("after/2", "two").revision == after + 1
            assert c.get("h/0", revision=expect["history"][2]).value == b"h2"
        # The restored state is raft's snapshot: a node that loses its DB restores it from
        # its own snapshot.bin, one that loses everything gets the leader's.
        lost_db, lost_all = (n for n in lc.node_ids if n != lc.leader_id())
        for nid, lose in ((lost_db, "db"), (lost_all, "all")):
            lc.stop_node(nid)
            if lose == "db":
                shutil.rmtree(lc.data_dir(nid) / "db")
            else:
                lc.wipe_node(nid)
            lc.start_and_wait(nid)
            url = lc.config.url(nid)
            tok = root_token(lc.config.secret)
            with Client([url], token=tok, tls=lc.tls, consistency="serializable") as local:
                assert local.get("after/2", min_revision=after + 1).value == b"two", lose
                assert local.get(key(12_345)).value == b"v12345", lose
                assert sum(1 for _ in local.scan("k/", keys_only=True, page_size=10_000)) == KEYS


def test_both_clients_stream_a_backup_that_verifies_and_refuse_a_reader(
    shared_cluster: LocalCluster, tmp_path: Path
) -> None:
    """Client.backup() and AsyncClient.backup() (the console's download) give the file
    `statekeeper restore` takes; a token without admin on every namespace gets
    PermissionDenied before any byte."""
    import asyncio

    from statekeeper.client import AsyncClient, PermissionDenied
    from tests.integration.cluster_fixture import mint_token

    lc = shared_cluster
    urls, tls = lc.config.http_urls(), lc.tls
    root = root_token(lc.config.secret)
    reader = mint_token(lc, ns="default", role="reader")
    with Client(urls, token=root, tls=tls) as c:
        c.put("backup-probe", "x")
        (tmp_path / "sync.skb").write_bytes(b"".join(c.backup()))
    with Client(urls, token=reader, tls=tls) as c, pytest.raises(PermissionDenied):
        next(iter(c.backup()))

    async def take() -> bytes:
        async with AsyncClient(urls, token=root, tls=tls) as ac:
            return b"".join([piece async for piece in ac.backup()])

    (tmp_path / "async.skb").write_bytes(asyncio.run(take()))
    for name in ("sync.skb", "async.skb"):
        meta, _, _ = verify(str(tmp_path / name))
        assert meta["revision"] >= 1, name
