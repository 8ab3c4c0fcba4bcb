"""The section appended to benchmarks/RESULTS.md: date, machine, command, settings,
versions, rounds and their order, the tables, the legend, the notes and the chart link.
Versions are read, never installed; the commit is read with `git`, read-only.
"""

from __future__ import annotations

import datetime as dt
import subprocess
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from statekeeper.benchmarks.compare.rounds import Row, order_text
from statekeeper.benchmarks.compare.table import result_blocks, row_notes
from statekeeper.benchmarks.load import machine_info

BENCH_DIR = Path(__file__).resolve().parent.parent


def versions() -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        from statekeeper.benchmarks.etcd import etcd_version, find_etcd

        out["etcd"] = etcd_version(find_etcd(install=False))
    except Exception:  # noqa: BLE001 - not installed: the section says so
        out["etcd"] = "not installed"
    try:
        from statekeeper.benchmarks.redis_streams import find_redis, redis_version

        out["redis-server"] = redis_version(find_redis())
    except Exception:  # noqa: BLE001 - not installed: the section says so
        out["redis-server"] = "not installed"
    for pkg in ("aetcd", "grpcio", "protobuf", "redis", "httptools", "uvloop"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    out["statekeeper commit"] = _git_commit()
    return out


def _git_commit() -> str:
    """The checked-out commit, read-only (and whether the tree had local changes)."""

    def git(*args: str) -> str:
        run = subprocess.run(
            ["git", *args], cwd=BENCH_DIR, capture_output=True, text=True, timeout=10
        )
        return run.stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head} (with uncommitted changes)" if dirty and head else head or "unknown"


def rounds_line(systems: Sequence[str], rounds: int) -> str:
    return (
        f"- rounds: {rounds}, each system on a fresh cluster per round and group; "
        f"order: {order_text(systems, rounds)}"
    )


def results_section(
    rows: Sequence[Row],
    *,
    command: str,
    settings: str,
    target: str,
    chart: str | None,
    info: dict[str, str],
    now: dt.datetime,
    load: str,
    rounds: str = "",
    redis_setup: str = "",
) -> str:
    m = machine_info()
    lines = [
        f"## {now:%Y-%m-%d %H:%M} UTC: statekeeper vs etcd",
        "",
        f"- machine: nproc {m['nproc']}, {m['cpu']}, {m['memory']} RAM, {m['os']}, {m['python']}",
        f"- command: `{command}`",
        f"- target: {target}",
        f"- settings: {settings}",
        *([rounds] if rounds else []),
        "- versions: " + ", ".join(f"{k} {v}" for k, v in info.items()),
        f"- load average at start: {load}",
        "",
    ]
    for block in result_blocks(rows, redis_setup):
        lines += [block, ""]
    notes = row_notes(rows)
    if notes:
        lines += ["Notes:", "", *notes, ""]
    if chart:
        lines += [f"![median ratio per workload, with its spread]({chart})", ""]
    return "\n".join(lines)
