"""``statekeeper chaos ...`` (also ``python -m chaos ...``): run, list, suite.

Exit codes: 0 every verdict passed (or skipped / unknown), 1 a verdict failed or a run
broke, 2 bad usage, 130 interrupted (after cleaning up).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from node.config import FSYNC_MODES

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
    p.add_argument(
        "--clients",
        type=int,
        default=16,
        metavar="N",
        help="concurrent clients (default: %(default)s)",
    )
    p.add_argument("--seed", type=int, default=7, help="random seed (default: %(default)s)")
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
    p.add_argument(
        "--report-dir",
        type=Path,
        metavar="DIR",
        help="where the report goes (default: chaos-reports/<time>-<fault or suite>/)",
    )
    p.add_argument(
        "--debug-unsafe-reads",
        action="store_true",
        help="MUTATION: nodes serve linearizable reads without the raft barrier; "
        "the checker must then find a violation",
    )
    p.add_argument(
        "--check-time-limit",
        type=float,
        default=120.0,
        metavar="S",
        help="seconds the linearizability search may take (default: %(default)s)",
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
        "--toxiproxy",
        choices=("subprocess", "in-process"),
        default="subprocess",
        help="where our Toxiproxy server runs when TOXIPROXY_URL is not set (default: %(default)s)",
    )
    p.add_argument("--keep-data", action="store_true", help="keep the cluster's data dir")
    p.add_argument(
        "-v", "--verbose", action="store_true", help="also show cluster supervisor lines"
    )


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
        "  statekeeper chaos suite --only partition-leader,proxy-latency",
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
    return parser


def _options(args: argparse.Namespace, fault: str):
    from chaos.runner import RunOptions

    return RunOptions(
        fault=fault,
        duration=args.duration,
        clients=args.clients,
        seed=args.seed,
        fsync=args.fsync,
        nodes=args.nodes,
        keys=args.keys,
        warmup=args.warmup,
        fault_window=args.fault_window,
        report_dir=args.report_dir,
        debug_unsafe_reads=args.debug_unsafe_reads,
        check_time_limit=args.check_time_limit,
        op_deadline=args.op_deadline,
        keep_data=args.keep_data,
        verbose=args.verbose,
        toxiproxy=args.toxiproxy,
    )


def cmd_list() -> int:
    from chaos.faults import FAULTS, SMOKE

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
    from chaos.faults import FAULTS
    from chaos.runner import run_scenario

    if args.fault not in FAULTS:
        print(f"{PROG}: unknown fault {args.fault!r}; see '{PROG} list'", file=sys.stderr)
        return EXIT_USAGE
    result = run_scenario(_options(args, args.fault))
    return EXIT_OK if result.ok else EXIT_FAILED


def cmd_suite(args: argparse.Namespace) -> int:
    from chaos.faults import FAULTS
    from chaos.runner import run_suite

    names = None
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in FAULTS]
        if unknown:
            print(
                f"{PROG}: unknown fault(s) {', '.join(unknown)}; see '{PROG} list'", file=sys.stderr
            )
            return EXIT_USAGE
    base = _options(args, "none")
    results, _ = run_suite(names, base, smoke=args.smoke, root=args.report_dir)
    return EXIT_OK if all(r.ok for r in results) else EXIT_FAILED


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    args = build_parser(prog).parse_args(argv)
    try:
        if args.action == "list":
            return cmd_list()
        if args.action == "run":
            return cmd_run(args)
        return cmd_suite(args)
    except ValueError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{prog}: interrupted (faults healed, nodes stopped)", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
