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
