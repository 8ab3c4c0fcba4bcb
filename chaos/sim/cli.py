"""``statekeeper sim run | explore`` (also ``python -m statekeeper.chaos.sim``).

    statekeeper sim run --seed 7 [--steps 3000] [--fault "@250 kill n1 hold=2.00s" ...]
    statekeeper sim explore --minutes 30 [--first-seed 1] [--steps 3000]

`run` replays one seed exactly: the same trace and verdict every time (the trace's last
lines are the verdict). `explore` runs seeds until one fails, then shrinks it and prints
the command that replays the shrunk run. Exit codes: 0 passed, 1 a run failed, 2 usage.

Replays need a fixed string hash seed (set iteration order), so the command re-executes
itself with PYTHONHASHSEED=0 when it is not set so.

SIGTERM ends a run as ^C does (SystemExit through the world's `with` blocks): the LazyFS
daemons run in a session of their own, so a run killed outright left them and their
mounts behind (tests/loopback/test_sim_disk.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence

from statekeeper.chaos.sim import faults as faults_mod

PROG = "statekeeper sim"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_STOPPED = 130  # an exploration ended by ^C or SIGTERM: its totals so far are printed
DEFAULT_STEPS = 3000  # 30 s of virtual time: a few faults, a heal, the checks


def _parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog, description="deterministic simulation (docs/simulation.md)"
    )
    sub = p.add_subparsers(dest="action", required=True)
    r = sub.add_parser(
        "run", help="run (replay) one seed", description="run one seed; same seed, same trace"
    )
    r.add_argument("--seed", type=int, required=True)
    r.add_argument(
        "--steps", type=int, default=DEFAULT_STEPS, help="steps of 10 ms (default: %(default)s)"
    )
    r.add_argument(
        "--fault",
        action="append",
        metavar="F",
        help='a fault as the trace prints it ("@250 kill n1 hold=2.00s"); repeat; '
        "given: only these faults run (a shrunk schedule), else the seed draws them",
    )
    r.add_argument(
        "--no-faults", action="store_true", help="run the seed's clients with no fault at all"
    )
    r.add_argument("--trace", metavar="FILE", help="write the trace here instead of stdout")
    r.add_argument("--json", action="store_true", help="print the verdict as one JSON object")
    x = sub.add_parser("explore", help="run seeds until one fails; shrink it")
    x.add_argument("--minutes", type=float, required=True)
    x.add_argument("--first-seed", type=int, default=1)
    x.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    x.add_argument("--no-shrink", action="store_true")
    x.add_argument("--keep-going", action="store_true", help="do not stop at the first failure")
    x.add_argument("--json", metavar="FILE", help="write the exploration's figures here")
    return p


def _reexec_with_fixed_hash(argv: Sequence[str]) -> None:
    if os.environ.get("PYTHONHASHSEED") != "0":
        env = dict(os.environ, PYTHONHASHSEED="0")
        os.execve(sys.executable, [sys.executable, "-m", "statekeeper.chaos.sim", *argv], env)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser(prog).parse_args(argv)
    _reexec_with_fixed_hash(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    logging.basicConfig(level=logging.CRITICAL)  # the nodes' own logs: the trace says what matters
    if args.action == "run":
        return _run(args)
    return _explore(args)


def _run(args) -> int:
    from statekeeper.chaos.sim import scenario

    schedule = None
    if args.no_faults:
        schedule = []
    elif args.fault:
        try:
            schedule = [faults_mod.parse(f) for f in args.fault]
        except (ValueError, IndexError) as e:
            print(f"{PROG}: error: bad --fault: {e}", file=sys.stderr)
            return EXIT_USAGE
    v = scenario.run(args.seed, args.steps, schedule)
    text = "\n".join(v.trace) + "\n"
    if args.trace:
        with open(args.trace, "w") as f:
            f.write(text)
    elif not args.json:
        sys.stdout.write(text)
    if args.json:
        print(json.dumps(_verdict_dict(v)))
    else:
        print(
            f"seed {v.seed}: {'PASS' if v.ok else 'FAIL'} ({v.sim_seconds:.1f} s simulated, {v.cpu_seconds:.1f} s CPU)"
        )
    return EXIT_OK if v.ok else EXIT_FAILED


def _verdict_dict(v) -> dict:
    return {
        "seed": v.seed,
        "steps": v.steps,
        "ok": v.ok,
        "failures": v.failures,
        "faults": [f.describe() for f in v.faults],
        "sim_seconds": round(v.sim_seconds, 3),
        "cpu_seconds": round(v.cpu_seconds, 3),
        "trace_lines": len(v.trace),
    }


def replay_command(v) -> str:
    faults = " ".join(f'--fault "{f.describe()}"' for f in v.faults)
    return f"{PROG} run --seed {v.seed} --steps {v.steps} " + (faults or "--no-faults")


def _explore(args) -> int:
    from statekeeper.chaos.sim import explore as explore_mod

    def progress(e, v):
        status = "ok" if v.ok else "FAIL: " + v.failures[0][:160]
        r = e.rates()
        print(
            f"seed {v.seed}: {status} | {e.seeds} seeds, {e.sim_seconds:.0f} s simulated in {e.wall_seconds:.0f} s "
            f"({r['sim_seconds_per_hour']:.0f} sim-s/h, {r['seeds_per_hour']:.0f} seeds/h)",
            flush=True,
        )

    e = explore_mod.explore(
        args.minutes, args.first_seed, args.steps, progress, stop_at_failure=not args.keep_going
    )
    figures = {
        **e.rates(),
        "seeds": e.seeds,
        "sim_seconds": e.sim_seconds,
        "wall_seconds": e.wall_seconds,
        "cpu_seconds": e.cpu_seconds,
        "faults": e.faults,
        "failing_seeds": e.failing_seeds,
        "stopped": e.stopped,
    }
    totals = f"{e.seeds} seeds ({e.sim_seconds:.0f} s simulated, {e.faults} faults)"
    if e.stopped:
        found = f"failing seeds {e.failing_seeds}" if e.failing_seeds else "no failure among them"
        print(f"stopped after {totals}: {found}")
        _write_json(args.json, figures)
        return EXIT_STOPPED
    if e.failing is None:
        print(f"no failure in {totals}")
        _write_json(args.json, figures)
        return EXIT_OK
    v = e.failing
    print(f"seed {v.seed} FAILED:")
    _print_failures(v.failures)
    if not args.no_shrink:
        print("shrinking ...", flush=True)
        v = explore_mod.shrink(v, progress=lambda line: print(f"  {line}", flush=True))
        print(f"shrunk to {len(v.faults)} faults in {v.steps} steps:")
        _print_failures(v.failures)
        print("trace of the shrunk run:")
        for line in v.trace:
            print(f"  {line}")
    print("replay with:")
    print(f"  {replay_command(v)}")
    figures["failing"] = _verdict_dict(v)
    figures["replay"] = replay_command(v)
    _write_json(args.json, figures)
    return EXIT_FAILED


def _print_failures(failures, shown: int = 30) -> None:
    for line in failures[:shown]:
        print(f"  {line}")
    if len(failures) > shown:
        print(f"  ... and {len(failures) - shown} more")


def _write_json(path, figures) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(figures, f, indent=2)
