"""Schemathesis against a real 3-node cluster: every route of GET /v1/openapi.json, with
requests generated from the document itself (valid ones and, in negative mode, ones that
violate it). Checks: all of schemathesis's (no 5xx, status code documented, body and
headers match the document, schema-valid requests accepted, schema-violating ones refused).

Bounded for CI: `MAX_EXAMPLES` cases per operation and mode, derandomized (the same cases
every run), no shrinking. Failures are collected instead of raised, so one run counts them
all; `test_zz_no_failures` (last in the module) fails with the list. The cluster must stay
up and answer promptly afterwards (no crash, no hang).

One documented exception to "no 5xx": a `serializable` read whose `min_revision` is above
what this node has applied waits up to the request timeout and then answers 504 `timeout`
(the revision was not reached; docs/protocol.md). A linearizable read never waits for a
revision the cluster has not committed: it answers 400 `future_revision` at once.
"""

from __future__ import annotations

import json
import os
import ssl
import time
import urllib.error
import urllib.request

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from cluster.supervisor import LocalCluster
from node.watch_ops import WATCH_PATH

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

MAX_EXAMPLES = 8
FAILURES: list[str] = []
CASES = {"n": 0}
SLOW: list[str] = []


@pytest.fixture(scope="module")
def st_base(shared_cluster: LocalCluster) -> str:
    return shared_cluster.url(shared_cluster.node_ids[1])


@pytest.fixture(scope="module")
def st_schema(st_base: str):
    # kwargs reach requests: verify the node against the cluster CA (the cluster runs TLS).
    return schemathesis.openapi.from_url(f"{st_base}/v1/openapi.json", verify=_ca())


def _ca() -> str | bool:
    return os.environ.get("STATEKEEPER_CA_FILE") or True


# Disagreements between the document and the server that are still open (issue 15, item 4):
# a needle found in the failure's text -> why. Each is counted and printed; anything else
# fails the test. Remove an entry when it is fixed.
KNOWN: list[tuple[str, str]] = [
    ("continuation", "opaque page tokens: the schema cannot say which strings are valid tokens"),
    ("state is not a valid", "CRDT state blobs are opaque msgpack: validity is not in the schema"),
    ("segment must be", "archive segment ids / objects: the schema is looser than the server"),
    ("must be a list of", "tuple-shaped arrays (keys, streams): the schema is looser"),
    ("must be a string", "tuple-shaped arrays (keys, streams): the schema is looser"),
    ("compare takes", "txn compare value types and ops per target: looser schema"),
    ("became null", "the server reads null as absent for optional fields; the schema says no"),
    ("must not contain NUL", "ns: the schema does not exclude NUL"),
    (
        "64-bit integer range",
        "stream event meta: integers beyond 64 bits are allowed by the schema",
    ),
    ("violates `maxItems`", "keys / streams: the document's maxItems is above the server's"),
    ("violates `prefixItems`", "tuple-shaped arrays: the server accepts what the schema refuses"),
    ("violates `maxLength`", "idempotency_key: the server accepts longer than documented"),
]
KNOWN_SEEN: dict[str, int] = {}

# Codes that depend on the cluster's state, not on the request's shape: a schema-valid
# request may get them (a revision ahead of or behind what the cluster holds).
STATE_DEPENDENT = {"future_revision", "compacted", "archived"}


def _error_code(response) -> str | None:
    try:
        return response.json()["error"]["code"]
    except Exception:
        return None


def _is_documented_timeout(case, response) -> bool:
    if response.status_code != 504:
        return False
    try:
        code = response.json()["error"]["code"]
    except Exception:
        return False
    body = case.body if isinstance(case.body, dict) else {}
    return (
        code == "timeout" and body.get("consistency") == "serializable" and "min_revision" in body
    )


def _run_operation(operation, mode, base: str) -> None:
    # schemathesis.pytest.from_fixture does not work with pytest 9 (request.node._nodeid):
    # drive hypothesis ourselves, one bounded, derandomized run per operation and mode.
    @settings(
        max_examples=MAX_EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case):
        CASES["n"] += 1
        t0 = time.monotonic()
        response = case.call(base_url=base, timeout=30, verify=_ca())
        if time.monotonic() - t0 > 2:
            SLOW.append(f"{operation.label} {time.monotonic() - t0:.1f}s {response.status_code}")
        excluded = []
        if _is_documented_timeout(case, response):
            excluded = [schemathesis.checks.not_a_server_error]
        if _error_code(response) in STATE_DEPENDENT:
            excluded.append(schemathesis.checks.positive_data_acceptance)
        try:
            case.validate_response(response, excluded_checks=excluded)
        except (AssertionError, BaseExceptionGroup, Exception) as e:  # record, keep going
            text = str(e)
            known = next((why for needle, why in KNOWN if needle in text), None)
            if known is not None:
                KNOWN_SEEN[known] = KNOWN_SEEN.get(known, 0) + 1
                return
            FAILURES.append(
                f"[{mode.value}] {operation.label}: {str(e)[:1500]}\n  curl: {case.as_curl_command()}"
            )

    try:
        run()
    except Unsatisfiable:  # nothing to generate in this mode (e.g. negative, no parameters)
        pass


def test_api_conforms(st_schema, st_base: str):
    # The watch stream never ends by itself (a long-lived chunked answer): it has its own
    # tests (tests/integration/test_watch.py, tests/loopback/test_http_stream.py).
    ops = [r.ok() for r in st_schema.get_all_operations() if r.ok().path != WATCH_PATH]
    assert len(ops) > 20
    t0 = time.monotonic()
    for operation in ops:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _run_operation(operation, mode, st_base)
    print(
        f"schemathesis: {len(ops)} operations, {CASES['n']} cases in {time.monotonic() - t0:.0f} s"
    )


def _context() -> ssl.SSLContext:
    return ssl.create_default_context(cafile=os.environ.get("STATEKEEPER_CA_FILE"))


def _post(url: str, body: dict) -> tuple[int, dict, float]:
    req = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=30, context=_context()) as r:
            return r.status, json.loads(r.read()), time.monotonic() - t0
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), time.monotonic() - t0


def test_min_revision_out_of_range_or_ahead(st_base: str):
    """The first schemathesis run's 5xx: min_revision 2^63 waited 5 s and answered 503."""
    for path in ("/v1/kv/get", "/v1/kv/range"):
        body = {"key": "k"} if path.endswith("get") else {"prefix": "k"}
        status, answer, took = _post(st_base + path, {**body, "min_revision": 2**63})
        assert (status, answer["error"]["code"]) == (400, "invalid_argument"), answer
        assert took < 1
        # Linearizable: a revision the cluster has not committed cannot be waited for.
        status, answer, took = _post(st_base + path, {**body, "min_revision": 2**63 - 1})
        assert (status, answer["error"]["code"]) == (400, "future_revision"), answer
        assert took < 2 and "ahead of the cluster" in answer["error"]["message"]
    # Serializable: waits for the revision, then a timeout that says so.
    status, answer, took = _post(
        st_base + "/v1/kv/get", {"key": "k", "consistency": "serializable", "min_revision": 10**12}
    )
    assert (status, answer["error"]["code"]) == (504, "timeout"), answer
    assert "not reached" in answer["error"]["message"]


def test_whole_numbers_written_with_a_fraction_are_integers(st_base: str):
    """JSON Schema's `integer` allows 86400000.0; the server took only 86400000."""
    status, answer, _ = _post(
        st_base + "/v1/kv/put", {"key": "f", "value": "v", "ttl_ms": 86400000.0}
    )
    assert status == 200, answer
    status, answer, _ = _post(st_base + "/v1/kv/get", {"key": "f", "min_revision": 1e0})
    assert status == 200, answer
    status, answer, _ = _post(st_base + "/v1/kv/put", {"key": "f", "value": "v", "ttl_ms": 2500.5})
    assert (status, answer["error"]["code"]) == (400, "invalid_argument"), answer


def test_zz_no_failures(shared_cluster: LocalCluster):
    print(
        f"schemathesis: {CASES['n']} cases, {len(FAILURES)} failures, "
        f"known open: {sum(KNOWN_SEEN.values())} {KNOWN_SEEN}, slow: {SLOW}"
    )
    # Every node is still up and answers promptly.
    for node_id in shared_cluster.node_ids:
        t0 = time.monotonic()
        with urllib.request.urlopen(
            f"{shared_cluster.url(node_id)}/v1/health/live", timeout=5, context=shared_cluster.tls
        ) as r:
            assert r.status == 200
        assert time.monotonic() - t0 < 2
    assert not FAILURES, f"{len(FAILURES)} of {CASES['n']} cases failed:\n" + "\n\n".join(FAILURES)
    json.dumps(CASES)
