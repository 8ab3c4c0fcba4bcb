"""A/B two git revisions of statekeeper: `python -m statekeeper.benchmarks.ab REV_A REV_B --help`.

Each revision is checked out in a detached git worktree under a temp dir (removed at the
end, also on ^C, SIGTERM or an error) and measured by ITS OWN `benchmarks.load`, run with
this interpreter and PYTHONPATH=<that worktree>, so the node code, the client and the load
generator are all that revision's. The rows, the order of the runs and the table come from
benchmarks/ab_rounds.py; the medians, ratios and chart from benchmarks/compare.

A run whose load generator fails or does not write its JSON counts as a failed round for
that side (no ratio in that round); the other runs go on. Each load generator starts in
its own session: ^C reaches this process only, which forwards one SIGINT so the child
stops its cluster, and after STOP_GRACE_S kills it and any node whose pid file is left
under the run's data dir; the runs done before the ^C are still reported.

Output: the header (revisions, command, settings, machine) and the table on stdout,
progress on stderr, `--json` the raw rounds, a PNG of the B/A ratios (--chart).
Exit code 1 when some run failed, 2 on bad options or revisions, 130 on ^C.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from statekeeper.benchmarks.ab_rounds import (
    LEGEND,
    OPS,
    P50,
    ROWS,
    SIDES,
    A,
    AbRow,
    B,
    Run,
    failure_notes,
    header_lines,
    load_argv,
    make_rows,
    markdown_table,
    measure_from_run,
    parse_rows,
    plan,
)
from statekeeper.benchmarks.compare.chart import ratio_chart, ratio_points
from statekeeper.benchmarks.compare.cli import exit_status
from statekeeper.benchmarks.compare.progress import make_bar
from statekeeper.benchmarks.compare.rounds import Measure, Row, summarize_row
from statekeeper.benchmarks.load import machine_info

PROJECT = Path(__file__).resolve().parent.parent
DEFAULT_DATA_DIR = PROJECT / "benchmarks" / "out"  # git-ignored, on disk (not tmpfs)
DEFAULT_CHART_DIR = PROJECT / "benchmarks" / "results"
LOAD_OPTIONS = ("--start-cluster", "--fsync", "--json", "--no-results", "--no-progress",
                "--value-size", "--consistency", "--data-dir")  # fmt: skip
# How long a load generator may take to stop its cluster after SIGINT (LocalCluster.down
# waits up to 15 s for the nodes; the rest is margin on a busy machine).
STOP_GRACE_S = 60.0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m statekeeper.benchmarks.ab",
        description="Measure two git revisions of statekeeper in alternating rounds (A B, B A, "
        "...), each run on a fresh 3-node cluster with fsync=always, each revision through its "
        "own benchmarks.load; print the medians and the median ratio B/A per row with its "
        "spread.",
    )
    p.add_argument("rev_a", metavar="REV_A", help="the baseline revision (any git revision)")
    p.add_argument("rev_b", metavar="REV_B", help="the revision compared with it")
    p.add_argument("--rows", help=f"comma-separated subset of: {','.join(ROWS)} (default: all)")
    p.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    p.add_argument(
        "--duration", type=float, default=5.0, help="measured seconds per run (default 5)"
    )
    p.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds first (default 1)")
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                   help="parent of the clusters' data (default benchmarks/out; keep it on disk)")  # fmt: skip
    p.add_argument("--json", type=Path, metavar="PATH", help="write every run's figures as JSON")
    p.add_argument("--chart", type=Path, metavar="PNG",
                   help="where the chart goes (default benchmarks/results/ab-<date>.png)")  # fmt: skip
    p.add_argument("--no-chart", action="store_true", help="draw no chart")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


# ------------------------------------------------------------------------- revisions


def git(*args: str) -> str:
    run = subprocess.run(["git", "-C", str(PROJECT), *args], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    if run.returncode != 0:
        raise ValueError(f"git {' '.join(args)}: {run.stderr.strip()}")
    return run.stdout.strip()


def describe(rev: str) -> dict[str, str]:
    """The revision as given, its short hash and subject (ValueError when git has no such)."""
    full = git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    short, subject = git("log", "-1", "--format=%h%x00%s", full).split("\0", 1)
    return {"rev": rev, "commit": full, "hash": short, "subject": subject}


@contextlib.contextmanager
def worktrees(revisions: dict[str, dict[str, str]]) -> Iterator[dict[str, Path]]:
    """A detached worktree per side under one temp dir; removed on the way out, however."""
    base = Path(tempfile.mkdtemp(prefix="statekeeper-ab-"))
    made: dict[str, Path] = {}
    try:
        for side, info in revisions.items():
            path = base / f"{side}-{info['hash']}"
            git("worktree", "add", "--detach", str(path), info["commit"])
            made[side] = path
        yield made
    finally:
        for path in made.values():
            with contextlib.suppress(ValueError, subprocess.SubprocessError):
                git("worktree", "remove", "--force", str(path))
        with contextlib.suppress(ValueError, subprocess.SubprocessError):
            git("worktree", "prune")
        shutil.rmtree(base, ignore_errors=True)


def packaged(tree: Path) -> bool:
    """Whether that revision installs as one `statekeeper` package (src/statekeeper/, issue
    29) or as top-level node, client, cluster and benchmarks packages (older revisions)."""
    return (tree / "src" / "statekeeper" / "__init__.py").is_file()


def revision_env(tree: Path) -> dict[str, str]:
    """The environment of a run: that worktree's code first on the import path."""
    path = tree / "src" if packaged(tree) else tree
    return {**os.environ, "PYTHONPATH": str(path), "PYTHONUNBUFFERED": "1"}


def load_module(tree: Path) -> str:
    """The load generator's module name in that revision."""
    return "statekeeper.benchmarks.load" if packaged(tree) else "benchmarks.load"


def check_tree(side: str, tree: Path) -> None:
    """The worktree's code is what Python imports there, and its load generator has every
    option a run passes (ValueError otherwise): caught before any cluster starts. The
    venv's editable install maps these packages to the main checkout; PYTHONPATH has to
    win over it, and the supervisor puts its own tree on the nodes' PYTHONPATH, so the
    supervisor from the worktree means nodes from the worktree too."""
    prefix = "statekeeper." if packaged(tree) else ""
    packages = tuple(prefix + p for p in ("benchmarks", "client", "cluster", "node"))
    probe = f"import {load_module(tree)}, {', '.join(packages)}; " + "; ".join(
        f"print({p}.__file__)" for p in packages
    )
    got = subprocess.run([sys.executable, "-c", probe], cwd=tree, env=revision_env(tree),
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    files = got.stdout.split()
    if got.returncode != 0 or not all(f.startswith(f"{tree}/") for f in files):
        raise ValueError(
            f"{side}: not all of {packages} come from {tree}: {got.stdout}{got.stderr}"
        )
    helptext = subprocess.run([sys.executable, "-m", load_module(tree), "--help"], cwd=tree,
                              env=revision_env(tree), capture_output=True, text=True,
                              timeout=120).stdout  # fmt: skip
    missing = [o for o in LOAD_OPTIONS if o not in helptext]
    if missing:
        raise ValueError(f"{side}: its benchmarks.load has no {', '.join(missing)}")


# ------------------------------------------------------------------------------ runs


def kill_left_nodes(data_dir: Path) -> None:
    """SIGKILL every node whose pid file is still under `data_dir` (a run that had to be
    killed could not stop its cluster). A pid is only killed if it still runs `node`."""
    for pid_file in data_dir.rglob("node.pid"):
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text().split()[0])
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"node" in cmdline:
                os.kill(pid, signal.SIGKILL)


def run_load(tree: Path, argv: Sequence[str], run_dir: Path) -> tuple[int, str]:
    """One load generator from `tree`: (exit code, the tail of its stderr)."""
    err_path = run_dir / "stderr.log"
    with open(run_dir / "stdout.log", "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", load_module(tree), *argv], cwd=tree,
                                env=revision_env(tree), stdout=out, stderr=err,
                                start_new_session=True)  # fmt: skip
        try:
            code = proc.wait()
        except BaseException:
            proc.send_signal(signal.SIGINT)  # it stops its cluster on ^C
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                kill_left_nodes(run_dir)
            raise
    tail = err_path.read_text(errors="replace").strip().splitlines()[-3:]
    return code, " | ".join(tail)


def measure_one(run: Run, tree: Path, args: argparse.Namespace, work: Path) -> tuple[Measure, Any]:
    """One run: its Measure and the load generator's own JSON entry (None if none)."""
    run_dir = work / f"r{run.round_no + 1}-{run.row.key}-{run.side}"
    run_dir.mkdir(parents=True)
    json_path = run_dir / "load.json"
    argv = load_argv(run.row, duration=args.duration, warmup=args.warmup, json_path=json_path,
                     data_dir=run_dir)  # fmt: skip
    code, tail = run_load(tree, argv, run_dir)
    if code != 0 or not json_path.exists():
        return Measure(failed=f"load exited {code}: {tail}"), None
    entry = json.loads(json_path.read_text())["runs"][0]
    return measure_from_run(entry, run.row.figure), entry


def run_all(rows: Sequence[AbRow], trees: dict[str, Path], args: argparse.Namespace,
            bar: Any) -> tuple[list[Row], list[dict[str, Any]], bool]:  # fmt: skip
    """Every run of the plan: the rows with their rounds, the raw record of each run, and
    whether ^C cut it short (the runs done until then are kept, to be reported)."""
    table = {r.key: r for r in make_rows(rows)}
    raw: list[dict[str, Any]] = []
    args.data_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ab-", dir=args.data_dir) as work:
        for run in plan(rows, args.rounds):
            tag = f"r{run.round_no + 1}/{args.rounds} {run.row.key} {run.side}"
            bar.set_description(tag)
            try:
                m, entry = measure_one(run, trees[run.side], args, Path(work))
            except KeyboardInterrupt:
                bar.write(f"{tag}: interrupted; reporting the {len(raw)} runs done")
                return list(table.values()), raw, True
            table[run.row.key].put(run.side, run.round_no, args.rounds, m)
            shown = m.failed or f"{m.value:.2f} {'ops/s' if run.row.figure == OPS else 'ms p50'}"
            bar.write(f"{tag}: {shown}")
            raw.append({"round": run.round_no + 1, "row": run.row.key, "side": run.side,
                        "failed": m.failed, "load": entry})  # fmt: skip
            bar.update(1)
    return list(table.values()), raw, False


# ---------------------------------------------------------------------------- output


def settings_text(args: argparse.Namespace) -> str:
    return (f"windows {args.duration:g} s after {args.warmup:g} s warm-up; each run a fresh "
            "3-node cluster, fsync=always, the revision's own benchmarks.load; "
            f"data under {args.data_dir}")  # fmt: skip


def write_chart(rows: Sequence[Row], path: Path, revisions: dict[str, dict[str, str]]) -> bool:
    a, b = revisions[A]["hash"], revisions[B]["hash"]
    return ratio_chart(
        ratio_points(rows, (B, A), kinds=(OPS, P50)), path, title=f"B {b} / A {a}",
        xlabel="B / A per row (ops/s: higher is better for B; p50: lower is)",
        parity="1.0x: same as A",
    )  # fmt: skip


def report(rows: Sequence[Row], raw: list[dict[str, Any]], args: argparse.Namespace, *,
           command: str, revisions: dict[str, dict[str, str]], load: str, now: dt.datetime) -> None:  # fmt: skip
    m = machine_info()
    machine = f"nproc {m['nproc']}, {m['cpu']}, {m['memory']} RAM, {m['os']}, {m['python']}"
    head = header_lines(command=command, revisions=revisions, settings=settings_text(args),
                        machine=machine, load=load, rounds=args.rounds)  # fmt: skip
    print(f"## {now:%Y-%m-%d %H:%M} UTC: A/B {revisions[A]['hash']} vs {revisions[B]['hash']}\n")
    print("\n".join([*head, "", markdown_table(rows), "", LEGEND]))
    notes = failure_notes(rows)
    if notes:
        print("\n" + "\n".join(notes))
    if not args.no_chart:
        chart = args.chart or DEFAULT_CHART_DIR / f"ab-{now:%Y-%m-%d-%H%M}.png"
        if write_chart(rows, chart, revisions):
            print(f"chart: {chart}", file=sys.stderr)
    if args.json:
        payload = {
            "command": command, "date": now.isoformat(), "machine": m, "revisions": revisions,
            "settings": {"rounds": args.rounds, "duration": args.duration, "warmup": args.warmup},
            "runs": raw,
            "rows": [{**asdict(r), "summary": asdict(summarize_row(r, (B, A)))} for r in rows],
        }  # fmt: skip
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2) + "\n")


def _sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # so the finally blocks stop the cluster and remove the worktrees


def amain(args: argparse.Namespace, command: str) -> int:
    rows = parse_rows(args.rows)
    if args.rounds < 1 or args.duration <= 0 or args.warmup < 0:
        raise ValueError("need --rounds >= 1, --duration > 0, --warmup >= 0")
    revisions = {A: describe(args.rev_a), B: describe(args.rev_b)}
    now = dt.datetime.now(dt.UTC)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    t0 = time.monotonic()
    with worktrees(revisions) as trees:
        for side in SIDES:
            check_tree(side, trees[side])
        bar = make_bar(len(plan(rows, args.rounds)), not args.no_progress)
        try:
            table, raw, interrupted = run_all(rows, trees, args, bar)
        finally:
            bar.close()
    print(f"(total {(time.monotonic() - t0) / 60:.1f} min)", file=sys.stderr)
    report(table, raw, args, command=command, revisions=revisions, load=load, now=now)
    if interrupted:
        return 130
    return 1 if any(r["failed"] for r in raw) else 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _sigterm)
    return exit_status(
        lambda: amain(args, shlex.join(["python", "-m", "statekeeper.benchmarks.ab", *argv]))
    )


if __name__ == "__main__":
    sys.exit(main())
