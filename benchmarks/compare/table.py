"""What a reader sees: the Markdown tables, the notes under them, the legend.

Every figure comes from rounds.summarize_row (medians over rounds, pooled failover
trials, median ratio with its min-max spread); this module only formats. Two tables:
the main one (throughput, latency, ratio, client CPU, errors) and one of the servers' CPU
per op (leader and followers), printed only when some row has server figures. The append
rows, where Redis Streams stand as a third system, get tables of their own
(append_tables: figures with both ratios, server CPU, and what each system did per request).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from statekeeper.benchmarks.compare.rounds import (
    ETCD,
    REDIS,
    SK,
    Row,
    RowSummary,
    SystemSummary,
    summarize_row,
)
from statekeeper.benchmarks.compare.workloads import APPEND_ACTIONS, append_events

CLIENT_BUSY = 0.8  # fraction of a core above which the load generator may be the limit

TABLE_COLUMNS = (
    "workload",
    "statekeeper ops/s",
    "etcd ops/s",
    "median ratio sk/etcd",
    "ratio spread",
    "sk p50 ms",
    "etcd p50 ms",
    "sk p99 ms",
    "etcd p99 ms",
    "client CPU us/op sk / etcd",
    "client cores sk / etcd",
    "errors sk / etcd",
)
SERVER_COLUMNS = (
    "workload",
    "sk leader us/op",
    "sk follower us/op",
    "etcd leader us/op",
    "etcd follower us/op",
)
_LEFT = {"workload", "statekeeper does", "etcd does", "redis does"}

LEGEND = (
    "Each system ran every group once per round, each time on a fresh cluster, the order "
    "alternating between rounds. Figures are medians over the rounds; ratio = statekeeper "
    "/ etcd of the two systems' figures in the same round, median over the rounds, and "
    "spread = the lowest and highest of those per-round ratios (a wide spread means the "
    "rounds disagree: trust the median, not one run). For ops/s rows above 1 means "
    "statekeeper is faster; for times (failover, cold start) and memory (RSS) below 1 "
    "means statekeeper is better. Failover rows: p50/p99 over the trials of all rounds "
    "pooled, of the time from SIGKILL of the leader to the first acknowledged put issued "
    "after it; the value columns show that p50, the ratio is per round of the rounds' p50s. "
    "Client CPU: the load generator's CPU time (user+sys, all threads) over the measured "
    "window per op of the ops/s column, and the fraction of one core it used; near 1.0 the "
    f"client, not the server, may set the pace (flagged in the notes above {CLIENT_BUSY})."
)


def format_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def format_spread(lo: float | None, hi: float | None) -> str:
    return "-" if lo is None or hi is None else f"{lo:.2f}-{hi:.2f}x"


def format_value(kind: str, s: SystemSummary | None) -> str:
    if s is None:
        return "-"
    if s.value is None:
        return "failed" if s.failed else "-"
    if kind == "ops":
        return f"{s.value:.0f}"
    if kind == "time":
        return f"{s.value:.2f} s"
    if kind == "memory":
        return f"{s.value:.0f} MiB"
    raise ValueError(kind)


def format_ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}" if v < 100 else f"{v:.0f}"


def format_us(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def format_cores(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _pair(
    fmt: Callable[[float | None], str],
    sk: SystemSummary | None,
    etcd: SystemSummary | None,
    attr: str,
) -> str:
    """'sk / etcd' of one SystemSummary attribute; '-' when neither has it."""
    a = getattr(sk, attr) if sk else None
    b = getattr(etcd, attr) if etcd else None
    if a is None and b is None:
        return "-"
    return f"{fmt(a)} / {fmt(b)}"


def _errors(s: SystemSummary | None) -> str:
    return "-" if s is None or s.value is None else str(s.errors)


def table_cells(row: Row, summary: RowSummary | None = None) -> list[str]:
    summary = summary or summarize_row(row)
    sk, etcd = summary.systems.get(SK), summary.systems.get(ETCD)
    return [
        row.label,
        format_value(row.kind, sk),
        format_value(row.kind, etcd),
        format_ratio(summary.ratio),
        format_spread(summary.ratio_min, summary.ratio_max),
        format_ms(sk.p50_ms if sk else None),
        format_ms(etcd.p50_ms if etcd else None),
        format_ms(sk.p99_ms if sk else None),
        format_ms(etcd.p99_ms if etcd else None),
        _pair(format_us, sk, etcd, "client_us_per_op"),
        _pair(format_cores, sk, etcd, "client_cores"),
        f"{_errors(sk)} / {_errors(etcd)}",
    ]


def server_cells(row: Row, summary: RowSummary | None = None) -> list[str] | None:
    """The server CPU row, or None when neither system has a server figure for it."""
    summary = summary or summarize_row(row)
    cells = [row.label]
    for name in (SK, ETCD):
        s = summary.systems.get(name)
        cells += [format_us(s.leader_us_per_op if s else None),
                  format_us(s.follower_us_per_op if s else None)]  # fmt: skip
    return cells if any(c != "-" for c in cells[1:]) else None


def render(columns: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    """An aligned Markdown table: the first column left, the others right."""
    widths = [max(len(c), *(len(r[i]) for r in body)) for i, c in enumerate(columns)]

    def line(cells: Sequence[str]) -> str:
        out = [
            cell.ljust(w) if col in _LEFT else cell.rjust(w)
            for cell, w, col in zip(cells, widths, columns, strict=True)
        ]
        return "| " + " | ".join(out) + " |"

    sep = "|" + "|".join(
        "-" * (w + 2) if c in _LEFT else "-" * (w + 1) + ":"
        for w, c in zip(widths, columns, strict=True)
    ) + "|"  # fmt: skip
    return "\n".join([line(columns), sep, *(line(r) for r in body)])


def markdown_table(rows: Sequence[Row]) -> str:
    return render(TABLE_COLUMNS, [table_cells(r) for r in rows])


def server_table(rows: Sequence[Row]) -> str | None:
    """Server CPU per op (median over rounds), or None when no row has a figure."""
    body = [c for r in rows if (c := server_cells(r)) is not None]
    return render(SERVER_COLUMNS, body) if body else None


def _system_notes(row: Row, system: str, summary: SystemSummary) -> list[str]:
    measures = row.results.get(system, [])
    parts = [
        f"round {i + 1}: no figure: {m.failed}" for i, m in enumerate(measures) if m and m.failed
    ]
    errors: dict[str, int] = {}
    for m in measures:
        for k, v in (m.error_detail if m else {}).items():
            errors[k] = errors.get(k, 0) + v
    if errors:
        parts.append("errors " + ", ".join(f"{k}: {v}" for k, v in errors.items()))
    texts = [(i, m.note) for i, m in enumerate(measures) if m and m.note]
    if len({t for _, t in texts}) == 1:
        parts.append(texts[0][1])
    else:
        parts += [f"round {i + 1}: {t}" for i, t in texts]
    if summary.client_cores_max is not None and summary.client_cores_max > CLIENT_BUSY:
        parts.append(
            f"the client used up to {summary.client_cores_max:.2f} of a core: it may be "
            "what limits this row"
        )
    return parts


def row_notes(rows: Sequence[Row]) -> list[str]:
    """Failures, errors by type, per-row notes and a busy client, one line per system."""
    notes = []
    for row in rows:
        summary = summarize_row(row)
        for system, s in summary.systems.items():
            parts = _system_notes(row, system, s)
            if parts:
                notes.append(f"- {row.label}, {system}: " + "; ".join(parts))
    return notes


# ------------------------------------------------------------------ the append rows

SYSTEMS3 = (SK, ETCD, REDIS)
APPEND_COLUMNS = (
    "workload",
    "statekeeper events/s",
    "etcd events/s",
    "redis events/s",
    "median ratio sk/etcd",
    "spread sk/etcd",
    "median ratio sk/redis",
    "spread sk/redis",
    "p50 ms sk / etcd / redis",
    "p99 ms sk / etcd / redis",
    "client CPU us/event sk / etcd / redis",
    "errors sk / etcd / redis",
)
APPEND_SERVER_COLUMNS = (
    "workload",
    "sk leader us/event",
    "sk follower us/event",
    "etcd leader us/event",
    "etcd follower us/event",
    "redis us/event",
)
APPEND_ACTION_COLUMNS = ("workload", "statekeeper does", "etcd does", "redis does")
APPEND_LEGEND = (
    "Append rows: each request appends its events to one of 64 streams picked at random "
    "(etcd: puts of the same size under new keys); events/s counts events, not requests. "
    "The systems ran in an order rotating between rounds, each round on a fresh cluster "
    "(statekeeper, etcd: 3 members; Redis: one server). Figures are medians over the "
    "rounds; a ratio is statekeeper's events/s over etcd's (or Redis's) in the same round, "
    "median over the rounds, and its spread the lowest and highest of those. Server CPU: "
    "utime+stime of each process over the measured window per event."
)


def is_append_row(row: Row) -> bool:
    return append_events(row.key) is not None


def _three(
    fmt: Callable[[float | None], str], sums: Sequence[SystemSummary | None], attr: str
) -> str:
    values = [getattr(s, attr) if s else None for s in sums]
    return "-" if all(v is None for v in values) else " / ".join(fmt(v) for v in values)


def append_cells(row: Row) -> list[str]:
    by_etcd, by_redis = summarize_row(row, (SK, ETCD)), summarize_row(row, (SK, REDIS))
    sums = [by_etcd.systems.get(name) for name in SYSTEMS3]
    return [
        row.label,
        *(format_value(row.kind, s) for s in sums),
        format_ratio(by_etcd.ratio),
        format_spread(by_etcd.ratio_min, by_etcd.ratio_max),
        format_ratio(by_redis.ratio),
        format_spread(by_redis.ratio_min, by_redis.ratio_max),
        _three(format_ms, sums, "p50_ms"),
        _three(format_ms, sums, "p99_ms"),
        _three(format_us, sums, "client_us_per_op"),
        " / ".join(_errors(s) for s in sums),
    ]


def append_server_cells(row: Row) -> list[str] | None:
    """Leader and follower CPU per event of statekeeper and etcd, Redis's server's."""
    systems = summarize_row(row).systems
    cells = [row.label]
    for name in (SK, ETCD):
        s = systems.get(name)
        cells += [format_us(s.leader_us_per_op if s else None),
                  format_us(s.follower_us_per_op if s else None)]  # fmt: skip
    redis = systems.get(REDIS)
    cells.append(format_us(redis.leader_us_per_op if redis else None))
    return cells if any(c != "-" for c in cells[1:]) else None


def append_actions(rows: Sequence[Row]) -> str:
    """What each system did for one request of each append row (APPEND_ACTIONS)."""
    body = []
    for r in rows:
        n = append_events(r.key)
        body.append([r.label, *(APPEND_ACTIONS[name].get(n or 1, "-") for name in SYSTEMS3)])
    return render(APPEND_ACTION_COLUMNS, body)


def append_tables(rows: Sequence[Row], setup: str = "") -> str | None:
    """The append rows' tables (figures, server CPU, what each system did) and their
    legend, or None when the run had no append row. `setup`: how Redis ran (a note)."""
    appends = [r for r in rows if is_append_row(r)]
    if not appends:
        return None
    parts = [render(APPEND_COLUMNS, [append_cells(r) for r in appends])]
    server = [c for r in appends if (c := append_server_cells(r)) is not None]
    if server:
        parts += ["Server CPU per event (us, median over rounds; followers: their mean):",
                  render(APPEND_SERVER_COLUMNS, server)]  # fmt: skip
    parts += ["What each system did per request:", append_actions(appends)]
    parts.append(APPEND_LEGEND + (f" {setup}." if setup else ""))
    return "\n\n".join(parts)


def result_blocks(rows: Sequence[Row], redis_setup: str = "") -> list[str]:
    """Everything under a run's heading, as paragraphs: the etcd table of the key-value rows,
    its server CPU table and legend, then the append rows' tables (printed and in RESULTS.md)."""
    kv = [r for r in rows if not is_append_row(r)]
    blocks = []
    if kv:
        blocks.append(markdown_table(kv))
        server = server_table(kv)
        if server:
            blocks += ["Server CPU per op (us, median over rounds; followers: their mean):", server]
        blocks.append(LEGEND)
    appends = append_tables(rows, redis_setup)
    if appends:
        blocks += ["Stream appends (statekeeper, etcd, Redis Streams):", appends]
    return blocks
