"""node/metrics.py: the registry per node, the scrape-time collector, the exposition, the
HTTP route labels, and `statekeeper cluster status --watch`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from statekeeper.cluster import cli
from statekeeper.node.metrics import COUNTERS, SIZES, NodeMetrics, StatusCollector
from statekeeper.node.raft.interface import RaftStatus

ROOT = Path(__file__).resolve().parents[2]


def _status(**kw) -> RaftStatus:
    base = dict(
        node_id="node-0",
        is_leader=False,
        leader_id="node-1",
        term=7,
        commit_index=41,
        applied_index=40,
        leader_commit_index=41,
        has_quorum=True,
        ready=True,
        log_truncations=0,
        log_truncated_entries=0,
        rejected_peer_messages=0,
    )
    return RaftStatus(**{**base, **kw})


def _scrape(m: NodeMetrics) -> dict[str, object]:
    body, content_type = m.exposition(None)
    assert content_type.startswith("text/plain; version=0.0.4")
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def _value(family, suffix: str = "", **labels) -> float:
    for s in family.samples:
        if s.name == family.name + suffix and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise AssertionError(f"no sample {family.name}{suffix} {labels}")


def _node_metrics(status: RaftStatus, counters: dict | None = None) -> NodeMetrics:
    m = NodeMetrics()
    c = {name: 0 for name in COUNTERS} | (counters or {})
    m.attach(StatusCollector(lambda: status, lambda: c, lambda: dict.fromkeys(SIZES, 5)))
    return m


def test_collector_reads_raft_state_at_scrape_time() -> None:
    state = {"st": _status()}
    m = NodeMetrics()
    counters = {name: 0 for name in COUNTERS}
    m.attach(
        StatusCollector(lambda: state["st"], lambda: counters, lambda: dict.fromkeys(SIZES, 0))
    )
    fams = _scrape(m)
    assert _value(fams["statekeeper_raft_term"]) == 7
    assert _value(fams["statekeeper_raft_commit_index"]) == 41
    assert _value(fams["statekeeper_raft_applied_index"]) == 40
    role = fams["statekeeper_raft_role"]
    assert [_value(role, role=r) for r in ("leader", "follower", "candidate")] == [0, 1, 0]
    # Nothing is pushed: the next scrape sees the new values.
    state["st"] = _status(is_leader=True, leader_id="node-0", term=8, applied_index=41)
    counters["raft_leader_changes"] = 3
    counters["proposals"] = 12
    fams = _scrape(m)
    assert _value(fams["statekeeper_raft_term"]) == 8
    assert _value(fams["statekeeper_raft_role"], role="leader") == 1
    assert _value(fams["statekeeper_raft_leader_changes"], "_total") == 3
    assert _value(fams["statekeeper_proposals"], "_total") == 12
    state["st"] = _status(leader_id=None)
    assert _value(_scrape(m)["statekeeper_raft_role"], role="candidate") == 1


def test_every_documented_family_is_exposed() -> None:
    m = _node_metrics(_status())
    m.observe_request("/v1/kv/put", 200, 0.002)
    m.auth_denials.labels("unauthenticated").inc()
    m.read_index.labels("ok").inc()
    names = {n for n in _scrape(m) if not n.endswith("_created")}
    doc = (ROOT / "docs" / "protocol.md").read_text()
    for name in names:
        assert f"`{name}" in doc, f"{name} is not in docs/protocol.md's Metrics section"
    for name in COUNTERS:
        assert f"statekeeper_{name}" in names
    for name in SIZES:
        assert f"statekeeper_{name}" in names


def test_http_requests_are_counted_by_route_and_code() -> None:
    m = _node_metrics(_status())
    for _ in range(3):
        m.observe_request("/v1/kv/put", 200, 0.001)
    m.observe_request("/v1/kv/get", 404, 0.0005)
    fams = _scrape(m)
    req = fams["statekeeper_http_requests"]
    assert _value(req, "_total", route="/v1/kv/put", code="200") == 3
    assert _value(req, "_total", route="/v1/kv/get", code="404") == 1
    dur = fams["statekeeper_http_request_duration_seconds"]
    assert _value(dur, "_count", route="/v1/kv/put") == 3
    assert _value(dur, "_bucket", route="/v1/kv/get", le="0.001") == 1


def test_registries_are_per_node() -> None:
    a, b = _node_metrics(_status()), _node_metrics(_status(term=9))
    a.observe_request("/v1/status", 200, 0.001)
    samples = {s.name for f in _scrape(b).values() for s in f.samples}
    assert "statekeeper_http_requests_total" not in samples
    assert "statekeeper_http_requests_total" in {
        s.name for f in _scrape(a).values() for s in f.samples
    }
    assert _value(_scrape(b)["statekeeper_raft_term"]) == 9


def test_openmetrics_when_asked() -> None:
    m = _node_metrics(_status())
    body, content_type = m.exposition("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert body.rstrip().endswith(b"# EOF")


def test_route_labels_are_bounded() -> None:
    from statekeeper.node.api.routes import Api
    from statekeeper.node.config import local_cluster

    api = Api(local_cluster(secret=""), "node-0", None, None, None)  # routes only
    assert api._route_label("/v1/kv/put") == "/v1/kv/put"
    assert api._route_label("/v1/kv/nonsense") == "/v1/kv/{op}"
    assert api._route_label("/v1/kv/a/b") == "other"
    assert api._route_label("/v1/streams/append") == "/v1/streams/append"
    assert api._route_label("/metrics") == "/metrics"
    assert api._route_label("/some/random/path?x=1") == "other"
    # Labels are remembered for real routes only (issue 28): asked again, the same answers,
    # and made-up paths leave nothing behind.
    for i in range(100):
        assert api._route_label(f"/v1/kv/nonsense{i}") == "/v1/kv/{op}"
        assert api._route_label(f"/x{i}") == "other"
    assert api._route_label("/v1/kv/put") == "/v1/kv/put"
    assert api._route_label("/v1/kv/nonsense") == "/v1/kv/{op}"
    assert set(api._labels) == {"/v1/kv/put", "/v1/streams/append", "/metrics"}


def test_routes_are_remembered_for_real_routes_only() -> None:
    import asyncio
    import json

    from statekeeper.node.api.routes import Api
    from statekeeper.node.api.server import Request
    from statekeeper.node.config import local_cluster

    api = Api(local_cluster(secret=""), "node-0", None, None, None)  # routes only
    headers = {"host": "127.0.0.1", "content-type": "application/json"}

    def code(method: str, path: str) -> str | None:
        request = Request(method, path, "", headers, b"{}", "127.0.0.1:9")
        body = json.loads(asyncio.run(api.dispatch(request)).body)
        return body.get("error", {}).get("code")

    for _ in range(2):  # the second time from what the first one remembered
        assert code("GET", "/v1/openapi.json") is None
        assert code("POST", "/v1/kv/nonsense") == "unknown_op"
        assert code("GET", "/v1/kv/put") == "method_not_allowed"
        assert code("POST", "/v1/nothing") == "not_found"
    assert set(api._handlers) == {("GET", "/v1/openapi.json")}


def test_instrumentation_cost_is_small() -> None:
    from statekeeper.node.metrics import bench_instrumentation

    cost = bench_instrumentation(20_000)
    # Loose: a loaded CI machine; the docstring has the real numbers.
    assert cost["request"] < 50
    assert cost["entry"] < 50


# -- statekeeper cluster status --watch ------------------------------------------------------


def test_status_watch_refreshes_until_ctrl_c(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    cli.create_config_if_missing(path, base_port=1)  # nothing listens: nodes are down
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "statekeeper.cluster.cli", "cluster", "status", "--watch"]
        + ["--interval", "0.2", "--config", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # A shell that starts the tests in the background makes SIGINT ignored, and a
        # Python started with it ignored never raises KeyboardInterrupt: restore it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        tables = 0
        deadline = time.monotonic() + 30
        while tables < 2 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            tables += line.split()[:1] == [cli.STATUS_COLUMNS[0]]
        assert tables >= 2, "two refreshes were not printed"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def test_status_watch_rejects_a_bad_interval(tmp_path: Path, capsys) -> None:
    path = tmp_path / "cluster.toml"
    cli.create_config_if_missing(path, base_port=1)
    code = cli.main(["cluster", "status", "--watch", "--interval", "0", "--config", str(path)])
    assert code == 2
    assert "--interval" in capsys.readouterr().err


# -- the pushed metrics, where the work is ---------------------------------------------------


def test_proposer_observes_entry_size_latency_and_failures() -> None:
    import asyncio

    from statekeeper.node import entry
    from statekeeper.node.errors import OpError
    from statekeeper.node.proposer import Proposer
    from statekeeper.node.raft import SubmitError

    m = NodeMetrics()
    sizes: list[int] = []

    def submit(payload, cb):
        sizes.append(len(payload))
        n = len(entry.decode(payload)[1])
        if len(sizes) == 1:
            cb([{"revision": 1}] * n, None)
        else:
            cb(None, SubmitError.NO_LEADER)

    put = {"op": "put", "ns": "a", "key": "k", "value": b"v", "idempotency_key": None}

    async def main():
        p = Proposer(submit, metrics=m)
        await p.write(dict(put))
        try:
            await p.write(dict(put))
        except OpError:
            pass

    asyncio.run(main())
    assert m.entry_size._sum.get() == sum(sizes)
    assert sum(b.get() for b in m.entry_size._buckets) == 2
    # The failed entry is counted as failed, not as a latency.
    assert sum(b.get() for b in m.proposal_duration._buckets) == 1
    assert m.proposals_failed._value.get() == 1


def test_journal_reports_each_fsync(tmp_path: Path) -> None:
    from statekeeper.node.raft.journal import DurableJournal

    seen: list[float] = []
    j = DurableJournal(str(tmp_path / "journal"), fsync="always")
    j.observe_fsync = seen.append
    before = j.fsyncs
    j.add(b"x", 1, 1)
    j.sync()
    j.close()
    assert len(seen) == j.fsyncs - before >= 1
    assert all(s >= 0 for s in seen)


def test_request_tally_exposes_what_prometheus_client_objects_would() -> None:
    """statekeeper_http_requests / _request_duration_seconds are plain ints folded in at
    scrape time (issue 28): the same samples as a Counter and a Histogram given the same
    observations, boundaries included (a duration equal to a bucket's le is in it)."""
    from prometheus_client import CollectorRegistry, Counter, Histogram

    from statekeeper.node.metrics import LATENCY_BUCKETS

    observed = [("/v1/kv/put", 200, 0.001), ("/v1/kv/put", 200, 0.0007), ("/v1/kv/put", 507, 20.0)]
    observed += [("/v1/kv/get", 404, 0.0005), ("/v1/kv/put", 200, 2.5), ("other", 404, 0.0)]
    m = NodeMetrics()
    ref = CollectorRegistry()
    counter = Counter("statekeeper_http_requests", "x", ["route", "code"], registry=ref)
    hist = Histogram(
        "statekeeper_http_request_duration_seconds",
        "x",
        ["route"],
        buckets=LATENCY_BUCKETS,
        registry=ref,
    )
    for route, status, seconds in observed:
        m.observe_request(route, status, seconds)
        counter.labels(route, str(status)).inc()
        hist.labels(route).observe(seconds)

    def samples(families) -> set:
        return {
            (s.name, tuple(sorted(s.labels.items())), None if "_created" in s.name else s.value)
            for f in families
            if f.name.startswith("statekeeper_http_request")
            and f.name != "statekeeper_http_requests_in_flight"
            for s in f.samples
        }

    ours = samples(_scrape(m).values())
    assert ours == samples(ref.collect()) and len(ours) > 20
    m.requests_in_flight += 3  # read by the gauge at scrape time
    assert _value(_scrape(m)["statekeeper_http_requests_in_flight"]) == 3
