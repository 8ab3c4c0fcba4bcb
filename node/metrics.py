"""Prometheus metrics of one node: GET /metrics (docs/protocol.md#metrics lists every family).

prometheus-client does the exposition; each node has its own CollectorRegistry (never the
process-wide default one), so tests and tools that build several nodes in one process keep
them apart.

Two kinds of values:

- Pushed where the work already is: HTTP requests (node/api/routes.py dispatch, into the
  plain ints of RequestTally, folded into families at scrape time), entry sizes
  and proposal-to-apply latency (node/proposer.py), journal fsync latency
  (node/raft/journal.py), snapshot duration and size (node/raft/raft_node.py), ReadIndex
  outcomes (node/reads.py). Only these pay on the hot path.
- Read at scrape time by StatusCollector from values the node keeps anyway (plain ints,
  RaftStatus, a RocksDB property): term, role, indexes, leader changes, proposals, entries,
  ReadIndex rounds, snapshots taken, sizes. Nothing is added to the raft thread for them.

The raft thread observes two histograms (fsync latency and proposal-to-apply latency):
one prometheus-client lock acquisition each, uncontended except during a scrape; no lock
of ours. It never waits for a scrape beyond that.

Hot-path cost, measured by `python -m statekeeper.node.metrics` (a micro-benchmark of the exact calls:
observe calls per request x their cost) on the 2-core dev machine while a CI run loaded it
(CPython 3.11, prometheus-client 0.26; 3 runs): a Counter child inc() 0.5-0.7 us, a
Histogram child observe() 1.2-1.6 us, perf_counter() < 0.1 us. Per HTTP request it was
4.0-5.1 us with prometheus-client objects (in-flight gauge inc + dec, one inc, one
observe); since issue 28 the request families are plain ints read at scrape time
(RequestTally, the in-flight gauge's set_function): 1.35-1.44 us per request against
7.5-15 us for the old code in the same 3 alternating runs (a loaded machine). Per raft
entry proposed (entry-size observe, perf_counter pair, latency observe): 2.9-3.9 us, shared by every op of a group commit. Per journal fsync: 1.5-1.9 us,
next to an fdatasync of 100 us or more. A put therefore pays at most ~10 us: against the
~5 ms of a put at c1 (benchmarks/RESULTS.md, 198 puts/s) that is 0.2 %, and against the
~730 us of machine time per put at c64 (1,376 puts/s on 2 cores) about 1 %. This is
arithmetic from the micro-benchmark, not an A/B of put throughput with and without it.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from itertools import accumulate
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from statekeeper.node.raft.interface import RaftStatus

ROLES = ("leader", "follower", "candidate")
# Seconds: from a fast fsync / local apply to a request timeout.
LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
# Bytes of one raft entry: a small put up to max_entry_bytes (4 MiB by default).
SIZE_BUCKETS = tuple(float(4**i * 64) for i in range(10))  # 64 B .. 16 MiB
SNAPSHOT_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0)


class NodeMetrics:
    """The pushed metrics of one node, in a registry of its own."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        # statekeeper_http_requests and statekeeper_http_request_duration_seconds: plain
        # ints on the HTTP loop, turned into families at scrape time (RequestTally).
        self.requests = RequestTally(LATENCY_BUCKETS)
        r.register(self.requests)
        self.http_in_flight = Gauge(
            "statekeeper_http_requests_in_flight", "HTTP requests being handled", registry=r
        )
        # Read by the gauge at scrape time; node/api/routes.py dispatch counts it up and down.
        self.requests_in_flight = 0
        self.http_in_flight.set_function(lambda: self.requests_in_flight)
        self.auth_denials = Counter(
            "statekeeper_auth_denials",
            "Requests refused by [auth], by error code (unauthenticated, permission_denied)",
            ["code"],
            registry=r,
        )
        self.entry_size = Histogram(
            "statekeeper_raft_entry_size_bytes",
            "Size of each raft entry this node proposed (its group of ops)",
            buckets=SIZE_BUCKETS,
            registry=r,
        )
        self.proposal_duration = Histogram(
            "statekeeper_proposal_apply_duration_seconds",
            "From the proposer's submit to raft's apply callback on this node",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.proposals_failed = Counter(
            "statekeeper_proposals_failed",
            "Raft entries proposed here that got no result (leader lost, expired, no leader)",
            registry=r,
        )
        self.fsync_duration = Histogram(
            "statekeeper_journal_fsync_duration_seconds",
            "fsync/fdatasync calls of the raft journal (none with fsync = never)",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.snapshot_duration = Histogram(
            "statekeeper_snapshot_duration_seconds",
            "Snapshots taken by this node: checkpoint to the file renamed into place",
            buckets=SNAPSHOT_BUCKETS,
            registry=r,
        )
        self.snapshot_size = Gauge(
            "statekeeper_snapshot_size_bytes", "Size of the last snapshot file written", registry=r
        )
        self.read_index = Counter(
            "statekeeper_read_index_requests",
            "Linearizable-read confirmations asked of raft, by outcome "
            "(ok, not_leader, not_yet: then a barrier entry is used)",
            ["outcome"],
            registry=r,
        )

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        self.requests.observe(route, status, seconds)

    def attach(self, collector: Collector) -> None:
        self.registry.register(collector)

    def exposition(self, accept: str | None) -> tuple[bytes, str]:
        """The body and Content-Type of a scrape (text format, or OpenMetrics if asked)."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type


class RequestTally(Collector):
    """HTTP requests answered by (route, code) and their durations by route, kept in plain
    ints and floats and exposed at scrape time as the Counter and Histogram families that
    prometheus-client objects would give (same names, labels, buckets, `_created`).

    Why not those objects: a Counter child inc() plus a Histogram child observe() (a lock
    each, a bucket loop) per request were ~2 us, 2-4 % of a leader's GIL time at 64 clients
    doing puts (py-spy --gil, issue 28); here it is a dict lookup, a bisect and three adds.
    Not thread-safe: observe() and the scrape both run on the HTTP loop."""

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self._bounds = (*buckets, float("inf"))
        self._les = [floatToGoString(b) for b in self._bounds]
        # (route, status) -> [count, that route's histogram]; a histogram is a list of
        # per-bucket counts (not cumulative) followed by the sum of the durations.
        self._by_code: dict[tuple[str, int], list] = {}
        self._by_route: dict[str, list] = {}
        self._created: dict[object, float] = {}  # a series' first observation (_created)

    def observe(self, route: str, status: int, seconds: float) -> None:
        cell = self._by_code.get((route, status))
        if cell is None:
            cell = self._new_series(route, status)
        cell[0] += 1
        hist = cell[1]
        hist[bisect_left(self._bounds, seconds)] += 1  # first bucket with seconds <= le
        hist[-1] += seconds

    def _new_series(self, route: str, status: int) -> list:
        hist = self._by_route.get(route)
        if hist is None:
            hist = self._by_route[route] = [0] * len(self._bounds) + [0.0]
            self._created[route] = time.time()
        cell = self._by_code[(route, status)] = [0, hist]
        self._created[(route, status)] = time.time()
        return cell

    def collect(self) -> Iterator[Any]:
        requests = CounterMetricFamily(
            "statekeeper_http_requests",
            "HTTP requests answered, by route template (KV ops by name) and status code",
            labels=["route", "code"],
        )
        for (route, status), cell in list(self._by_code.items()):
            created = self._created[(route, status)]
            requests.add_metric([route, str(status)], cell[0], created=created)
        yield requests
        name = "statekeeper_http_request_duration_seconds"
        durations = HistogramMetricFamily(
            name,
            "Time from dispatch to the answer's head (a watch: until its stream starts), by route",
            labels=["route"],
        )
        for route, hist in list(self._by_route.items()):
            cumulative = accumulate(hist[:-1])
            buckets = list(zip(self._les, cumulative, strict=True))
            durations.add_metric([route], buckets, hist[-1])
            durations.add_sample(f"{name}_created", {"route": route}, self._created[route])
        yield durations


class StatusCollector(Collector):
    """Values the node already keeps, read at scrape time (on the HTTP loop, never the raft
    thread). `status` is RaftNode.status; the rest are zero-argument getters."""

    def __init__(
        self,
        status: Callable[[], RaftStatus],
        counters: Callable[[], dict[str, int]],
        sizes: Callable[[], dict[str, int]],
    ) -> None:
        self._status = status
        self._counters = counters
        self._sizes = sizes

    def describe(self) -> Iterator[Any]:
        # The same families with placeholder values: registering reads nothing of the node.
        zero = RaftStatus("", False, None, 0, 0, 0, None, False, False, 0, 0, 0)
        return self._families(zero, dict.fromkeys(COUNTERS, 0), dict.fromkeys(SIZES, 0))

    def collect(self) -> Iterator[Any]:
        return self._families(self._status(), self._counters(), self._sizes())

    @staticmethod
    def _families(st: RaftStatus, c: dict[str, int], s: dict[str, int]) -> Iterator[Any]:
        yield _gauge("statekeeper_raft_term", "Current raft term", st.term)
        role = GaugeMetricFamily(
            "statekeeper_raft_role", "1 for this node's current role", labels=["role"]
        )
        for r in ROLES:
            role.add_metric([r], 1 if st.role == r else 0)
        yield role
        yield _gauge("statekeeper_raft_commit_index", "Raft commit index", st.commit_index)
        yield _gauge("statekeeper_raft_applied_index", "Raft last applied index", st.applied_index)
        yield _gauge(
            "statekeeper_raft_has_quorum", "1 while this node sees a quorum", int(st.has_quorum)
        )
        yield _gauge("statekeeper_ready", "1 while /v1/health/ready answers 200", int(st.ready))
        for name, doc in COUNTERS.items():
            yield CounterMetricFamily(f"statekeeper_{name}", doc, value=c[name])
        for name, doc in SIZES.items():
            yield _gauge(f"statekeeper_{name}", doc, s[name])


# Counter families read at scrape time (keys of StatusCollector's counters()).
COUNTERS = {
    "raft_leader_changes": "Times this node saw a new raft leader (itself included)",
    "proposals": "Write ops proposed through this node (each op of a group commit)",
    "raft_entries_proposed": "Raft entries proposed through this node (groups and barriers)",
    "read_index_rounds": "ReadIndex confirmation rounds this node sent as leader",
    "snapshots": "Snapshots this node wrote",
    "raft_log_truncations": "Journal truncations (a follower's conflicting suffix dropped)",
    "storage_refused_writes": "Writes refused with 507 insufficient_storage (NOSPACE alarm)",
    "raft_ticks": "Raft ticks run by this node's loop (elections, commit, apply, sends)",
    "raft_append_entries_passes": "AppendEntries passes this node sent as leader (entries, "
    "heartbeats and commit notices; one pass messages every follower)",
}
# Gauge families read at scrape time (keys of StatusCollector's sizes()).
SIZES = {
    "rocksdb_sst_bytes": "RocksDB's live SST files (property rocksdb.live-sst-files-size)",
    "rocksdb_memtable_bytes": "RocksDB's memtables (property rocksdb.cur-size-all-mem-tables)",
    "journal_size_bytes": "Bytes of the raft journal file",
    "revision": "The store's revision",
    "storage_alarm": "1 while the NOSPACE alarm is raised (writes that add data get 507)",
    "storage_usage_bytes": "Bytes of this node's data dir on disk (RocksDB, journal, snapshots)",
    "storage_quota_bytes": "The storage quota in force: min(quota_bytes, usage + free - reserve)",
    "disk_free_bytes": "Free bytes of the data dir's filesystem at the last measurement",
}


def storage_gauges(quota: Any) -> dict[str, int]:
    """The storage_* / disk_free_bytes values of SIZES from a node.quota.alarm.StorageQuota."""
    return {
        "storage_alarm": int(quota.alarm is not None),
        "storage_usage_bytes": quota.usage_bytes,
        "storage_quota_bytes": quota.quota_bytes,
        "disk_free_bytes": quota.free_bytes or 0,
    }


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def bench_instrumentation(n: int = 200_000) -> dict[str, float]:
    """Microseconds per call of each instrumentation step, and per request/entry/fsync."""
    m = NodeMetrics()
    m.observe_request("/v1/kv/put", 200, 0.001)
    h = m.entry_size
    p = m.proposal_duration
    now = time.perf_counter

    def per_call(fn: Callable[[], Any]) -> float:
        t0 = now()
        for _ in range(n):
            fn()
        return (now() - t0) / n * 1e6

    def request() -> None:
        m.requests_in_flight += 1
        t0 = now()
        m.requests_in_flight -= 1
        m.observe_request("/v1/kv/put", 200, now() - t0)

    def entry() -> None:
        h.observe(120)
        t0 = now()
        p.observe(now() - t0)

    def fsync() -> None:
        t0 = now()
        m.fsync_duration.observe(now() - t0)

    base = per_call(lambda: None)
    return {
        "request": per_call(request) - base,
        "entry": per_call(entry) - base,
        "fsync": per_call(fsync) - base,
        "counter_inc": per_call(m.proposals_failed.inc) - base,
        "histogram_observe": per_call(lambda: p.observe(0.001)) - base,
        "perf_counter": per_call(now) - base,
    }


if __name__ == "__main__":
    for k, v in bench_instrumentation().items():
        print(f"{k:20s} {v:6.2f} us")
