"""A call that runs out of retries over several nodes says what each node it tried came
to (issue 30 item 16): with two of three nodes down it said "cannot connect to :8001" (or
node-0's "knows no raft leader", whichever came last) while node-0 answered; it now says
"no leader: 1 of 3 nodes reachable" and names them. Sans-IO: the Exchange decides, both
clients run it (tests/integration/test_no_leader_message.py runs them on a real cluster)."""

from __future__ import annotations

import msgpack
import pytest

from statekeeper.chaos.workload import classify_error
from statekeeper.client.errors import StatekeeperError, Timeout, Unavailable
from statekeeper.client.kv_requests import get_request
from statekeeper.client.responses import connection_error
from statekeeper.client.retry import Backoff, Endpoints, Exchange, RetryPolicy

URLS = ["http://a:1", "http://b:2", "http://c:3"]
NO_LEADER = (503, {"error": {"code": "unavailable", "message": "node-0 knows no raft leader"}})


def _give_up(answer_of, urls=URLS, attempts: int = 6) -> StatekeeperError:
    """Run one read until the exchange gives up; ``answer_of(url)`` is what each attempt
    gets: (status, body) or a connection failure kind."""
    ex = Exchange(
        get_request("k", "n"), Endpoints(urls), RetryPolicy(max_attempts=attempts), 1.0,
        clock=lambda: 0.0, rand=lambda: 0.5,
    )  # fmt: skip
    while True:
        url, _ = ex.next_attempt()
        answer = answer_of(url)
        try:
            if isinstance(answer, str):
                out = ex.failed(connection_error(answer, url))
            else:
                body = msgpack.packb(answer[1], use_bin_type=True)
                out = ex.received(answer[0], "application/msgpack", body)
        except StatekeeperError as err:
            return err
        assert isinstance(out, Backoff)


def test_two_nodes_down_one_without_a_leader_says_no_leader_and_names_them() -> None:
    err = _give_up(lambda url: NO_LEADER if url == "http://a:1" else "connect")
    assert isinstance(err, Unavailable)
    assert err.message.startswith("no leader: 1 of 3 nodes reachable"), err.message
    assert 'http://a:1 answered "node-0 knows no raft leader"' in err.message
    assert "cannot connect to http://b:2, http://c:3" in err.message
    assert err.details["nodes"] == {
        "http://a:1": "unavailable",
        "http://b:2": "connection_failed",
        "http://c:3": "connection_failed",
    }
    assert err.attempts == 6 and isinstance(err.__cause__, Unavailable)


@pytest.mark.parametrize("last_answers", ["a", "b"])
def test_the_summary_does_not_depend_on_which_node_came_last(last_answers) -> None:
    # 5 attempts end at b (a failed endpoint moves the pointer: a, b, c, a, b), 4 at a.
    err = _give_up(
        lambda url: NO_LEADER if url == "http://a:1" else "connect",
        attempts=5 if last_answers == "b" else 4,
    )
    assert err.message.startswith("no leader: 1 of 3 nodes reachable"), err.message
    # Code and status are the last attempt's: callers and the chaos classifier read them.
    assert classify_error(err)[1] is True
    assert err.code == ("connection_failed" if last_answers == "b" else "unavailable")


def test_no_node_reachable() -> None:
    err = _give_up(lambda url: "connect")
    assert err.code == "connection_failed"
    assert err.message.startswith("0 of 3 nodes reachable (cannot connect to http://a:1, ")


def test_a_node_not_tried_is_counted() -> None:
    err = _give_up(lambda url: NO_LEADER if url == "http://a:1" else "connect", attempts=2)
    assert err.message.startswith("no leader: 1 of 3 nodes reachable"), err.message
    assert err.message.endswith("; 1 not tried)")


def test_every_node_answering_keeps_its_own_words() -> None:
    err = _give_up(lambda url: NO_LEADER)
    assert err.message == "node-0 knows no raft leader"


def test_one_endpoint_keeps_its_own_words() -> None:
    err = _give_up(lambda url: "connect", urls=["http://a:1"])
    assert err.message.startswith("cannot connect to http://a:1")


def test_a_timeout_stays_a_timeout() -> None:
    err = _give_up(lambda url: "timeout" if url == "http://c:3" else "connect", attempts=3)
    assert isinstance(err, Timeout) and err.code == "client_timeout"


def _exchange(urls=URLS) -> Exchange:
    return Exchange(get_request("k", "n"), Endpoints(urls), RetryPolicy(max_attempts=2), 1.0)


def test_what_a_node_said_of_the_leader_counts_as_an_answer() -> None:
    """Asked who leads (client/base.py's discovery), node a answered, and no attempt went
    there: the summary counts it reachable, in its words."""
    ex = _exchange(["http://b:2", "http://c:3", "http://a:1"])
    ex.observed("http://A:1/", "follower, leader http://c:3")  # normalized like endpoints
    for _ in range(2):
        url, _ = ex.next_attempt()
        try:
            ex.failed(connection_error("connect", url))
        except Unavailable as err:
            message = err.message
    assert message == (
        'no leader: 1 of 3 nodes reachable (http://a:1 answered "follower, leader '
        'http://c:3"; cannot connect to http://b:2, http://c:3)'
    )


def test_a_status_answer_does_not_hide_an_attempts_http_answer() -> None:
    ex = _exchange()
    url, _ = ex.next_attempt()
    ex.received(*_packed(NO_LEADER))
    ex.observed(url, "follower, leader unknown")
    url, _ = ex.next_attempt()
    with pytest.raises(Unavailable) as ei:
        ex.failed(connection_error("connect", url))
    assert 'http://a:1 answered "node-0 knows no raft leader"' in ei.value.message
    assert ei.value.details["nodes"] == {
        "http://a:1": "unavailable", "http://b:2": "connection_failed",
    }  # fmt: skip


def test_only_a_refused_connection_rules_a_leader_out() -> None:
    ex = _exchange()
    ex.observed("http://a:1", connection_error("connect", "http://a:1"))
    ex.observed("http://b:2", connection_error("timeout", "http://b:2"))
    ex.observed("http://c:3", "leader, leader http://c:3")
    assert ex.refused("http://A:1/") and not ex.refused("http://b:2")
    assert not ex.refused("http://c:3") and not ex.refused("http://elsewhere:9")


def _packed(answer: tuple) -> tuple:
    return answer[0], "application/msgpack", msgpack.packb(answer[1], use_bin_type=True)
