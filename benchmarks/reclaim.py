"""Storage reclaim: a million checkpoint versions under a keep-last-10 retention policy;
does the RocksDB size on disk and the nodes' RSS stay flat?

    python -m statekeeper.benchmarks.reclaim [--versions 1000000] [--agents 100] [--value-size 1024]
                                 [--control-versions 100000] [--data-dir DIR]
                                 [--endpoints URL,... --node-dirs DIR,...] [--no-results]

What it does (docs/protocol.md, "Retention"):

1. A fresh local 3-node cluster, fsync=always, data under ``--data-dir`` (default
   benchmarks/out: keep it on a disk, not tmpfs), with ``[retention] gc_interval_seconds =
   1`` (the leader enforces policies every second instead of every 10) and
   ``history_revisions = 10000`` (the MVCC history keeps every version of the last N
   revisions readable, deleted ones included: with the default 100,000, a keep-last-10
   store of 1 KiB checkpoints would still hold ~100 MiB of deleted versions per node, so
   the run would measure the history window and not the policy). Or a running cluster:
   ``--endpoints`` plus ``--node-dirs`` (each node's data dir, for the sizes; RSS needs
   ``--pids``).
2. ``retention_set("agent/", within="ckpt", keep_last=10)`` (what an agent / LangGraph
   user sets), then ``--versions`` checkpoint versions ``agent/{a:03d}/ckpt/{n:012d}``
   round-robin over ``--agents`` agents, random (incompressible) ``--value-size`` values,
   in ``client.batch()`` requests of ``--batch`` puts (not atomic, one revision per put,
   like separate checkpoints; the server takes at most 1024 ops and 4 MiB per request),
   ``--writers`` requests in flight, as fast as the cluster takes them (``--rate``: at most
   that many versions per second).
3. Every ``--interval`` s a sample: versions acknowledged, live keys under agent/ (a paged
   keys_only range, serializable), revision, each node's RocksDB dir (<node>/db) and raft
   dir (<node>/raft: journal and snapshot) sizes (du: allocated blocks) and VmRSS.
4. After the writes: wait until GC has caught up (live keys == agents x 10), sample; then
   the MVCC ``compact`` op at the current revision (a user drops all history) plus
   2 x versions / 256 + 100 linearizable reads on a follower (each is a barrier entry there, and apply prunes
   compacted history only a bounded amount per entry: see mvcc_compact), sample; then the cluster is stopped and each
   node's RocksDB is copied and compacted offline with rocksdict's ``compact_range`` (the
   node has no admin path for a RocksDB manual compaction; RocksDB compacts in the
   background on its own, which is what the earlier samples show), and node-0's copy is
   broken down by record type (node/store/keys.py).
5. A control: the same writes without the policy, ``--control-versions`` of them (default
   100,000, on a fresh cluster), extrapolated linearly to ``--versions`` (labelled so).

Output: a table, a section in benchmarks/RESULTS.md (``--no-results``: not), a JSON of the
samples and a PNG (benchmarks/results/reclaim-<date>.png). Sizes only: the machine's 2
cores are shared, so the run makes no speed claims.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from statekeeper.benchmarks import reclaim_report as rep
from statekeeper.benchmarks.cluster_control import rss_of_pid
from statekeeper.benchmarks.load import append_section, fs_type
from statekeeper.benchmarks.reclaim_report import KEEP_LAST, PREFIX, Run, per_version, report
from statekeeper.client import AsyncClient, RetryPolicy

RESULTS = Path(__file__).with_name("RESULTS.md")
PLOTS = Path(__file__).with_name("results")
NS = "reclaim"
PATIENT = RetryPolicy(max_attempts=100, deadline=120.0, backoff_max=1.0)


@dataclass
class Target:
    """Where the nodes are: URLs, data dirs and pids (None: not measurable)."""

    endpoints: list[str]
    dirs: dict[str, Path]
    pids: Callable[[], dict[str, int | None]]
    desc: str
    stop: Callable[[], Any] | None = None  # stops the cluster (fresh clusters only)


# ------------------------------------------------------------------ the cluster


@asynccontextmanager
async def fresh_cluster(workdir: Path, args: argparse.Namespace) -> AsyncIterator[Target]:
    """A 3-node cluster like StatekeeperSystem.managed_cluster's, with this run's
    [retention] settings; stopped (down, then kill on failure) on exit."""
    from statekeeper.benchmarks.cluster_control import free_port_block, running
    from statekeeper.benchmarks.systems import StatekeeperControl
    from statekeeper.cluster.supervisor import LocalCluster
    from statekeeper.node import config as node_config

    rng = random.Random()
    http = free_port_block(3, set(), rng)
    raft = free_port_block(3, set(range(http, http + 3)), rng)
    cfg = node_config.local_cluster(http_base_port=http, raft_base_port=raft, fsync="always")
    cfg = dataclasses.replace(
        cfg,
        retention=dataclasses.replace(
            cfg.retention,
            gc_interval_seconds=args.gc_interval,
            history_revisions=args.history_revisions,
            idempotency_seconds=args.idempotency_seconds or cfg.retention.idempotency_seconds,
        ),
    )
    path = workdir / "cluster.toml"
    node_config.write(cfg, path)
    cfg = node_config.load(path)
    lc = LocalCluster(cfg, path, progress=None)
    control = StatekeeperControl(lc, cfg.http_urls())
    up, down = (lambda: lc.up(timeout=60.0)), (lambda: lc.down(timeout=30.0))
    try:
        async with running(control, up, down, lc.kill_all):
            yield Target(
                cfg.http_urls(),
                {n: cfg.node_data_dir(n) for n in lc.node_ids},
                lambda: {n: lc.pid(n) for n in lc.node_ids},
                f"fresh local 3-node cluster (fsync=always, data on {fs_type(workdir)})",
                stop=lambda: asyncio.to_thread(lc.down, 30.0),
            )
    finally:
        lc.close()


# ------------------------------------------------------------------ sampling


async def live_keys(c: AsyncClient) -> tuple[int, int]:
    """(live keys under PREFIX, revision of the first page): keys_only pages of 10,000,
    serializable, each from the key after the last one (+ "\\x01") at the then current
    revision (a count pinned to one revision fails `compacted` once the writes move the
    history window past it: one page per call, not one snapshot)."""
    n, rev, start = 0, 0, PREFIX
    end = PREFIX[:-1] + chr(ord(PREFIX[-1]) + 1)
    while True:
        page = await c.range(
            start=start, end=end, keys_only=True, limit=10_000, consistency="serializable"
        )
        n += len(page.kvs)
        rev = rev or page.revision
        if not page.more or not page.kvs:
            return n, rev
        start = page.kvs[-1].key + "\x01"  # keys hold no NUL: the next possible key


async def take(c: AsyncClient, target: Target, t0: float, phase: str, written: int) -> rep.Sample:
    live, rev = await live_keys(c)
    st = await c.status()
    pids = target.pids()
    return rep.Sample(
        t=round(time.monotonic() - t0, 1),
        phase=phase,
        written=written,
        live=live,
        revision=st.get("revision", rev),
        compact_revision=st.get("compact_revision", 0),
        db={n: await asyncio.to_thread(rep.du, d / "db") for n, d in target.dirs.items()},
        raft={n: await asyncio.to_thread(rep.du, d / "raft") for n, d in target.dirs.items()},
        rss={n: r for n, p in pids.items() if p and (r := rss_of_pid(p)) is not None},
    )


def _say(msg: str) -> None:
    try:
        from tqdm import tqdm

        tqdm.write(msg, file=sys.stderr)
    except ImportError:
        print(msg, file=sys.stderr, flush=True)


def _line(s: rep.Sample) -> str:
    return (
        f"[{s.phase} t={s.t:.0f}s] written {s.written:,} live {s.live:,} rev {s.revision:,} "
        f"(compacted {s.compact_revision:,}); db MiB {rep._per_node(s.db, sorted(s.db))}; raft "
        f"MiB {rep._per_node(s.raft, sorted(s.raft))}; RSS MiB {rep._per_node(s.rss, sorted(s.rss))}"
    )


class Sampler:
    """A background task: a sample every ``interval`` s while the writes run."""

    def __init__(self, c: AsyncClient, target: Target, run: Run, interval: float) -> None:
        self.c, self.target, self.run, self.interval = c, target, run, interval
        self.t0 = time.monotonic()
        self.written = 0
        self.phase = "write"

    async def sample(self, phase: str | None = None) -> rep.Sample:
        s = await take(self.c, self.target, self.t0, phase or self.phase, self.written)
        self.run.samples.append(s)
        _say(_line(s))
        return s

    async def loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.sample()
            except Exception as e:  # a slow node must not end the run: the next one tries
                _say(f"sample failed: {type(e).__name__}: {e}")


# ------------------------------------------------------------------ the writes


def key_of(v: int, agents: int) -> str:
    """Version v (0, 1, ...) goes to agent v % agents as its checkpoint v // agents."""
    return f"{PREFIX}{v % agents:03d}/ckpt/{v // agents:012d}"


async def write_all(c: AsyncClient, sampler: Sampler, n: int, args: argparse.Namespace) -> None:
    """n versions in batches of args.batch, args.writers batches in flight (at most
    args.rate versions/s when set)."""
    from tqdm import tqdm

    bar = tqdm(total=n, unit="ver", unit_scale=True, disable=args.no_progress, file=sys.stderr)
    starts = iter(range(0, n, args.batch))
    t0 = time.monotonic()

    async def writer() -> None:
        for lo in starts:
            if args.rate:  # open loop: batch lo is due at lo / rate s
                await asyncio.sleep(max(0.0, t0 + lo / args.rate - time.monotonic()))
            b = c.batch()
            for v in range(lo, min(n, lo + args.batch)):
                b.put(key_of(v, args.agents), os.urandom(args.value_size))
            for r in await b.execute():
                if isinstance(r, BaseException):
                    raise r
            sampler.written += len(b.ops)
            bar.update(len(b.ops))

    try:
        await asyncio.gather(*(writer() for _ in range(args.writers)))
    finally:
        bar.close()


async def wait_gc(sampler: Sampler, want: int, timeout: float) -> float | None:
    """Seconds until live keys == want (None: not within timeout), sampling meanwhile."""
    sampler.phase = "gc"
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        s = await sampler.sample()
        if s.live <= want:
            return time.monotonic() - t0
        await asyncio.sleep(sampler.interval)
    return None


def barriers_for(versions: int) -> int:
    """Entries that prune everything the run wrote: apply prunes, per entry, up to
    HIST_PRUNE_MIN (256) superseded-index records (each with its history record) and as
    many change-log records (node/store/compaction.py); a deleted version leaves 2
    superseded-index records (its value and its tombstone), a version 1 or 2 change-log
    records."""
    from statekeeper.node.store.compaction import HIST_PRUNE_MIN

    return -(-2 * versions // HIST_PRUNE_MIN) + 100


async def mvcc_compact(c: AsyncClient, target: Target, reads: int) -> int:
    """compact at the current revision, then `reads` linearizable reads on a follower.
    compact only moves compact_revision: apply prunes the history physically a bounded
    number of records per raft entry, so an idle cluster keeps it on disk. The leader
    serves linearizable reads by ReadIndex (no entry); a follower proposes a barrier entry
    per read, which drives the pruning without writing anything."""
    st = await c.status()
    rev = st["revision"]
    await c.compact(rev)
    leader = st.get("leader_url")
    follower = next((u for u in target.endpoints if u != leader), target.endpoints[0])
    _say(f"compact at {rev:,}; {reads:,} linearizable reads on {follower} to drive the pruning")
    async with AsyncClient([follower], ns=NS, timeout=30.0, retry=PATIENT,
                           prefer_leader=False) as f:  # fmt: skip
        for _ in range(reads):
            await f.range(PREFIX, limit=1, keys_only=True, consistency="linearizable")
    return rev


# ------------------------------------------------------------------ offline compaction


def offline_compact(db_dir: Path, scratch: Path, with_parts: bool) -> tuple[int, int, dict]:
    """Copy a stopped node's RocksDB, compact the copy fully (compact_range over every
    key); (size before, size after, record-type breakdown if asked). The copy is removed."""
    from rocksdict import Options, Rdict

    copy = scratch / f"{db_dir.parent.name}-db"
    shutil.copytree(db_dir, copy)
    try:
        before = rep.du(copy)
        db = Rdict(str(copy), Options(raw_mode=True))
        try:
            db.compact_range(None, None)
            parts = rep.breakdown(db.items()) if with_parts else {}
        finally:
            db.close()
        return before, rep.du(copy), parts
    finally:
        shutil.rmtree(copy, ignore_errors=True)


async def finish_offline(target: Target, run: Run, scratch: Path) -> None:
    if target.stop is None:
        run.notes.append("offline compaction skipped: the cluster is not ours to stop")
        return
    await target.stop()
    for i, (node, d) in enumerate(sorted(target.dirs.items())):
        before, after, parts = await asyncio.to_thread(offline_compact, d / "db", scratch, i == 0)
        run.offline[node] = (before, after)
        if parts:
            run.parts = parts
        _say(
            f"{node}: RocksDB {rep.mib(before)} MiB stopped, {rep.mib(after)} MiB after compact_range"
        )


# ------------------------------------------------------------------ one run


async def one_run(target: Target, run: Run, policy: bool, args: argparse.Namespace,
                  scratch: Path) -> None:  # fmt: skip
    async with AsyncClient(target.endpoints, ns=NS, timeout=30.0, retry=PATIENT) as c:
        if policy:
            await c.retention_set(PREFIX, within="ckpt", keep_last=KEEP_LAST)
        sampler = Sampler(c, target, run, args.interval)
        run.extra = []
        await sampler.sample()
        task = asyncio.create_task(sampler.loop())
        t0 = time.monotonic()
        try:
            await write_all(c, sampler, run.versions, args)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        run.write_s = time.monotonic() - t0
        run.samples.append(dataclasses.replace(await sampler.sample(), phase="write"))
        if policy:
            want = args.agents * min(KEEP_LAST, -(-run.versions // args.agents))
            run.gc_wait_s = await wait_gc(sampler, want, args.gc_timeout)
            await asyncio.sleep(args.settle)
            run.extra.append(("GC caught up", await sampler.sample("gc")))
            reads = args.barriers or barriers_for(run.versions)
            rev = await mvcc_compact(c, target, reads)
            await asyncio.sleep(args.settle)
            s = await sampler.sample("compact")
            run.extra.append((f"after MVCC compact at {rev:,}", s))
    await finish_offline(target, run, scratch)


async def run_all(args: argparse.Namespace) -> tuple[list[Run], str]:
    runs = [Run("keep-last-10", args.versions)]
    if args.control_versions:
        runs.append(Run("no policy (control)", args.control_versions))
    desc = ""
    for i, run in enumerate(runs):
        _say(f"=== {run.label}: {run.versions:,} versions ===")
        async with AsyncExitStack() as stack:
            work = Path(stack.enter_context(
                tempfile.TemporaryDirectory(prefix="sk-reclaim-", dir=args.data_dir)))  # fmt: skip
            if args.endpoints:
                target = external_target(args)
            else:
                target = await stack.enter_async_context(fresh_cluster(work, args))
            desc = target.desc
            await one_run(target, run, i == 0, args, work)
        if args.endpoints:
            break  # one cluster: no clean control
    return runs, desc


def external_target(args: argparse.Namespace) -> Target:
    urls = [e.strip() for e in args.endpoints.split(",") if e.strip()]
    dirs = [Path(d) for d in (args.node_dirs or "").split(",") if d]
    if len(dirs) != len(urls):
        raise SystemExit("--endpoints needs --node-dirs: one data dir per node, same order")
    pids = [int(p) for p in (args.pids or "").split(",") if p]
    names = [d.name for d in dirs]
    return Target(urls, dict(zip(names, dirs, strict=True)),
                  lambda: dict(zip(names, pids, strict=False)),
                  "running cluster at " + ", ".join(urls))  # fmt: skip


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m statekeeper.benchmarks.reclaim",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    a = p.add_argument
    a("--versions", type=int, default=1_000_000, help="checkpoint versions (default 1,000,000)")
    a("--agents", type=int, default=100, help="agents (default 100)")
    a("--value-size", type=int, default=1024, help="bytes per checkpoint (default 1024)")
    a("--batch", type=int, default=500, help="puts per batch request (default 500; max 1024)")
    a("--writers", type=int, default=4, help="batch requests in flight (default 4)")
    a("--rate", type=float, help="cap on versions written per second (default: none)")
    a("--control-versions", type=int, default=100_000,
      help="versions of the no-policy control (default 100,000; 0: no control)")  # fmt: skip
    a("--interval", type=float, default=5.0, help="seconds between samples (default 5)")
    a("--gc-interval", type=float, default=1.0, help="[retention] gc_interval_seconds (default 1)")
    a(
        "--history-revisions",
        type=int,
        default=10_000,
        help="[retention] history_revisions (10,000)",
    )
    a("--gc-timeout", type=float, default=600.0, help="longest wait for GC to catch up (600 s)")
    a("--settle", type=float, default=5.0, help="idle seconds before the end samples (default 5)")
    a("--barriers", type=int,
      help="linearizable follower reads after compact (default: enough for every record "
      "the run wrote, 2 x versions / 256 + 100)")  # fmt: skip
    a("--idempotency-seconds", type=int,
      help="[retention] idempotency_seconds (default: the store's, 86,400)")  # fmt: skip
    a("--data-dir", type=Path, default=Path(__file__).with_name("out"),
      help="parent of the fresh clusters' directories (default benchmarks/out; not tmpfs)")  # fmt: skip
    a("--endpoints", help="a running cluster's URLs instead (needs --node-dirs; no control)")
    a("--node-dirs", help="with --endpoints: each node's data dir, same order")
    a("--pids", help="with --endpoints: each node's pid, same order (for RSS)")
    a("--note", default="", help="a sentence for the RESULTS.md section")
    a("--no-results", action="store_true", help="do not append to RESULTS.md")
    a("--no-progress", action="store_true")
    args = p.parse_args(argv)
    if not 1 <= args.batch <= 1024:
        p.error("--batch must be 1..1024 (the server's max_ops_per_request)")
    if args.batch * (args.value_size + 128) > 4 * 1024 * 1024:
        p.error("--batch x --value-size must stay under 4 MiB (max_request_bytes)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    # A run started in the background (nohup ... &) inherits SIGINT ignored: restore it,
    # so kill -INT stops the writes and the cluster cleanly.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    args.data_dir.mkdir(parents=True, exist_ok=True)
    runs, desc = asyncio.run(run_all(args))
    now = dt.datetime.now(dt.UTC)
    PLOTS.mkdir(exist_ok=True)
    stem = PLOTS / f"reclaim-{now:%Y-%m-%d-%H%M}"
    stem.with_suffix(".json").write_text(json.dumps(
        [{**asdict(r), "extra": [[lbl, asdict(s)] for lbl, s in r.extra]} for r in runs], indent=1))  # fmt: skip
    control = runs[1] if len(runs) > 1 else None
    cpv = per_version(control) if control else None
    png = rep.plot(runs, stem.with_suffix(".png"),
                   (runs[0].versions, cpv) if cpv else None)  # fmt: skip
    notes, tables = report(runs, desc, args, png)
    print("\n".join(f"- {n}" for n in notes) + "\n\n" + "\n\n".join(tables))
    if not args.no_results:
        append_section(
            RESULTS, "Storage reclaim", "statekeeper.benchmarks.reclaim", argv, notes, tables, now
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
