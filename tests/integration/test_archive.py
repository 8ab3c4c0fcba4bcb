"""Archival to a local directory against a real 3-node cluster (docs/archive.md): agent
checkpoints and a stream archived with keep_last 10 and brought back byte-identical; the
archived reads (Archived, archived="fetch" / "restore"); the `statekeeper archive` CLI;
and the crash tests: the archiver killed by a failpoint after each of its steps loses
nothing, a second run completes, and `archive list --orphans` shows what the kill left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from statekeeper.client import Archived, AsyncClient, Client, Event, NotFound
from statekeeper.client.archive import checksum, decode
from statekeeper.cluster.supervisor import LocalCluster

pytestmark = pytest.mark.integration

CKPTS = 30
KEEP = 10
EVENTS = 50


def _urls(lc: LocalCluster) -> list[str]:
    return [lc.url(n) for n in lc.node_ids]


def _ckpt(n: int, agent: str = "a1") -> str:
    return f"agent/{agent}/ckpt/{n:012d}"


def _write_checkpoints(c: Client, agent: str = "a1") -> dict[str, bytes]:
    values = {}
    for n in range(1, CKPTS + 1):
        values[_ckpt(n, agent)] = os.urandom(64) + json.dumps({"step": n}).encode()
        c.put(_ckpt(n, agent), values[_ckpt(n, agent)])
    c.put(f"agent/{agent}/head", b"30")
    return values


def _write_stream(c: Client, stream: str) -> list:
    events = [
        Event(
            os.urandom(16),
            type="step" if i % 2 else "",
            id=f"e{i}" if i % 3 else None,
            meta={"i": i, "ok": True} if i % 4 == 0 else None,
        )
        for i in range(1, EVENTS + 1)
    ]
    for i in range(0, EVENTS, 10):
        c.append(stream, events[i : i + 10])
    return list(c.read_stream(stream, start=1).events)


def _cli(lc: LocalCluster, *argv: str, env: dict[str, str] | None = None):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "statekeeper.cluster.cli",
            "archive",
            *argv,
            "--endpoints",
            ",".join(_urls(lc)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def _fields(e) -> tuple:
    return (e.seq, e.data, e.type, e.time_ms, e.revision, e.id, e.meta)


def test_checkpoints_and_a_stream_round_trip(shared_cluster: LocalCluster, tmp_path: Path) -> None:
    ns = f"arch-{uuid.uuid4().hex[:8]}"
    url = f"file://{tmp_path}/archive"
    with Client(_urls(shared_cluster), ns=ns, archive_roots=[url]) as c:
        values = _write_checkpoints(c)
        before = {k: c.get(k) for k in values}
        original = _write_stream(c, "agent/a1/log")
        steps: list[str] = []
        r = c.archive_run(
            "agent/",
            within="ckpt",
            keep_last=KEEP,
            to=url,
            progress=lambda step, info: steps.append(step),
        )
        assert r["sealed_keys"] == CKPTS - KEEP and r["skipped"] == [], r
        assert steps == ["planned", "segment-written", "manifest-written", "sealed", "planned"]
        seg = r["segments"][0]["segment"]
        live = [kv.key for kv in c.range(prefix="agent/a1/", keys_only=True)]
        assert live == [_ckpt(n) for n in range(CKPTS - KEEP + 1, CKPTS + 1)] + ["agent/a1/head"]
        # the archived key says where it went; a past revision still reads it
        with pytest.raises(Archived) as info:
            c.get(_ckpt(3))
        assert info.value.segment == seg and info.value.key == _ckpt(3)
        assert info.value.url == r["segments"][0]["url"] and info.value.status == 410
        assert c.get(_ckpt(3), revision=before[_ckpt(3)].mod_revision).value == values[_ckpt(3)]
        with pytest.raises(Archived):
            c.get(_ckpt(3), default=None)
        got = c.get(_ckpt(3), archived="fetch")
        assert got.archived and got.value == values[_ckpt(3)]
        assert (got.version, got.create_revision, got.mod_revision) == (
            before[_ckpt(3)].version,
            before[_ckpt(3)].create_revision,
            before[_ckpt(3)].mod_revision,
        )
        # the file on disk verifies against the cluster's record
        rec = next(s for s in c.archive_list()["segments"] if s["id"] == seg)
        path = Path(rec["url"].removeprefix("file://"))
        assert decode(path.read_bytes(), rec["sha256"], seg).keys[0].key == _ckpt(1)
        assert rec["keys"] == CKPTS - KEEP and checksum(path.read_bytes()) == rec["sha256"]

        # the stream: 40 events archived, readable from the archive
        rs = c.archive_run("agent/", target="streams", keep_last=KEEP, to=url)
        assert rs["sealed_events"] == EVENTS - KEEP, rs
        sseg = rs["segments"][0]["segment"]
        with pytest.raises(Archived) as info:
            c.read_stream("agent/a1/log", start=1)
        assert (info.value.segment, info.value.from_seq, info.value.before_seq) == (sseg, 1, 41)
        assert [_fields(e) for e in c.read_stream("agent/a1/log", start=41)] == [
            _fields(e) for e in original[40:]
        ]
        page = c.read_stream("agent/a1/log", start=5, limit=7, archived="fetch")
        assert page.archived and [_fields(e) for e in page] == [_fields(e) for e in original[4:11]]

        # restore: keys byte-identical (new revision, version 1), events identical
        rr = c.archive_restore(seg)
        assert (rr["restored_keys"], rr["skipped"]) == (CKPTS - KEEP, []), rr
        for n in range(1, CKPTS - KEEP + 1):
            kv = c.get(_ckpt(n))
            assert kv.value == values[_ckpt(n)] and kv.version == 1
            assert kv.mod_revision == kv.create_revision == rr["revision"]
        rs2 = c.archive_restore(sseg, streams=["agent/a1/log"])
        assert rs2["restored_events"] == EVENTS - KEEP, rs2
        back = list(c.events("agent/a1/log", start=1))
        assert [_fields(e) for e in back] == [_fields(e) for e in original]
        # dedup records came back: re-appending a restored id is a duplicate
        dup = c.append(
            "agent/a1/log", [Event(original[1].data, type=original[1].type, id=original[1].id)]
        )
        assert dup.events[0].duplicate and dup.events[0].seq == 2
        rec = next(s for s in c.archive_list()["segments"] if s["id"] == seg)
        assert rec["restored_keys"] == CKPTS - KEEP


async def test_the_async_client_archives_fetches_and_restores(
    shared_cluster: LocalCluster, tmp_path: Path
) -> None:
    ns = f"arch-{uuid.uuid4().hex[:8]}"
    async with AsyncClient(_urls(shared_cluster), ns=ns, archive_roots=[str(tmp_path)]) as c:
        for n in range(1, 6):
            await c.put(_ckpt(n), b"v%d" % n)
        r = await c.archive_run("agent/", within="ckpt", keep_last=2, to=str(tmp_path))
        assert r["sealed_keys"] == 3
        with pytest.raises(Archived):
            await c.get(_ckpt(1))
        assert (await c.get(_ckpt(1), archived="fetch")).value == b"v1"
        kv = await c.get(_ckpt(2), archived="restore")
        assert kv.value == b"v2" and not kv.archived
        assert (await c.get(_ckpt(2))).value == b"v2"
        out = await c.archive_restore(r["segments"][0]["segment"], ns=ns)
        assert out["restored_keys"] == 2 and [s[1] for s in out["skipped"]] == ["live"]


def test_the_cli_runs_lists_and_restores(shared_cluster: LocalCluster, tmp_path: Path) -> None:
    ns = f"arch-{uuid.uuid4().hex[:8]}"
    url = f"file://{tmp_path}/archive"
    with Client(_urls(shared_cluster), ns=ns) as c:
        values = _write_checkpoints(c)
        run = _cli(
            shared_cluster,
            "run",
            "--ns",
            ns,
            "--prefix",
            "agent/",
            "--within",
            "ckpt",
            "--keep-last",
            str(KEEP),
            "--to",
            url,
            "--json",
        )
        assert run.returncode == 0, run.stderr
        out = json.loads(run.stdout)
        assert out["sealed_keys"] == CKPTS - KEEP
        assert "segment-written" in run.stderr and "sealed" in run.stderr
        seg = out["segments"][0]["segment"]
        listed = _cli(shared_cluster, "list", "--ns", ns, "--json")
        assert listed.returncode == 0, listed.stderr
        (rec,) = json.loads(listed.stdout)["segments"]
        assert (rec["id"], rec["keys"], rec["ns"]) == (seg, CKPTS - KEEP, ns)
        text = _cli(shared_cluster, "list", "--ns", ns)
        assert seg in text.stdout and text.returncode == 0
        orphans = _cli(shared_cluster, "list", "--ns", ns, "--orphans", "--to", url, "--json")
        assert json.loads(orphans.stdout)["orphans"] == [], orphans.stdout
        refused = _cli(shared_cluster, "restore", seg, "--key", _ckpt(4))  # no archive root
        assert refused.returncode == 1 and "archive root" in refused.stderr, refused
        restored = _cli(shared_cluster, "restore", seg, "--key", _ckpt(4), "--archive", url)
        assert restored.returncode == 0 and "restored 1 keys" in restored.stdout, restored
        assert c.get(_ckpt(4)).value == values[_ckpt(4)]
        with pytest.raises(Archived):
            c.get(_ckpt(5))
        missing = _cli(shared_cluster, "restore", "no-such-segment", "--ns", ns)
        assert missing.returncode == 3 and "no archive segment" in missing.stderr
        bad = _cli(shared_cluster, "run", "--ns", ns, "--prefix", "agent/", "--to", url)
        assert bad.returncode == 2


@pytest.mark.parametrize(
    ("step", "orphan"),
    [("segment-written", "stray_file"), ("manifest-written", "unsealed"), ("sealed", None)],
)
def test_a_killed_archiver_loses_nothing(
    shared_cluster: LocalCluster, tmp_path: Path, step: str, orphan: str | None
) -> None:
    ns = f"arch-{uuid.uuid4().hex[:8]}"
    url = f"file://{tmp_path}/archive"
    argv = (
        "run",
        "--ns",
        ns,
        "--prefix",
        "agent/",
        "--within",
        "ckpt",
        "--keep-last",
        str(KEEP),
        "--to",
        url,
    )
    selected = [_ckpt(n) for n in range(1, CKPTS - KEEP + 1)]
    with Client(_urls(shared_cluster), ns=ns, archive_roots=[url]) as c:
        values = _write_checkpoints(c)
        killed = _cli(shared_cluster, *argv, env={"STATEKEEPER_FAILPOINTS": f"archive-{step}=exit"})
        assert killed.returncode == 86, killed.stderr  # node/failpoints.py EXIT_CODE
        assert f"failpoint archive-{step}: exiting" in killed.stderr
        for key in selected:  # nothing lost: live, or readable from the archive
            assert c.get(key, archived="fetch").value == values[key]
        again = _cli(shared_cluster, *argv, "--json")
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["sealed_keys"] == (0 if step == "sealed" else 20)
        for key in selected:  # now all archived, in a segment whose file verifies
            with pytest.raises(Archived) as info:
                c.get(key)
            data = Path(info.value.url.removeprefix("file://")).read_bytes()
            seg = decode(data, info.value.sha256, info.value.segment)
            assert seg.key(key).value == values[key]
        for n in range(CKPTS - KEEP + 1, CKPTS + 1):
            assert c.get(_ckpt(n)).value == values[_ckpt(n)]
        with pytest.raises(NotFound):
            c.get("agent/a1/ckpt/none")
        listed = _cli(shared_cluster, "list", "--ns", ns, "--orphans", "--to", url, "--json")
        assert listed.returncode == 0, listed.stderr
        kinds = [o["kind"] for o in json.loads(listed.stdout)["orphans"]]
        assert kinds == ([] if orphan is None else [orphan])
