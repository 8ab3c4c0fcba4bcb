"""The Cluster page's numbers (console/views/cluster.py) from /metrics text, and its
sparklines (console/charts.py), without a cluster."""

from __future__ import annotations

from statekeeper.console.charts import sparkline
from statekeeper.console.views.cluster import MetricHistory, p99_ms, parse_scrape, points

EXPOSITION = """\
# TYPE statekeeper_http_requests counter
statekeeper_http_requests_total{route="/v1/kv/put",code="200"} {puts}
statekeeper_http_requests_total{route="/v1/kv/get",code="200"} 10
statekeeper_http_requests_total{route="/v1/status",code="200"} 99
# TYPE statekeeper_http_request_duration_seconds histogram
statekeeper_http_request_duration_seconds_bucket{route="/v1/kv/put",le="0.001"} {fast}
statekeeper_http_request_duration_seconds_bucket{route="/v1/kv/put",le="0.01"} {puts}
statekeeper_http_request_duration_seconds_bucket{route="/v1/kv/put",le="+Inf"} {puts}
statekeeper_http_request_duration_seconds_count{route="/v1/kv/put"} {puts}
statekeeper_http_request_duration_seconds_sum{route="/v1/kv/put"} 0.1
# TYPE statekeeper_raft_leader_changes counter
statekeeper_raft_leader_changes_total 2
"""


def _text(puts: int, fast: int) -> str:
    return EXPOSITION.replace("{puts}", str(puts)).replace("{fast}", str(fast))


def test_rates_and_p99_between_two_scrapes() -> None:
    a = parse_scrape(_text(100, 100), at=0.0)
    b = parse_scrape(_text(300, 250), at=2.0)  # 200 puts in 2 s, 50 of them slower than 1 ms
    assert (a.puts, a.gets, a.leader_changes) == (100, 10, 2)
    (point,) = points([a, b])
    assert point.put_rate == 100.0 and point.get_rate == 0.0
    assert point.kv_p99_ms == 10.0  # the bucket holding the 99th percentile: le=0.01
    assert point.apply_p99_ms is None  # no proposal in the interval
    assert p99_ms(b.kv_buckets, b.kv_buckets) is None


def test_the_history_is_a_bounded_ring_per_node() -> None:
    now = [0.0]
    history = MetricHistory(kept=3, clock=lambda: now[0])
    for i in range(5):
        now[0] = i * 2.0
        assert history.due("n0")
        history.add("n0", _text(100 + i, 100 + i))
        assert not history.due("n0")
    assert [s.at for s in history.scrapes("n0")] == [4.0, 6.0, 8.0]


def test_sparkline_is_an_svg_element_without_script_or_style() -> None:
    svg = str(sparkline([0, 5, None, 10], width=30, height=10, label='p99 "put"'))
    assert svg.startswith("<svg") and "<polyline" in svg and 'points="0.0,9.0 10.0,5.0' in svg
    assert "style" not in svg and "script" not in svg
    assert "&#34;put&#34;" in svg  # the label is escaped
    assert "<polyline" not in str(sparkline([1]))  # one point: nothing to draw
