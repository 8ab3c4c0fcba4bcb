"""A refusal that follows an attempt of unknown outcome (issue 26, defect 3, client side).

A 507 ("this attempt was not proposed"), 401, 403 or a 500 is true of its own attempt
only: an earlier attempt of the same write that timed out or lost its connection may have
been applied. The call then ends in Timeout(code outcome_unknown) with the refusal as its
cause, as a 503 already did at give-up; the chaos classifier then counts the write as
maybe submitted. Answers that are a verdict on the request itself (invalid, not found, a
failed compare) are kept: every attempt would have got them."""

from __future__ import annotations

import msgpack
import pytest

from statekeeper.chaos.workload import classify_error
from statekeeper.client import ops
from statekeeper.client.errors import (
    Conflict,
    InsufficientStorage,
    InvalidRequest,
    PermissionDenied,
    StatekeeperError,
    Timeout,
)
from statekeeper.client.kv_requests import write_request
from statekeeper.client.responses import connection_error
from statekeeper.client.retry import Backoff, Endpoints, Exchange, RetryPolicy

MP = "application/msgpack"
REFUSED_507 = (
    507,
    {"error": {"code": "insufficient_storage", "message": "this attempt was not proposed"}},
)
DENIED_403 = (403, {"error": {"code": "permission_denied", "message": "no grant"}})
INTERNAL_500 = (500, {"error": {"code": "internal", "message": "bug"}})
SERVER_TIMEOUT = (504, {"error": {"code": "timeout", "message": "may still be applied"}})


def _drive(answers: list, key: str | None = "ik") -> object:
    """One write through an Exchange against scripted answers: (status, body) or a
    connection failure kind ("lost", "timeout", "connect")."""
    req = write_request(ops.put("k", b"v"), "n", key)
    ex = Exchange(
        req, Endpoints(["http://a:1", "http://b:2"]), RetryPolicy(), 10.0,
        clock=lambda: 0.0, rand=lambda: 0.5,
    )
    for answer in answers:
        url, _ = ex.next_attempt()
        if isinstance(answer, str):
            out = ex.failed(connection_error(answer, url))
        else:
            out = ex.received(answer[0], MP, msgpack.packb(answer[1], use_bin_type=True))
        if not isinstance(out, Backoff):
            return out
    raise AssertionError("the exchange wanted more answers")


@pytest.mark.parametrize("unknown", ["lost", "timeout", SERVER_TIMEOUT])
@pytest.mark.parametrize("refusal", [REFUSED_507, DENIED_403, INTERNAL_500])
def test_a_refusal_after_an_unknown_attempt_is_outcome_unknown(unknown, refusal) -> None:
    with pytest.raises(StatekeeperError) as ei:
        _drive([unknown, refusal])
    err = ei.value
    assert isinstance(err, Timeout) and err.code == "outcome_unknown", repr(err)
    assert err.status == refusal[0] and err.attempts == 2 and err.idempotency_key == "ik"
    assert "attempt 1" in err.message and "same idempotency_key" in err.message
    assert isinstance(err.__cause__, StatekeeperError)
    assert err.__cause__.code == refusal[1]["error"]["code"]  # the refusal, as the cause
    # The chaos workload's classifier: maybe submitted, not "proved not submitted".
    assert classify_error(err) == ("outcome_unknown", False)


def test_a_refusal_without_an_unknown_attempt_stays_a_refusal() -> None:
    """Only attempts that provably submitted nothing before it (refused connection, 503):
    the 507 is true of the whole call."""
    no_leader = (503, {"error": {"code": "unavailable", "message": "nothing was applied"}})
    with pytest.raises(InsufficientStorage) as ei:
        _drive(["connect", no_leader, REFUSED_507])
    assert ei.value.attempts == 3
    assert classify_error(ei.value) == ("insufficient_storage", True)
    with pytest.raises(PermissionDenied):
        _drive([DENIED_403])


@pytest.mark.parametrize(
    "verdict, cls",
    [
        ((409, {"error": {"code": "compare_failed", "message": ""}}), Conflict),
        ((400, {"error": {"code": "invalid_argument", "message": ""}}), InvalidRequest),
        ((422, {"error": {"code": "idempotency_key_reused", "message": ""}}), InvalidRequest),
    ],
)
def test_a_verdict_on_the_request_after_an_unknown_attempt_is_kept(verdict, cls) -> None:
    """Apply's answer for the key (a failed compare, a reused key) or the request's own
    invalidity holds for every attempt: it stays what it is."""
    with pytest.raises(cls):
        _drive(["lost", verdict])
