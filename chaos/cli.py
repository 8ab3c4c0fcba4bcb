"""``statekeeper chaos ...`` (also ``python -m statekeeper.chaos ...``): run, list, suite, soak.

Exit codes: 0 every verdict passed (or skipped / unknown), 1 a verdict failed or a run
broke, 2 bad usage, 130 interrupted (after cleaning up).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from statekeeper.node.config import FSYNC_MODES

PROG = "statekeeper chaos"
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def _run_args(p: argparse.ArgumentParser, *, suite: bool) -> None:
    p.add_argument(
        "--duration",
        type=float,
        default=20.0 if suite else 30.0,
        metavar="S",
        help="seconds of workload per scenario (default: %(default)s)",
    )
    _workload_args(p)
    p.add_argument(
        "--warmup",
        type=float,
        metavar="S",
        help="seconds before the fault (default: 20%% of --duration, >= 2)",
    )
    p.add_argument(
        "--fault-window",
        type=float,
        metavar="S",
        help="seconds the fault lasts (default: 35%% of --duration, >= 3)",
    )
    _output_args(p, check_time_limit=120.0)


def _workload_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--clients",
        type=int,
        default=16,
        metavar="N",
        help="concurrent clients (default: %(default)s)",
    )
    p.add_argument("--seed", type=int, default=7, help="random seed (default: %(default)s)")
    p.add_argument(
        "--tls",
        action="store_true",
        help="run the cluster with HTTPS and raft TLS (a CA made for the run); the clients verify it",
    )
    p.add_argument(
        "--auth",
        action="store_true",
        help="run the cluster with [auth] on; the clients use a writer token minted for the run",
    )
    p.add_argument(
        "--fsync",
        choices=FSYNC_MODES,
        default="always",
        help="the cluster's fsync setting (default: %(default)s)",
    )
    p.add_argument(
        "--nodes", type=int, default=3, metavar="N", help="cluster size (default: %(default)s)"
    )
    p.add_argument(
        "--keys",
        type=int,
        default=8,
        metavar="N",
        help="size of the key set; even (default: %(default)s)",
    )
    p.add_argument(
        "--stream-share",
        type=float,
        default=0.15,
        metavar="F",
        help="share of each client's ops that are event-stream appends and reads, checked "
        "by chaos.checker.streams; 0 turns streams off (default: %(default)s)",
    )
    p.add_argument(
        "--watchers",
        type=int,
        default=2,
        metavar="N",
        help="watchers on the kv keys through the whole run, checked against the keys' "
        "change history by chaos.checker.watch; 0 turns the watch check off "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--lockers",
        type=int,
        default=3,
        metavar="N",
        help="clients contending for one lock through the whole run, doing fenced writes "
        "checked by chaos.checker.locks; 0 turns the lock check off (default: %(default)s)",
    )
    p.add_argument(
        "--crdt-clients",
        type=int,
        default=2,
        metavar="N",
        help="agents sharing a counter through local CRDT replicas synced through the whole "
        "run, checked by chaos.checker.crdt; 0 turns the CRDT check off (default: %(default)s)",
    )


def _output_args(p: argparse.ArgumentParser, *, check_time_limit: float | None) -> None:
    p.add_argument(
        "--report-dir",
        type=Path,
        metavar="DIR",
        help="where the report goes (default: chaos-reports/<time>-<fault, suite or soak>/)",
    )
    p.add_argument(
        "--debug-unsafe-reads",
        action="store_true",
        help="MUTATION: nodes serve linearizable reads without the raft barrier; "
        "the checker must then find a violation",
    )
    p.add_argument(
        "--debug-watch-drop",
        action="store_true",
        help="MUTATION: one watcher loses one delivered event; the watch check must fail",
    )
    p.add_argument(
        "--debug-lock-unfenced",
        action="store_true",
        help="MUTATION: the lockers write without their fence; a stale holder's write then "
        "lands after its successor's and the lock check must fail",
    )
    p.add_argument(
        "--debug-crdt-reuse-id",
        action="store_true",
        help="MUTATION: each CRDT client's replica restarts without its state under its old "
        "replica id; its later increments are lost and the CRDT check must fail",
    )
    p.add_argument(
        "--check-time-limit",
        type=float,
        default=check_time_limit,
        metavar="S",
        help="seconds the linearizability search may take (default: "
        + ("%(default)s)" if check_time_limit is not None else "max(120, a quarter of the soak))"),
    )
    p.add_argument(
        "--op-deadline",
        type=float,
        default=8.0,
        metavar="S",
        help="seconds one op may retry (same idempotency key) before its outcome is "
        "recorded; 0 = one attempt per op (default: %(default)s)",
    )
    p.add_argument(
        "--think-time",
        type=float,
        default=0.0,
        metavar="S",
        help="seconds each client waits between two ops; bounds the history's size for "
        "long soaks, whose linearizability check grows faster than linearly with the ops "
        "per key (default: %(default)s)",
    )
    p.add_argument(
        "--toxiproxy",
        choices=("subprocess", "in-process"),
        default="subprocess",
        help="where our Toxiproxy server runs when TOXIPROXY_URL is not set (default: %(default)s)",
    )
    p.add_argument("--keep-data", action="store_true", help="keep the cluster's data dir")
    p.add_argument(
        "-v", "--verbose", action="store_true", help="also show cluster supervisor lines"
    )


def _range(text: str) -> tuple[float, float]:
    """MIN-MAX seconds ("3-15" or "3:15") -> (3.0, 15.0)."""
    parts = text.replace(":", "-").split("-")
    try:
        lo, hi = (float(parts[0]), float(parts[1])) if len(parts) == 2 else (float(text),) * 2
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MIN-MAX seconds, not {text!r}") from None
    if not 0 <= lo <= hi:
        raise argparse.ArgumentTypeError(f"need 0 <= MIN <= MAX, not {text!r}")
    return lo, hi


def _soak_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--minutes",
        type=float,
        default=30.0,
        metavar="M",
        help="length of the soak, fractional allowed (default: %(default)s)",
    )
    _workload_args(p)
    p.add_argument(
        "--topology",
        choices=("auto", "links", "proxy", "plain", "lazyfs"),
        default="auto",
        help="how the cluster is built, which decides the faults besides the process ones: "
        "links = iptables partitions, proxy = Toxiproxy faults, lazyfs = power loss, "
        "plain = process faults only; auto = links if iptables works here, else proxy "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--fault-time",
        type=_range,
        default=(3.0, 15.0),
        metavar="MIN-MAX",
        help="seconds each fault is held, drawn at random (default: 3-15)",
    )
    p.add_argument(
        "--quiet-time",
        type=_range,
        default=(2.0, 10.0),
        metavar="MIN-MAX",
        help="seconds from a heal to the next fault, drawn at random; the next fault also "
        "waits until every node is ready (default: 2-10)",
    )
    p.add_argument("--only", metavar="A,B,...", help="inject only these faults")
    p.add_argument("--exclude", metavar="A,B,...", help="never inject these faults")
    p.add_argument(
        "--progress",
        type=float,
        default=15.0,
        metavar="S",
        help="seconds between progress lines (default: %(default)s)",
    )
    _output_args(p, check_time_limit=None)


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Fault injection against a fresh local cluster, with a linearizability "
        "check of what concurrent clients saw.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  statekeeper chaos list\n"
        "  statekeeper chaos run --fault kill-leader --duration 30 --clients 16 --seed 7\n"
        "  statekeeper chaos suite                 # every scenario (~15-25 min)\n"
        "  statekeeper chaos suite --smoke         # the CI subset (~3-5 min)\n"
        "  statekeeper chaos suite --only partition-leader,proxy-latency\n"
        "  statekeeper chaos soak --minutes 30     # random faults one after another",
    )
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    run = sub.add_parser("run", help="run one scenario", description="Run one scenario.")
    run.add_argument("--fault", required=True, metavar="NAME", help="see 'statekeeper chaos list'")
    _run_args(run, suite=False)
    sub.add_parser("list", help="list the faults, and whether they can run here")
    suite = sub.add_parser("suite", help="run every scenario (or a subset) and summarize")
    suite.add_argument("--only", metavar="A,B,...", help="comma-separated fault names")
    suite.add_argument("--smoke", action="store_true", help="only the CI smoke subset")
    _run_args(suite, suite=True)
    soak = sub.add_parser(
        "soak",
        help="one long run with a nemesis that injects random faults one after another",
        description="One fresh cluster and one workload for --minutes; a nemesis picks a "
        "fault at random (seeded by --seed), holds it for --fault-time, heals it, waits "
        "--quiet-time and until every node is ready, and repeats; then every check of a "
        "normal run. The report lists each fault with its start and stop time.",
    )
    _soak_args(soak)
    return parser


def run_options(args: argparse.Namespace, fault: str, **phases: Any):
    """The RunOptions of ``fault``: the workload and output options every action takes
    (``_workload_args``, ``_output_args``), and ``phases``, the rest (duration, warmup,
    fault window, report dir, check time limit); by default as run and suite take them."""
    from statekeeper.chaos.runner import RunOptions

    if not phases:
        phases = {
            "duration": args.duration,
            "warmup": args.warmup,
            "fault_window": args.fault_window,
            "report_dir": args.report_dir,
            "check_time_limit": args.check_time_limit,
        }
    return RunOptions(
        fault=fault,
        clients=args.clients,
        seed=args.seed,
        fsync=args.fsync,
        nodes=args.nodes,
        keys=args.keys,
        stream_share=args.stream_share,
        watchers=args.watchers,
        lockers=args.lockers,
        crdt_clients=args.crdt_clients,
        debug_unsafe_reads=args.debug_unsafe_reads,
        debug_watch_drop=args.debug_watch_drop,
        debug_lock_unfenced=args.debug_lock_unfenced,
        debug_crdt_reuse_id=args.debug_crdt_reuse_id,
        op_deadline=args.op_deadline,
        think_time=args.think_time,
        keep_data=args.keep_data,
        verbose=args.verbose,
        toxiproxy=args.toxiproxy,
        tls=args.tls,
        auth=args.auth,
        **phases,
    )


def cmd_list() -> int:
    from statekeeper.chaos.faults import FAULTS, SMOKE

    rows = []
    for name, cls in FAULTS.items():
        ok, why = cls.available()
        where = "yes" if ok else f"no: {why}"
        rows.append((name + (" *" if name in SMOKE else ""), cls.kind, where, cls.description))
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    print(f"{'FAULT':<{w0}}  {'KIND':<{w1}}  RUNNABLE HERE / DESCRIPTION")
    for name, kind, where, desc in rows:
        print(f"{name:<{w0}}  {kind:<{w1}}  {where}\n{'':<{w0}}  {'':<{w1}}  {desc}")
    print("\n* = in the CI smoke subset (statekeeper chaos suite --smoke)")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from statekeeper.chaos.faults import FAULTS
    from statekeeper.chaos.runner import run_scenario

    if args.fault not in FAULTS:
        print(f"{PROG}: unknown fault {args.fault!r}; see '{PROG} list'", file=sys.stderr)
        return EXIT_USAGE
    result = run_scenario(run_options(args, args.fault))
    return EXIT_OK if result.ok else EXIT_FAILED


def cmd_suite(args: argparse.Namespace) -> int:
    from statekeeper.chaos.faults import FAULTS
    from statekeeper.chaos.runner import run_suite

    names = _names(args.only or None)
    if names:
        unknown = [n for n in names if n not in FAULTS]
        if unknown:
            print(
                f"{PROG}: unknown fault(s) {', '.join(unknown)}; see '{PROG} list'", file=sys.stderr
            )
            return EXIT_USAGE
    base = run_options(args, "none")
    results, _ = run_suite(names, base, smoke=args.smoke, root=args.report_dir)
    return EXIT_OK if all(r.ok for r in results) else EXIT_FAILED


def _names(text: str | None) -> list[str] | None:
    return None if text is None else [n.strip() for n in text.split(",") if n.strip()]


def _soak_say(nemesis_cls: Any) -> Callable[[str], None]:
    """Print, putting the nemesis' current fault into the runner's progress lines."""
    column = re.compile(r"FAULT nemesis +")

    def say(msg: str) -> None:
        nem = nemesis_cls.last_instance
        if nem is not None and "FAULT nemesis" in msg:
            label = f"nemesis: {nem.label()}"
            msg = column.sub(lambda m: f"{label:<{len(m.group(0)) - 1}} ", msg, count=1)
        print(msg, flush=True)

    return say


def cmd_soak(args: argparse.Namespace) -> int:
    from statekeeper.chaos.nemesis import (
        NemesisConfig,
        auto_topology,
        eligible_faults,
        make_nemesis,
        registered,
        soak_phases,
    )
    from statekeeper.chaos.nemesis_report import write_soak_report
    from statekeeper.chaos.report import format_verdicts
    from statekeeper.chaos.runner import default_report_dir, run_scenario

    duration, warmup, window = soak_phases(args.minutes, args.fault_time)
    only = _names(args.only)
    topology = auto_topology(only) if args.topology == "auto" else args.topology
    try:
        allowed, skipped = eligible_faults(
            topology, args.nodes, only=only, exclude=_names(args.exclude) or ()
        )
    except KeyError as e:
        print(f"{PROG}: {e.args[0]}; see '{PROG} list'", file=sys.stderr)
        return EXIT_USAGE
    if not allowed:
        print(
            f"{PROG}: no fault left for the nemesis ({topology} topology): "
            + "; ".join(f"{n}: {why}" for n, why in skipped.items()),
            file=sys.stderr,
        )
        return EXIT_USAGE
    cfg = NemesisConfig(
        faults=tuple(allowed),
        seed=args.seed,
        topology=topology,
        fault_time=args.fault_time,
        quiet_time=args.quiet_time,
        excluded=skipped,
    )
    cls = make_nemesis(cfg)
    opts = run_options(
        args,
        cls.name,
        duration=duration,
        warmup=warmup,
        fault_window=window,
        report_dir=args.report_dir or default_report_dir("soak"),
        check_time_limit=(
            args.check_time_limit if args.check_time_limit is not None else max(120.0, duration / 4)
        ),
        progress_interval=args.progress,
    )
    opts.validate()
    say = _soak_say(cls)
    say(f"== chaos soak: {args.minutes:g} min, nemesis over {window:.0f} s: {cfg.describe()}")
    by_reason: dict[str, list[str]] = {}
    for name, why in skipped.items():
        by_reason.setdefault(why, []).append(name)
    for why, names in by_reason.items():
        say(f"   not used: {', '.join(names)}: {why}")
    with registered(cls):
        result = run_scenario(opts, say)
    if result.status != "skipped" and result.report_dir:
        md = write_soak_report(result, cls.last_instance, Path(result.report_dir))
        say("\n" + format_verdicts(result))
        say(f"== soak: {result.status.upper()}  (report: {md})")
    return EXIT_OK if result.ok else EXIT_FAILED


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    args = build_parser(prog).parse_args(argv)
    try:
        if args.action == "list":
            return cmd_list()
        if args.action == "run":
            return cmd_run(args)
        if args.action == "soak":
            return cmd_soak(args)
        return cmd_suite(args)
    except ValueError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{prog}: interrupted (faults healed, nodes stopped)", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
