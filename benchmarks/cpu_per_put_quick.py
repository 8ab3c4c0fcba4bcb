"""`python -m statekeeper.benchmarks.cpu_per_op --quick` (`make cpu-per-put`): the write path's cost
per put in a minute or two, the before/after figure every write-path change quotes.

For 1 and 64 clients (puts of 256 B, fsync=always), each on ONE fresh 3-node cluster:

1. CPU window, `rounds` short rounds (default 3 x 4 s after 1 s of warm-up): CPU us per
   put of the leader and of a follower (utime+stime from /proc/<pid>/stat, as
   cpu_per_op does), the median and the min-max of the rounds. Over the same windows the
   nodes' /metrics give, per put: fsyncs (`statekeeper_journal_fsync_duration_seconds`
   _count), raft entries (the leader's `statekeeper_raft_entries_proposed_total`; the
   follower's applied index) and raft ticks (`statekeeper_raft_ticks_total`, when a
   node exports it; "-" when not). Each scrape is taken just outside the CPU reading
   (before the first, after the last) so the scrape's own CPU is not counted.
2. Syscall window, after the CPU rounds, on the same cluster under the same load:
   `strace -c -f -p PID` on the leader and the follower for `--strace-seconds` (3 s),
   then its counts divided by the puts completed while strace was attached: reads
   (read/recv*), writes (write/send*), waits (epoll_wait/poll/select: one per event-loop
   pass), fsyncs (fsync/fdatasync) and futex (thread hand-offs). strace stops the
   traced process at every system call, so its window is slower than the CPU one and is
   never used for CPU: the counts are what a put costs in calls, not in time.

Skips the syscall window (with a note) when strace is missing or may not attach.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import statistics
import sys
import tempfile
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.benchmarks.cpu_per_op import load_op, read_cpu_seconds, role_names

QUICK_CLIENTS = (1, 64)
FSYNC_COUNT = "statekeeper_journal_fsync_duration_seconds_count"
ENTRIES_PROPOSED = "statekeeper_raft_entries_proposed_total"
APPLIED_INDEX = "statekeeper_raft_applied_index"
TICKS = "statekeeper_raft_ticks_total"
# strace syscall names by the kind the report counts; anything else only goes into "all".
SYSCALL_KINDS = {
    "reads": ("read", "readv", "recvfrom", "recvmsg", "recvmmsg", "pread64"),
    "writes": ("write", "writev", "sendto", "sendmsg", "sendmmsg", "pwrite64"),
    "waits": (
        "epoll_wait",
        "epoll_pwait",
        "epoll_pwait2",
        "poll",
        "ppoll",
        "select",
        "pselect6",
    ),  # fmt: skip
    "fsyncs": ("fsync", "fdatasync"),
    "futex": ("futex",),
}
# The report's column per kind (and "all"): syscalls per put in the strace window.
SYSCALL_HEADS = ("read/recv", "write/send", "waits (loop passes)", "fsync/fdatasync", "futex",
                 "all syscalls")  # fmt: skip
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def parse_metrics(text: str, names: Sequence[str]) -> dict[str, float]:
    """The unlabelled samples `names` from a Prometheus text exposition (absent: left out)."""
    wanted, out = set(names), {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, rest = line.partition(" ")
        if name in wanted:
            out[name] = float(rest.split()[0])
    return out


def parse_strace_summary(text: str) -> dict[str, int]:
    """syscall -> calls from the table `strace -c` writes (the 'total' line left out)."""
    calls: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        # "% time seconds usecs/call calls [errors] syscall"; the header and rules fail here
        if len(parts) < 5 or not parts[3].isdigit() or parts[-1] == "total":
            continue
        calls[parts[-1]] = calls.get(parts[-1], 0) + int(parts[3])
    return calls


def syscalls_by_kind(calls: Mapping[str, int]) -> dict[str, int]:
    """SYSCALL_KINDS' counts, and "all" of every call."""
    out = {kind: sum(calls.get(n, 0) for n in names) for kind, names in SYSCALL_KINDS.items()}
    out["all"] = sum(calls.values())
    return out


@dataclass
class Counts:
    """Per-put figures of one node: CPU per round, metric and syscall counts."""

    cpu_us: list[float] = field(default_factory=list)  # per round
    fsyncs: list[float] = field(default_factory=list)
    entries: list[float] = field(default_factory=list)
    ticks: list[float] = field(default_factory=list)  # empty: the node exports no ticks
    syscalls: dict[str, float] = field(default_factory=dict)  # kind -> calls per put


@dataclass
class ClientCountResult:
    clients: int
    puts_per_s: list[float]
    nodes: dict[str, Counts]  # "leader", "follower"
    strace_note: str = ""


def _scrape(url: str) -> dict[str, float]:
    with _OPENER.open(url + "/metrics", timeout=5) as r:
        return parse_metrics(
            r.read().decode(), (FSYNC_COUNT, ENTRIES_PROPOSED, APPLIED_INDEX, TICKS)
        )


async def _cpu_round(
    system: Any, nodes: Mapping[str, tuple[int, str]], args: Any
) -> tuple[float, dict[str, dict[str, float]]]:
    """One CPU round: (puts/s, role -> {cpu_us, fsyncs, entries, ticks} per put)."""
    from statekeeper.benchmarks.harness import run_load

    marks: list[tuple[dict[str, dict[str, float]], dict[str, float]]] = []

    async def mark(delay: float, scrape_first: bool) -> None:
        await asyncio.sleep(delay)
        metrics: dict[str, dict[str, float]] = {}
        if scrape_first:  # the scrape's own CPU falls outside the CPU window
            for role, (_, url) in nodes.items():
                metrics[role] = await asyncio.to_thread(_scrape, url)
        cpu = {role: read_cpu_seconds(pid) for role, (pid, _) in nodes.items()}
        if not scrape_first:
            for role, (_, url) in nodes.items():
                metrics[role] = await asyncio.to_thread(_scrape, url)
        marks.append((metrics, cpu))

    tasks = [asyncio.create_task(mark(args.warmup, True)),
             asyncio.create_task(mark(args.warmup + args.duration, False))]  # fmt: skip
    keys = [f"k{i:07d}" for i in range(args.keys)]
    result = await run_load(
        load_op(system, args, keys, os.urandom(args.value_size)),
        clients=args.clients, duration=args.duration, warmup=args.warmup,
        progress=None if args.no_progress else sys.stderr, label=f"put x{args.clients}",
    )  # fmt: skip
    await asyncio.gather(*tasks)
    (m0, c0), (m1, c1) = marks
    puts = max(result.ops, 1)
    out: dict[str, dict[str, float]] = {}
    for role in nodes:
        d = {k: m1[role].get(k, 0.0) - m0[role].get(k, 0.0) for k in m1[role]}
        entries = d.get(ENTRIES_PROPOSED) if role == "leader" else d.get(APPLIED_INDEX)
        out[role] = {"cpu_us": (c1[role] - c0[role]) * 1e6 / puts,
                     "fsyncs": d.get(FSYNC_COUNT, float("nan")) / puts,
                     "entries": (entries if entries is not None else float("nan")) / puts}  # fmt: skip
        if TICKS in m1[role] and TICKS in m0[role]:
            out[role]["ticks"] = d[TICKS] / puts
    return result.ops / args.duration, out


async def _strace_window(
    system: Any, nodes: Mapping[str, tuple[int, str]], args: Any
) -> tuple[dict[str, dict[str, float]], str]:
    """Syscalls per put of each node over `args.strace_seconds` under the same load."""
    strace = shutil.which("strace")
    if strace is None:
        return {}, "strace is not installed: no syscall counts"
    put = load_op(
        system, args, [f"k{i:07d}" for i in range(args.keys)], os.urandom(args.value_size)
    )
    done, stop = [0], asyncio.Event()

    async def worker() -> None:
        while not stop.is_set():
            try:
                await put()
            except Exception:  # noqa: BLE001 - a failed put is not counted
                await asyncio.sleep(0.001)
                continue
            done[0] += 1

    workers = [asyncio.create_task(worker()) for _ in range(args.clients)]
    procs: dict[str, asyncio.subprocess.Process] = {}
    with tempfile.TemporaryDirectory(prefix="strace-") as tmp:
        try:
            await asyncio.sleep(args.warmup)
            for role, (pid, _) in nodes.items():
                procs[role] = await asyncio.create_subprocess_exec(
                    strace, "-c", "-f", "-p", str(pid), "-o", str(Path(tmp) / role),
                    stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
                )  # fmt: skip
            for role, proc in procs.items():  # attached once strace says so
                assert proc.stderr is not None
                line = await asyncio.wait_for(proc.stderr.readline(), 10)
                if b"attached" not in line:
                    return {}, f"strace could not attach to the {role}: {line.decode().strip()}"
            first = done[0]
            await asyncio.sleep(args.strace_seconds)
            puts = max(done[0] - first, 1)
        finally:
            for proc in procs.values():  # SIGINT: strace detaches and writes its table
                if proc.returncode is None:
                    proc.send_signal(signal.SIGINT)
            await asyncio.gather(*(proc.wait() for proc in procs.values()))
            stop.set()
            await asyncio.gather(*workers, return_exceptions=True)
        out = {}
        for role in nodes:
            calls = syscalls_by_kind(parse_strace_summary((Path(tmp) / role).read_text()))
            out[role] = {k: v / puts for k, v in calls.items()}
    return out, f"{puts} puts in the {args.strace_seconds:g} s strace window"


async def run_one(args: Any, clients: int) -> ClientCountResult:
    """Every figure for one client count, on one fresh cluster."""
    from statekeeper.benchmarks.systems import StatekeeperSystem

    args.clients = clients
    with tempfile.TemporaryDirectory(prefix="cpu-per-put-", dir=args.data_dir) as tmp:
        async with StatekeeperSystem.managed_cluster(Path(tmp), quiet=args.no_progress) as control:
            system = StatekeeperSystem(control.endpoints, max_connections=max(clients, 10))
            await system.setup()
            try:
                roles = role_names(control.members, await control.leader())
                url = dict(zip(control.members, control.endpoints, strict=True))
                by_role = {r: m for m, r in roles.items()}
                nodes = {role: (control.pid(by_role[name]), url[by_role[name]])
                         for role, name in (("leader", "leader"), ("follower", "follower-1"))}  # fmt: skip
                result = ClientCountResult(clients, [], {r: Counts() for r in nodes})
                for _ in range(args.rounds):
                    rate, per = await _cpu_round(system, nodes, args)
                    result.puts_per_s.append(rate)
                    for role, d in per.items():
                        c = result.nodes[role]
                        c.cpu_us.append(d["cpu_us"])
                        c.fsyncs.append(d["fsyncs"])
                        c.entries.append(d["entries"])
                        if "ticks" in d:
                            c.ticks.append(d["ticks"])
                if args.strace_seconds > 0:
                    sys_calls, result.strace_note = await _strace_window(system, nodes, args)
                    for role, d in sys_calls.items():
                        result.nodes[role].syscalls = d
                return result
            finally:
                await system.teardown()


def _med(xs: Sequence[float]) -> str:
    return "-" if not xs else f"{statistics.median(xs):.3f}"


def report(results: Sequence[ClientCountResult], args: Any) -> str:
    """The table: one line per client count and node."""
    kinds = list(SYSCALL_KINDS) + ["all"]
    head = ["clients", "node", "CPU us/put (median)", "range", "fsyncs/put", "entries/put",
            "ticks/put", *SYSCALL_HEADS]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for res in results:
        for role, c in res.nodes.items():
            cells = [f"x{res.clients}", role, f"{statistics.median(c.cpu_us):.0f}",
                     f"{min(c.cpu_us):.0f}-{max(c.cpu_us):.0f}", _med(c.fsyncs),
                     _med(c.entries), _med(c.ticks),
                     *(f"{c.syscalls[k]:.2f}" if k in c.syscalls else "-" for k in kinds)]  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
    notes = [
        "",
        f"puts of {args.value_size} B, fsync=always, one fresh 3-node cluster per client "
        f"count; CPU and metric counts: median of {args.rounds} rounds of "
        f"{args.duration:g} s after {args.warmup:g} s warm-up; syscalls: strace -c -f "
        f"over a separate {args.strace_seconds:g} s window (strace slows the node: counts "
        "only, never CPU). ticks: '-' when the node exports no statekeeper_raft_ticks_total.",
    ]
    for res in results:
        rates = ", ".join(f"{r:,.0f}" for r in res.puts_per_s)
        notes.append(f"x{res.clients}: puts/s per round {rates}; {res.strace_note}")
    return "\n".join(lines + notes)


async def run_quick(args: Any) -> list[ClientCountResult]:
    return [await run_one(args, clients) for clients in QUICK_CLIENTS]
