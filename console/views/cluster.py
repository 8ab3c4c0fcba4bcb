"""The Cluster page's data: every node's GET /v1/status and GET /metrics, asked through the
user's AsyncClient (client.status / client.metrics with endpoint=each node's URL), into
plain frozen dataclasses. No HTML here (console/pages/cluster.py renders them).

The charts (put/get rate, p99 of put+get, p99 of proposal-to-apply) need history that one
scrape does not have: `MetricHistory` keeps the last SAMPLES_KEPT scrapes per node in a
ring (a deque with maxlen), shared by every viewer of the page, and takes a new scrape only
when the last one is SCRAPE_INTERVAL old. It fills while the page is open (it polls every
2 s): the charts cover the last minutes someone was looking, not the node's whole life.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client.parser import text_string_to_metric_families

from statekeeper.client.errors import StatekeeperError

if TYPE_CHECKING:
    from statekeeper.client.aio import AsyncClient

SAMPLES_KEPT = 150  # 5 minutes at the page's 2 s refresh
SCRAPE_INTERVAL = 1.5  # seconds; viewers polling together share one scrape per node
KV_ROUTES = ("/v1/kv/put", "/v1/kv/get")
REQUESTS = "statekeeper_http_requests"
REQUEST_SECONDS = "statekeeper_http_request_duration_seconds"
APPLY_SECONDS = "statekeeper_proposal_apply_duration_seconds"
LEADER_CHANGES = "statekeeper_raft_leader_changes"


@dataclass(frozen=True)
class Scrape:
    """The counters of one GET /metrics that the charts use (cumulative, as scraped)."""

    at: float  # time.monotonic()
    puts: float
    gets: float
    kv_buckets: tuple[tuple[float, float], ...]  # (le, cumulative count), put+get
    apply_buckets: tuple[tuple[float, float], ...]
    leader_changes: int


@dataclass(frozen=True)
class Point:
    """What happened between two scrapes."""

    put_rate: float  # per second
    get_rate: float
    kv_p99_ms: float | None  # None: no request in the interval
    apply_p99_ms: float | None


@dataclass(frozen=True)
class NodeRow:
    id: str
    url: str
    up: bool
    error: str = ""  # why it is not up
    role: str = ""
    term: int = 0
    leader: str | None = None
    commit_index: int = 0
    applied_index: int = 0
    lag: int = 0  # entries behind the highest commit index seen
    has_quorum: bool = False
    storage_alarm: str | None = None  # "nospace" while the quota alarm is raised
    leader_changes: int | None = None  # as this node counted them since it started
    points: tuple[Point, ...] = ()  # oldest first


@dataclass(frozen=True)
class ClusterModel:
    nodes: tuple[NodeRow, ...]
    leader: str | None  # the node most nodes name as leader; None: no leader known
    term: int
    auth_enabled: bool


def parse_scrape(text: str, at: float) -> Scrape:
    """The chart counters of a Prometheus text exposition."""
    puts = gets = 0.0
    kv: dict[float, float] = {}
    apply: dict[float, float] = {}
    changes = 0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            route = s.labels.get("route")
            if s.name == REQUESTS + "_total" and route in KV_ROUTES:
                if route == KV_ROUTES[0]:
                    puts += s.value
                else:
                    gets += s.value
            elif s.name == REQUEST_SECONDS + "_bucket" and route in KV_ROUTES:
                le = float(s.labels["le"])
                kv[le] = kv.get(le, 0.0) + s.value
            elif s.name == APPLY_SECONDS + "_bucket":
                apply[float(s.labels["le"])] = s.value
            elif s.name == LEADER_CHANGES + "_total":
                changes = int(s.value)
    return Scrape(at, puts, gets, tuple(sorted(kv.items())), tuple(sorted(apply.items())), changes)


def p99_ms(before: Iterable[tuple[float, float]], after: Iterable[tuple[float, float]]):
    """The 99th percentile (ms, the bucket's upper bound) of what a histogram counted
    between two scrapes; None when it counted nothing."""
    old = dict(before)
    deltas = [(le, count - old.get(le, 0.0)) for le, count in after]
    if not deltas or deltas[-1][1] <= 0:
        return None
    goal = 0.99 * deltas[-1][1]
    le = next(le for le, n in deltas if n >= goal)
    return None if le == float("inf") else le * 1000.0


def points(scrapes: Iterable[Scrape]) -> tuple[Point, ...]:
    out = []
    prev: Scrape | None = None
    for s in scrapes:
        if prev is not None and s.at > prev.at:
            dt = s.at - prev.at
            out.append(
                Point(
                    max(0.0, s.puts - prev.puts) / dt,
                    max(0.0, s.gets - prev.gets) / dt,
                    p99_ms(prev.kv_buckets, s.kv_buckets),
                    p99_ms(prev.apply_buckets, s.apply_buckets),
                )
            )
        prev = s
    return tuple(out)


class MetricHistory:
    """The last SAMPLES_KEPT scrapes of each node (by URL)."""

    def __init__(
        self, kept: int = SAMPLES_KEPT, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.kept = kept
        self.clock = clock
        self.rings: dict[str, deque[Scrape]] = {}

    def due(self, url: str) -> bool:
        ring = self.rings.get(url)
        return not ring or self.clock() - ring[-1].at >= SCRAPE_INTERVAL

    def add(self, url: str, text: str) -> None:
        ring = self.rings.setdefault(url, deque(maxlen=self.kept))
        ring.append(parse_scrape(text, self.clock()))

    def scrapes(self, url: str) -> tuple[Scrape, ...]:
        return tuple(self.rings.get(url, ()))


async def _node(client: AsyncClient, node_id: str, url: str, history: MetricHistory) -> Any:
    """(status dict or the error's text, scrapes) of one node."""
    try:
        status = await client.status(endpoint=url)
        if history.due(url):
            history.add(url, await client.metrics(endpoint=url))
    except StatekeeperError as e:
        return str(e), history.scrapes(url)
    return status, history.scrapes(url)


async def cluster_view(
    client: AsyncClient, nodes: Iterable[tuple[str, str]], history: MetricHistory
) -> ClusterModel:
    """Every node's row; `nodes`: (id, client URL) pairs from the cluster's config."""
    nodes = list(nodes)
    answers = await asyncio.gather(*(_node(client, i, u, history) for i, u in nodes))
    statuses = [a[0] for a in answers if isinstance(a[0], dict)]
    top_commit = max((s.get("commit_index", 0) for s in statuses), default=0)
    named = [s.get("leader") for s in statuses if s.get("leader")]
    leader = max(set(named), key=named.count) if named else None
    rows = []
    for (node_id, url), (status, scrapes) in zip(nodes, answers, strict=True):
        changes = scrapes[-1].leader_changes if scrapes else None
        if not isinstance(status, dict):
            rows.append(NodeRow(node_id, url, False, error=status, points=points(scrapes)))
            continue
        applied = status.get("applied_index", 0)
        rows.append(
            NodeRow(
                status.get("node_id", node_id),
                url,
                True,
                role=status.get("role", ""),
                term=status.get("term", 0),
                leader=status.get("leader"),
                commit_index=status.get("commit_index", 0),
                applied_index=applied,
                lag=max(0, top_commit - applied),
                has_quorum=bool(status.get("has_quorum")),
                storage_alarm=(status.get("storage") or {}).get("alarm"),
                leader_changes=changes,
                points=points(scrapes),
            )
        )
    term = max((s.get("term", 0) for s in statuses), default=0)
    auth = any((s.get("auth") or {}).get("enabled") for s in statuses)
    return ClusterModel(tuple(rows), leader, term, auth)
