"""Rolling restart vs leader crash under a 16-client write load.

    python -m statekeeper.benchmarks.rolling_restart [--rounds 3] [--clients 16] [--fsync never]

One local 3-node cluster; `--clients` writer threads (the client library, real sockets,
default retry policy) write unique keys the whole time. Rounds alternate:

- graceful: a rolling restart, every node in turn (what `statekeeper cluster restart`
  does: SIGTERM, wait for the exit, start, wait until ready), the leader included;
- kill: SIGKILL of the leader, then start it again and wait until ready.

Per event (one node's restart, or the kill) it records the longest gap between two
acknowledged writes (any client) while the event lasted, and the client calls that
failed after the client's retries. At the end every acknowledged key is read back.
Results: printed, JSON + a PNG (acked writes/s with the events marked) in
benchmarks/results/, and a section appended to benchmarks/RESULTS.md with --record.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from tqdm import tqdm

from statekeeper.client import Client, StatekeeperError
from statekeeper.cluster.ports import free_ports
from statekeeper.cluster.supervisor import LocalCluster
from statekeeper.node import config as node_config

RESULTS_DIR = Path(__file__).with_name("results")
RESULTS_MD = Path(__file__).with_name("RESULTS.md")


@dataclasses.dataclass
class Event:
    kind: str  # "graceful" or "kill"
    round: int
    node: str
    was_leader: bool
    start: float
    end: float = 0.0
    gap_s: float = 0.0
    failed: int = 0


class Load:
    """`clients` threads writing unique keys; acked times and failures, by monotonic time."""

    def __init__(self, urls: list[str], clients: int) -> None:
        self.urls = urls
        self.clients = clients
        self.stop = threading.Event()
        self.acked: list[list[tuple[float, str]]] = [[] for _ in range(clients)]
        self.failures: list[tuple[float, str]] = []
        self._lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(clients)
        ]

    def _run(self, i: int) -> None:
        mine = self.acked[i]
        with Client(self.urls, ns="rolling", timeout=3) as c:
            for n in itertools.count():
                if self.stop.is_set():
                    return
                key = f"w{i:02d}-{n:07d}"
                try:
                    c.put(key, key.encode())
                except StatekeeperError as e:
                    with self._lock:
                        self.failures.append((time.monotonic(), f"{key}: {e!r}"))
                    continue
                mine.append((time.monotonic(), key))

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)

    def ack_times(self) -> list[float]:
        return sorted(t for acks in self.acked for t, _ in acks)


def longest_gap(acks: list[float], start: float, end: float) -> float:
    """Longest span inside [start, end] with no acknowledged write (edges count)."""
    inside = [t for t in acks if start <= t <= end]
    points = [start, *inside, end]
    return max(b - a for a, b in itertools.pairwise(points))


def _config(work: Path, fsync: str) -> tuple[Path, node_config.ClusterConfig]:
    ports = free_ports(6)
    cfg = node_config.local_cluster(fsync=fsync, data_dir=str(work / "data"))
    nodes = tuple(
        dataclasses.replace(n, http_port=ports[2 * i], raft_port=ports[2 * i + 1])
        for i, n in enumerate(cfg.nodes)
    )
    cfg = dataclasses.replace(cfg, nodes=nodes)
    path = work / "cluster.toml"
    node_config.write(cfg, path)
    return path, node_config.load(path)


def _restart(lc: LocalCluster, kind: str, rnd: int, node: str, stop_timeout: float) -> Event:
    ev = Event(kind, rnd, node, lc.leader_id() == node, time.monotonic())
    if kind == "kill":
        lc.kill_node(node)
        lc.start_and_wait(node)
    else:
        lc.restart_node(node, stop_timeout=stop_timeout)
    ev.end = time.monotonic()
    return ev


def run(args: argparse.Namespace) -> dict:
    events: list[Event] = []
    with tempfile.TemporaryDirectory(prefix="sk-rolling-") as tmp:
        path, cfg = _config(Path(tmp), args.fsync)
        lc = LocalCluster(cfg, path)
        try:
            lc.up()
            urls = [lc.url(n) for n in lc.node_ids]
            plan = [
                (kind, r)
                for r in range(args.rounds)
                for kind in ("graceful", "kill")
                if kind in args.kinds
            ]
            with Load(urls, args.clients) as load:
                t0 = time.monotonic()
                time.sleep(args.settle)
                bar = tqdm(plan, desc="rounds", unit="round")
                for kind, r in bar:
                    bar.set_postfix_str(kind)
                    if kind == "kill":
                        leader = lc.leader_id() or lc.node_ids[0]
                        events.append(_restart(lc, kind, r, leader, args.stop_timeout))
                    else:
                        for node in lc.node_ids:
                            events.append(_restart(lc, kind, r, node, args.stop_timeout))
                    time.sleep(args.settle)
                t_end = time.monotonic()
            lc.wait_ready(None, timeout=60)
            with Client(urls, ns="rolling") as c:
                found = {kv.key for kv in c.scan()}
        finally:
            lc.kill_all()
            lc.close()
    acks = load.ack_times()
    for ev in events:
        # The load's view of the event: until the node is ready again, plus one second
        # (clients that backed off find their way back).
        ev.gap_s = longest_gap(acks, ev.start, ev.end + 1.0)
        ev.failed = sum(1 for t, _ in load.failures if ev.start <= t <= ev.end + 1.0)
    acked_keys = [k for a in load.acked for _, k in a]
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "label": args.label,
        "clients": args.clients,
        "fsync": args.fsync,
        "election_timeout_s": [cfg.raft.election_timeout_min, cfg.raft.election_timeout_max],
        "duration_s": t_end - t0,
        "acked": len(acked_keys),
        "failed": len(load.failures),
        "failures_sample": [f for _, f in load.failures[:10]],
        "lost": sum(1 for k in acked_keys if k not in found),
        "events": [
            dataclasses.asdict(e) | {"start": e.start - t0, "end": e.end - t0} for e in events
        ],
        "ack_times": [t - t0 for t in acks],
    }


def summary(res: dict) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    groups = {
        "graceful, leader's restart": lambda e: e["kind"] == "graceful" and e["was_leader"],
        "graceful, a follower's restart": lambda e: e["kind"] == "graceful" and not e["was_leader"],
        "SIGKILL of the leader": lambda e: e["kind"] == "kill",
    }
    for name, pick in groups.items():
        evs = [e for e in res["events"] if pick(e)]
        if evs:
            gaps = [e["gap_s"] for e in evs]
            out[name] = {
                "events": len(evs),
                "gap_median_s": statistics.median(gaps),
                "gap_max_s": max(gaps),
                "failed": sum(e["failed"] for e in evs),
            }
    return out


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    acks = res["ack_times"]
    width = 0.1
    bins = int(res["duration_s"] / width) + 1
    counts = [0] * bins
    for t in acks:
        if 0 <= t < bins * width:
            counts[int(t / width)] += 1
    fig, ax = plt.subplots(figsize=(13, 4.5))
    ax.plot([i * width for i in range(bins)], [c / width for c in counts], lw=0.7, color="k")
    colors = {"graceful": "tab:green", "kill": "tab:red"}
    for e in res["events"]:
        ax.axvspan(
            e["start"], e["end"], color=colors[e["kind"]], alpha=0.15 if e["was_leader"] else 0.07
        )
        mark = "L" if e["was_leader"] else ""
        ax.text(
            e["start"],
            ax.get_ylim()[1] * 0.95,
            f"{e['node'][-1]}{mark}\n{e['gap_s']:.2f}s",
            fontsize=7,
        )
    ax.set_xlabel(
        "seconds (green: graceful restart of a node, red: SIGKILL of the leader + restart; "
        "label: node, L = was leader, longest gap)"
    )
    ax.set_ylabel("acknowledged writes/s (100 ms bins)")
    ax.set_title(
        f"Rolling restart vs leader SIGKILL, {res['clients']} writers ({res['label']}): "
        f"{res['failed']} failed calls, {res['lost']} acked writes lost"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def record(res: dict, stats: dict, png: Path, argv: str) -> str:
    et = res["election_timeout_s"]
    lines = [
        f"## Rolling restart vs leader SIGKILL, {res['label']} ({res['date']})",
        "",
        f"`{argv}`: {res['clients']} writer threads (client library, default retries), "
        f"fsync={res['fsync']}, election timeout {et[0]:g}-{et[1]:g} s. {res['acked']} writes "
        f"acknowledged, {res['failed']} client calls failed, {res['lost']} acknowledged "
        f"writes missing afterwards. Gap = longest time without any acknowledged write "
        f"while the event lasted (until the node is ready again + 1 s).",
        "",
        "| event | count | gap median | gap max | failed calls |",
        "|---|---|---|---|---|",
    ]
    for name, s in stats.items():
        lines.append(
            f"| {name} | {s['events']} | {s['gap_median_s']:.2f} s | {s['gap_max_s']:.2f} s "
            f"| {s['failed']} |"
        )
    lines += ["", f"![rolling restart](results/{png.name})", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m statekeeper.benchmarks.rolling_restart",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--rounds", type=int, default=3, help="rounds of each kind (default 3)")
    p.add_argument("--clients", type=int, default=16, help="writer threads (default 16)")
    p.add_argument("--fsync", default="never", choices=node_config.FSYNC_MODES)
    p.add_argument("--kinds", default="graceful,kill", help="graceful,kill (default both)")
    p.add_argument("--stop-timeout", type=float, default=30.0, help="SIGKILL after (s)")
    p.add_argument("--settle", type=float, default=2.0, help="seconds between events")
    p.add_argument("--label", default="this branch", help="names the run in the outputs")
    p.add_argument("--record", action="store_true", help="append a section to RESULTS.md")
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    args.kinds = set(args.kinds.split(","))
    res = run(args)
    stats = summary(res)
    res["summary"] = stats
    stamp = time.strftime("%Y-%m-%d-%H%M", time.gmtime())
    RESULTS_DIR.mkdir(exist_ok=True)
    slug = "".join(ch if ch.isalnum() else "-" for ch in res["label"]).strip("-")
    out = RESULTS_DIR / f"rolling-restart-{slug}-{stamp}.json"
    out.write_text(json.dumps(res, indent=1))
    png = out.with_suffix(".png")
    plot(res, png)
    cmd = "python -m statekeeper.benchmarks.rolling_restart " + " ".join(argv)
    text = record(res, stats, png, cmd.strip())
    print(text)
    print(f"wrote {out} and {png}")
    if args.record:
        with RESULTS_MD.open("a") as f:
            f.write("\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
