"""LangGraph checkpointers on this machine: StatekeeperSaver (3 replicas) against the savers
a LangGraph user would pick instead, SqliteSaver (a local file) and PostgresSaver (a local
PostgreSQL started here).

    python -m statekeeper.benchmarks.langgraph_savers [--quick] [--rounds 3] [--duration 3]
        [--threads 1,16] [--systems statekeeper,postgres,sqlite] [--endpoints URL,...]

Systems, all durable (each acknowledged put is on disk):

- statekeeper: a fresh local 3-node cluster (fsync=always; every put is one txn committed
  by a majority); one StatekeeperSaver shared by all threads (the sync Client is
  thread-safe). Or a running cluster with --endpoints.
- postgres: PostgreSQL from --pg-bin (default: the newest /usr/lib/postgresql/*/bin),
  initdb'ed into a temp dir, fsync=on, synchronous_commit=on, one server (no replica).
  One PostgresSaver per worker thread, each on its own connection (the default,
  --postgres-savers per-thread): a PostgresSaver serialises its calls on an instance lock,
  so one shared instance would run 16 threads one at a time.
- sqlite: SqliteSaver on one file (journal_mode=WAL, synchronous=FULL: an fsync per
  commit), one instance shared by the threads (the documented use: its lock serialises
  them; a connection per thread would queue on SQLite's single write lock instead).

Per round, each system in turn (A B C, A B C, ...) runs these cells, each a closed loop of
N threads (warm-up, then a measured window):

- put/N: saver.put of realistic checkpoints (benchmarks/langgraph_workload.py: a chain of
  --chain puts per thread id, --channels channels of ~--value-size dict values, the first
  put writes all channels, later ones change two, new_versions = the changed channels);
- get/N: saver.get_tuple of the latest checkpoint of a random thread id written by this
  system's put cells;
- graph/N: invoke of a 10-node StateGraph (trivial nodes in a chain) compiled with the
  saver, a fresh thread id per invoke, LangGraph's default durability ("async");
  throughput in node executions (steps) per second.

Every figure is the median over rounds, with the min-max in brackets. Results: tables on
stdout, a section in benchmarks/RESULTS.md (with the command), JSON (summaries, no raw
samples) and a PNG chart in benchmarks/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack, ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.benchmarks import langgraph_report as report
from statekeeper.benchmarks.compare.progress import make_bar
from statekeeper.benchmarks.langgraph_workload import (
    Chain,
    build_graph,
    closed_loop,
    get_op,
    graph_op,
    put_op,
    text_pool,
)
from statekeeper.benchmarks.load import (
    append_section,
    fs_type,
    machine_info,
    parse_size,
    statekeeper_target,
)

RESULTS = Path(__file__).with_name("RESULTS.md")
PLOTS = Path(__file__).with_name("results")
SYSTEMS = ("statekeeper", "postgres", "sqlite")
GRAPH_NODES = 10
# name: (default, --quick)
TUNABLES = {"rounds": (3, 2), "duration": (3.0, 1.0), "warmup": (1.0, 0.3)}


def int_list(text: str) -> list[int]:
    try:
        xs = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not xs or any(x < 1 for x in xs):
        raise argparse.ArgumentTypeError("need one or more integers >= 1")
    return xs


def system_list(text: str) -> list[str]:
    xs = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in xs if x not in SYSTEMS]
    if not xs or bad:
        raise argparse.ArgumentTypeError(f"systems are {', '.join(SYSTEMS)}; got {text!r}")
    return list(dict.fromkeys(xs))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m statekeeper.benchmarks.langgraph_savers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="2 rounds of 1 s cells (~1 minute)")
    p.add_argument("--rounds", type=int, help="rounds, systems alternating (default 3)")
    p.add_argument("--duration", type=float, help="measured seconds per cell (default 3)")
    p.add_argument("--warmup", type=float, help="unmeasured seconds per cell (default 1)")
    p.add_argument("--threads", type=int_list, default=[1, 16], help="put/get threads (1,16)")
    p.add_argument("--graph-threads", type=int_list, default=[1, 16], help="graph threads (1,16)")
    p.add_argument("--systems", type=system_list, default=list(SYSTEMS), help="default: all three")
    p.add_argument("--chain", type=int, default=10, help="puts per thread id (default 10)")
    p.add_argument("--channels", type=int, default=4, help="channels per checkpoint (default 4)")
    p.add_argument("--value-size", type=parse_size, default=1024, help="per channel (1KiB)")
    p.add_argument("--postgres-savers", choices=("per-thread", "shared"), default="per-thread")
    p.add_argument("--pg-bin", help="directory of initdb and pg_ctl")
    p.add_argument("--endpoints", help="a running statekeeper cluster (default: start one)")
    p.add_argument("--ns", default="bench-langgraph", help="statekeeper namespace")
    p.add_argument("--data-dir", type=Path, help="parent of the temp dirs (cluster, db files)")
    p.add_argument("--note", default="", help="a note for RESULTS.md (e.g. the machine's load)")
    p.add_argument("--results", type=Path, default=RESULTS, help="markdown file to append to")
    p.add_argument("--out-dir", type=Path, default=PLOTS, help="where JSON and PNG go")
    p.add_argument("--no-results", action="store_true", help="do not append to RESULTS.md")
    p.add_argument("--no-progress", action="store_true")
    return p


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    for name, (default, quick) in TUNABLES.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else default)
    if args.rounds < 1 or args.duration <= 0 or args.warmup < 0:
        p.error("need --rounds >= 1, --duration > 0, --warmup >= 0")
    if args.chain < 1 or not 1 <= args.channels <= 8 or args.value_size < 1:
        p.error("need --chain >= 1, 1 <= --channels <= 8, --value-size >= 1")
    return args


# -------------------------------------------------------------------------------- systems


@dataclass
class Backend:
    """One system: how to make a saver, and whether worker threads share one."""

    name: str
    setup: str  # the durability/topology line for the notes
    factory: Callable[[], Any]
    per_thread: bool = False
    savers: list[Any] = field(default_factory=list)
    graphs: dict[int, Any] = field(default_factory=dict)
    thread_ids: list[str] = field(default_factory=list)

    def saver(self, worker: int) -> Any:
        i = worker if self.per_thread else 0
        while len(self.savers) <= i:
            self.savers.append(self.factory())
        return self.savers[i]

    def graph(self, worker: int) -> Any:
        saver = self.saver(worker)
        if id(saver) not in self.graphs:
            self.graphs[id(saver)] = build_graph(saver, GRAPH_NODES)
        return self.graphs[id(saver)]


def _enter(stack: ExitStack, obj: Any) -> Any:
    """A saver from a factory that may return a context manager."""
    if hasattr(obj, "__enter__"):
        return stack.enter_context(obj)
    close = getattr(obj, "close", None)
    if close is not None:
        stack.callback(close)
    return obj


def statekeeper_backend(stack: ExitStack, endpoints: list[str], ns: str, where: str) -> Backend:
    from statekeeper.client.langgraph import StatekeeperSaver

    return Backend(
        "statekeeper",
        f"StatekeeperSaver on {where}; one saver shared by the threads",
        lambda: _enter(stack, StatekeeperSaver.from_endpoints(endpoints, ns=ns)),
    )


def postgres_backend(stack: ExitStack, args: argparse.Namespace) -> Backend:
    from langgraph.checkpoint.postgres import PostgresSaver

    from statekeeper.benchmarks.langgraph_postgres import LocalPostgres

    pg = stack.enter_context(LocalPostgres(args.pg_bin, args.data_dir))
    first = stack.enter_context(PostgresSaver.from_conn_string(pg.conninfo))
    first.setup()
    made = [first]

    def factory() -> Any:
        if made:
            return made.pop()
        return stack.enter_context(PostgresSaver.from_conn_string(pg.conninfo))

    s = pg.settings
    per_thread = args.postgres_savers == "per-thread"
    return Backend(
        "postgres",
        f"PostgresSaver on local PostgreSQL {s['server_version'].split()[0]} (one server, data on "
        f"{fs_type(pg.dir)}; fsync={s['fsync']}, synchronous_commit={s['synchronous_commit']}, "
        f"wal_sync_method={s['wal_sync_method']}); "
        + ("one saver and connection per thread" if per_thread else "one saver shared"),
        factory,
        per_thread=per_thread,
    )


def sqlite_backend(stack: ExitStack, args: argparse.Namespace) -> Backend:
    from langgraph.checkpoint.sqlite import SqliteSaver

    workdir = Path(
        stack.enter_context(tempfile.TemporaryDirectory(prefix="sqlite-lg-", dir=args.data_dir))
    )
    saver = stack.enter_context(SqliteSaver.from_conn_string(str(workdir / "checkpoints.sqlite")))
    saver.setup()
    mode = saver.conn.execute("PRAGMA journal_mode").fetchone()[0]
    sync = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[
        saver.conn.execute("PRAGMA synchronous").fetchone()[0]
    ]
    return Backend(
        "sqlite",
        f"SqliteSaver on one file (data on {fs_type(workdir)}; journal_mode={mode}, "
        f"synchronous={sync}); one saver shared by the threads",
        lambda: saver,
    )


# ---------------------------------------------------------------------------------- runs


def cells(args: argparse.Namespace) -> list[tuple[str, int]]:
    return (
        [("put", t) for t in args.threads]
        + [("get", t) for t in args.threads]
        + [("graph", t) for t in args.graph_threads]
    )


def make_ops(
    b: Backend, kind: str, threads: int, args: argparse.Namespace, r: int, pool: list[str]
) -> list[Any]:
    prefix = f"r{r}-{kind}{threads}"
    ops = []
    for w in range(threads):
        saver = b.saver(w)
        if kind == "put":
            chain = Chain(
                saver, prefix=f"{prefix}-w{w}", length=args.chain, channels=args.channels, pool=pool
            )
            ops.append(put_op(saver, chain, b.thread_ids.append))
        elif kind == "get":
            ops.append(get_op(saver, b.thread_ids, seed=r * 1000 + w))
        else:
            ops.append(graph_op(b.graph(w), GRAPH_NODES, f"{prefix}-w{w}"))
    return ops


def run_rounds(
    backends: list[Backend], args: argparse.Namespace
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    plan = cells(args)
    pool = text_pool(64, args.value_size)
    rounds: dict[str, dict[str, list[dict[str, Any]]]] = {b.name: {} for b in backends}
    bar = make_bar(args.rounds * len(backends) * len(plan), not args.no_progress)
    for r in range(args.rounds):
        for b in backends:
            for kind, t in plan:
                bar.set_description(f"round {r + 1}/{args.rounds} {b.name} {kind} x{t}")
                ops = make_ops(b, kind, t, args, r, pool)
                res = closed_loop(
                    ops, duration=args.duration, warmup=args.warmup,
                    tick=lambda done: bar.set_postfix_str(f"{done} ops"),
                )  # fmt: skip
                s = res.summary()
                rounds[b.name].setdefault(report.cell_id(kind, t), []).append(s)
                bar.update()
                if s["errors"]:
                    bar.write(f"{b.name} {kind} x{t}: errors {s['errors']}")
    bar.close()
    return rounds


def run_blocking(
    args: argparse.Namespace, endpoints: list[str] | None, where: str
) -> tuple[Any, list[Backend]]:
    with ExitStack() as stack:
        backends = []
        for name in args.systems:  # the order of --systems is the order within a round
            if name == "statekeeper":
                assert endpoints is not None
                backends.append(statekeeper_backend(stack, endpoints, args.ns, where))
            elif name == "postgres":
                backends.append(postgres_backend(stack, args))
            else:
                backends.append(sqlite_backend(stack, args))
        for b in backends:
            b.saver(0)  # connect before the clock starts
        return run_rounds(backends, args), backends


async def run(args: argparse.Namespace) -> tuple[Any, list[Backend]]:
    async with AsyncExitStack() as stack:
        endpoints, where = None, ""
        if "statekeeper" in args.systems:
            endpoints, target = await statekeeper_target(
                stack, args.endpoints, "sk-langgraph-", args.data_dir
            )
            where = "a " + target
        return await asyncio.to_thread(run_blocking, args, endpoints, where)


# -------------------------------------------------------------------------------- output


def notes(args: argparse.Namespace, backends: list[Backend], png: Path | None) -> list[str]:
    out = [b.setup for b in backends]
    out += [
        f"workload: put = saver.put of a chain of {args.chain} checkpoints per thread id "
        f"({args.channels} channels of ~{args.value_size} B dict values; the first put writes "
        "all, later ones change 2 and name only those in new_versions); get_tuple = latest "
        "checkpoint of a random thread id this saver wrote; graph = invoke of a "
        f'{GRAPH_NODES}-node StateGraph (trivial nodes in a chain, durability "async", the '
        "default) on a fresh thread id, steps/s = node executions per second",
        f"method: {args.rounds} rounds, the systems alternating within each "
        f"({' '.join(b.name for b in backends)}); each cell = a closed loop of N threads, "
        f"{args.warmup:g} s warm-up then {args.duration:g} s measured; figures = median over "
        "rounds (min-max over rounds); p50/p99 of each round from all its measured ops"
        + (f"; plot: {os.path.relpath(png, args.results.resolve().parent)}" if png else ""),
    ]
    load = [getattr(args, k, None) for k in ("load_before", "load_after")]
    if None not in load:
        out.append(
            f"machine load: 1-minute load average {load[0]:.1f} at the start, {load[1]:.1f} at "
            f"the end, on {machine_info()['nproc']} cores shared by the client, the servers and "
            "any other process"
        )
    if args.note:
        out.append(f"note: {args.note}")
    return out


def write_outputs(
    argv: list[str], args: argparse.Namespace, rounds: Any, backends: list[Backend]
) -> str:
    agg = report.aggregate_all(rounds)
    ts = report.targets(rounds, high=max(args.threads), low=min(args.threads))
    tables = [report.ops_table(agg, args.threads), report.graph_table(agg, args.graph_threads)]
    if ts:
        tables.append(report.targets_table(ts))
    text = "\n\n".join(tables)
    print(text)
    now = dt.datetime.now(dt.UTC)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stem = args.out_dir / f"langgraph-savers-{now:%Y-%m-%d-%H%M}"
    png = report.plot(agg, args.threads, args.graph_threads, stem.with_suffix(".png"))
    payload = {
        "command": " ".join(["python -m statekeeper.benchmarks.langgraph_savers", *argv]).strip(),
        "machine": machine_info(),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "systems": {b.name: b.setup for b in backends},
        "rounds": rounds,
        "aggregate": agg,
        "targets": ts,
    }
    stem.with_suffix(".json").write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {stem.with_suffix('.json')}" + (f" and {png}" if png else ""), file=sys.stderr)
    if not args.no_results:
        append_section(
            args.results,
            "LangGraph checkpointers: StatekeeperSaver vs PostgresSaver vs SqliteSaver",
            "statekeeper.benchmarks.langgraph_savers",
            argv,
            notes(args, backends, png),
            tables,
            now,
        )
    return text


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    args.load_before = os.getloadavg()[0]
    rounds, backends = asyncio.run(run(args))
    args.load_after = os.getloadavg()[0]
    write_outputs(argv, args, rounds, backends)
    return 0


if __name__ == "__main__":
    sys.exit(main())
