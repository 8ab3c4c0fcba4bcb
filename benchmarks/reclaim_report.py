"""The pure parts of the storage-reclaim benchmark (benchmarks/reclaim.py): what one sample
holds, disk usage of a directory, the table at 0/10/25/50/75/100 % of the versions written,
the flatness verdict, the per-record-type breakdown of a RocksDB copy, the results
section's notes and tables, and the PNG.

Nothing here talks to a cluster or times anything, so tests/unit/test_bench_reclaim.py
covers it without one.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from statekeeper.benchmarks.load import markdown_table

PREFIX = "agent/"
KEEP_LAST = 10
MIB = 1 << 20
MARKS = (0, 10, 25, 50, 75, 100)  # % of the versions written: the table's rows
# Flat: between 50 % and 100 % of the writes, the DB grew by less than this share of what
# the control (no policy) grows per version written; RSS by less than RSS_FLAT.
DB_FLAT_SHARE = 0.05
RSS_FLAT = 0.10

# Record types of the store's one RocksDB (node/store/keys.py): tag byte -> name.
TAGS = {
    "m": "meta",
    "c": "live key index",
    "h": "kv history (values)",
    "s": "superseded index",
    "r": "change log",
    "i": "idempotency records",
    "e": "idempotency expiry index",
    "t": "revision-time index",
    "P": "retention policies",
    "g": "last gc",
}


@dataclass
class Sample:
    """One look at the cluster: sizes in bytes (du: allocated blocks), per node id."""

    t: float  # seconds since the run started
    phase: str  # "write", "gc", "compact", ...
    written: int  # versions acknowledged so far
    live: int  # live keys under the prefix (a paged keys_only range count)
    revision: int = 0
    compact_revision: int = 0
    db: dict[str, int] = field(default_factory=dict)  # <node>/db: RocksDB
    raft: dict[str, int] = field(default_factory=dict)  # <node>/raft: journal + snapshot
    rss: dict[str, int] = field(default_factory=dict)  # VmRSS


@dataclass
class Run:
    """One cluster's run: the samples and the end-of-run figures."""

    label: str
    versions: int
    samples: list[Sample] = field(default_factory=list)
    extra: list[tuple[str, Sample]] = field(default_factory=list)  # labelled rows
    offline: dict[str, tuple[int, int]] = field(default_factory=dict)  # node: (before, after)
    parts: dict[str, tuple[int, int]] = field(default_factory=dict)  # node-0 by record type
    gc_wait_s: float | None = None
    write_s: float = 0.0
    notes: list[str] = field(default_factory=list)


def du(path: str | os.PathLike[str]) -> int:
    """Bytes allocated to the files under ``path`` (like ``du -s --block-size=1``); files
    that vanish while it walks (RocksDB compactions, journal rotation) are skipped."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue
    return total


def at_marks(samples: Sequence[Sample], total: int, marks: Sequence[int] = MARKS) -> list[Sample]:
    """For each mark (% of ``total``), the first write-phase sample that had written at
    least that many versions (the last write sample if none did; 0 %: the first)."""
    writes = [s for s in samples if s.phase == "write"] or list(samples)
    out = []
    for m in marks:
        want = total * m / 100
        out.append(next((s for s in writes if s.written >= want), writes[-1]))
    return out


def mib(n: float | None) -> str:
    return "-" if n is None else f"{n / MIB:,.1f}"


def _per_node(d: dict[str, int], nodes: Sequence[str]) -> str:
    return " / ".join(mib(d.get(n)) for n in nodes)


COLUMNS = (
    "point",
    "versions written",
    "live keys",
    "revision",
    "RocksDB MiB (per node)",
    "raft dir MiB (per node)",
    "RSS MiB (per node)",
)


def row(label: str, s: Sample, nodes: Sequence[str]) -> list[str]:
    return [
        label,
        f"{s.written:,}",
        f"{s.live:,}",
        f"{s.revision:,}",
        _per_node(s.db, nodes),
        _per_node(s.raft, nodes),
        _per_node(s.rss, nodes),
    ]


def table(
    samples: Sequence[Sample],
    total: int,
    nodes: Sequence[str],
    extra: Iterable[tuple[str, Sample]] = (),
) -> str:
    """The markdown table: one row per mark, then the ``extra`` (label, sample) rows."""
    rows = [row(f"{m} %", s, nodes) for m, s in zip(MARKS, at_marks(samples, total), strict=True)]
    rows += [row(label, s, nodes) for label, s in extra]
    return markdown_table(rows, COLUMNS, numeric=COLUMNS[1:4])


def _largest(d: dict[str, int]) -> int:
    return max(d.values()) if d else 0


def growth_per_version(a: Sample, b: Sample, what: str) -> float:
    """Bytes per version written of the largest node's ``what`` (db, raft, rss) from a to b."""
    dv = b.written - a.written
    return (_largest(getattr(b, what)) - _largest(getattr(a, what))) / dv if dv > 0 else 0.0


def verdict(samples: Sequence[Sample], total: int, control_per_version: float | None) -> list[str]:
    """Flat or not, with the figures: DB growth from 50 % to 100 % of the writes per version
    against the control's bytes per version; RSS growth over the same half."""
    _, _, _, half, _, end = at_marks(samples, total)
    out = []
    db = growth_per_version(half, end, "db")
    if control_per_version:
        share = db / control_per_version
        word = "flat" if share < DB_FLAT_SHARE else "NOT flat"
        out.append(
            f"RocksDB size {word}: from 50 % to 100 % of the writes the largest node's DB grew "
            f"{db:,.1f} B per version written, {100 * share:.1f} % of the control's "
            f"{control_per_version:,.0f} B per version (flat: < {100 * DB_FLAT_SHARE:.0f} %)"
        )
    else:
        out.append(f"RocksDB size: {db:,.1f} B per version written from 50 % to 100 % (no control)")
    r0, r1 = _largest(half.rss), _largest(end.rss)
    if r0:
        g = (r1 - r0) / r0
        word = "flat" if g < RSS_FLAT else "NOT flat"
        out.append(
            f"RSS {word}: largest node {mib(r0)} MiB at 50 %, {mib(r1)} MiB at 100 % "
            f"({100 * g:+.1f} %; flat: < {100 * RSS_FLAT:.0f} %)"
        )
    return out


def breakdown(items: Iterable[tuple[bytes, bytes]]) -> dict[str, tuple[int, int]]:
    """Record type -> (records, key + value bytes, uncompressed) of a store's RocksDB."""
    out: dict[str, tuple[int, int]] = {}
    for k, v in items:
        tag = chr(k[0]) if k else "?"
        name = TAGS.get(tag, f"other ({tag!r})")
        n, b = out.get(name, (0, 0))
        out[name] = (n + 1, b + len(k) + len(v))
    return out


def breakdown_table(parts: dict[str, tuple[int, int]]) -> str:
    rows = [
        [name, f"{n:,}", mib(b), f"{b / n:,.0f}"]
        for name, (n, b) in sorted(parts.items(), key=lambda kv: -kv[1][1])
    ]
    cols = ("record type (node/store/keys.py)", "records", "MiB (uncompressed)", "B / record")
    return markdown_table(rows, cols, numeric=cols[1:])


def per_version(run: Run) -> float | None:
    """The control's RocksDB bytes per version written (largest node, end of the writes)."""
    ends = [s for s in run.samples if s.phase == "write"]
    if not ends or not ends[-1].written:
        return None
    return max(ends[-1].db.values(), default=0) / ends[-1].written


def offline_line(run: Run) -> str:
    if not run.offline:
        return ""
    cells = ", ".join(f"{n} {mib(b)} -> {mib(a)} MiB" for n, (b, a) in sorted(run.offline.items()))
    return f"{run.label}: RocksDB after the nodes stopped -> after offline compact_range: {cells}"


def report(
    runs: list[Run], desc: str, args: argparse.Namespace, png: Path | None
) -> tuple[list[str], list[str]]:
    """(notes, tables) of the results section."""
    main, control = runs[0], (runs[1] if len(runs) > 1 else None)
    cpv = per_version(control) if control else None
    nodes = sorted(main.samples[-1].db) if main.samples else []
    notes = [
        f"target: {desc}; [retention] gc_interval_seconds = {args.gc_interval:g} (the leader "
        f"enforces policies every {args.gc_interval:g} s), history_revisions = "
        f"{args.history_revisions:,} (MVCC history keeps every version of the last N "
        "revisions readable, deleted ones included; the default 100,000 would keep ~100 MiB of "
        "deleted 1 KiB checkpoints per node), idempotency_seconds = "
        + (f"{args.idempotency_seconds:,}" if args.idempotency_seconds else "the default 86,400")
        + " (every write's idempotency record is kept that long)",
        f"writes: {main.versions:,} versions as {PREFIX}{{a:03d}}/ckpt/{{n:012d}} over "
        f"{args.agents} agents, {args.value_size} B random values, client.batch() of "
        f"{args.batch} puts (one revision each), {args.writers} in flight"
        + (
            f", at most {args.rate:g} versions/s"
            if args.rate
            else ", as fast as the cluster takes them"
        )
        + "; policy "
        f'retention_set("{PREFIX}", within="ckpt", keep_last={KEEP_LAST}); writes took '
        f"{main.write_s:.0f} s; GC caught up (live keys == {args.agents} x {KEEP_LAST}) "
        + (
            f"{main.gc_wait_s:.0f} s after the last write"
            if main.gc_wait_s is not None
            else f"NOT within {args.gc_timeout:g} s"
        ),  # fmt: skip
        "sizes: du of <node>/db (RocksDB, with RocksDB's own background compaction) and "
        "<node>/raft (raft journal + snapshot file); RSS: VmRSS; the table's rows are the "
        "first sample at or past each share of the writes; per node: " + " / ".join(nodes),
        *verdict(main.samples, main.versions, cpv),
    ]
    for run in runs:
        if line := offline_line(run):
            notes.append(line)
    if control and cpv:
        notes.append(
            f"control (no policy): {control.versions:,} versions, {cpv:,.0f} B of RocksDB per "
            f"version; EXTRAPOLATED to {main.versions:,} versions: "
            f"{mib(cpv * main.versions)} MiB per node (not measured)"
        )
    notes += main.notes
    if png:
        notes.append(f"plot: results/{png.name}")
    notes.append("the 2 cores were shared with other work during the run: sizes only, no speed claims"
                 + (f"; {args.note}" if args.note else ""))  # fmt: skip
    tables = ["keep-last-10:\n\n" + table(main.samples, main.versions, nodes, main.extra)]
    if control:
        tables.append("no policy (control):\n\n" + table(control.samples, control.versions, nodes))
    if main.parts:
        tables.append(f"{nodes[0]}'s RocksDB after the offline compaction, by record type:\n\n"
                      + breakdown_table(main.parts))  # fmt: skip
    if control and control.parts:
        tables.append(f"control, {nodes[0]}'s RocksDB after the offline compaction, by record "
                      "type:\n\n" + breakdown_table(control.parts))  # fmt: skip
    return notes, tables


def plot(
    runs: Sequence[Run],
    path: Path,
    extrapolate: tuple[int, float] | None = None,
) -> Path | None:
    """DB size and RSS (largest node) against versions written, one line per run, with the
    end points (after GC, after the MVCC compact, after the offline compaction) as markers
    at the last x; ``extrapolate`` = (versions, bytes per version) adds the control's
    dashed line."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11.5, 4.6))
    for run, color in zip(runs, ("tab:blue", "tab:orange", "tab:green"), strict=False):
        ws = [s for s in run.samples if s.phase == "write"]
        xs = [s.written for s in ws]
        ax1.plot(xs, [_largest(s.db) / MIB for s in ws], "-", color=color,
                 label=f"{run.label}: RocksDB")  # fmt: skip
        ax1.plot(xs, [_largest(s.raft) / MIB for s in ws], ":", color=color,
                 label=f"{run.label}: raft dir (journal + snapshot)")  # fmt: skip
        ax2.plot(xs, [_largest(s.rss) / MIB for s in ws], "-", color=color, label=run.label)
        ends = [(label, s) for label, s in run.extra]
        for (label, s), marker in zip(ends, ("o", "s"), strict=False):
            ax1.plot([s.written], [_largest(s.db) / MIB], marker, color=color,
                     label=f"{run.label}: RocksDB {label}")  # fmt: skip
            ax2.plot([s.written], [_largest(s.rss) / MIB], marker, color=color,
                     label=f"{run.label}: {label}")  # fmt: skip
        if run.offline and xs:
            after = max(a for _, a in run.offline.values())
            ax1.plot([xs[-1]], [after / MIB], "*", markersize=11, color=color,
                     label=f"{run.label}: RocksDB after offline compact_range")  # fmt: skip
    if extrapolate:
        n, per = extrapolate
        ax1.plot([0, n], [0, n * per / MIB], "--", color="grey",
                 label="no policy, EXTRAPOLATED from the control")  # fmt: skip
    for ax, ylabel, title in (
        (ax1, "MiB on disk (largest node)", "storage: keep-last-10 vs no policy"),
        (ax2, "VmRSS MiB (largest node)", "node memory"),
    ):
        ax.set_xlabel("checkpoint versions written")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend(fontsize=6.5)
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
