"""Error codes (node/errors.py): every family declares its own next to its ops, and the
table they make is the one the wire always had."""

from __future__ import annotations

import pytest

import statekeeper.node.ops.core  # noqa: F401  (imports every op family: each declares its codes)
from statekeeper.client import errors as client_errors
from statekeeper.client.errors import error_class
from statekeeper.node import errors
from statekeeper.node.errors import CODES, STATUS, ErrorCode, OpError, declare, status_for
from statekeeper.node.openapi import document as openapi
from statekeeper.node.ops.locks import ERRORS as LOCK_ERRORS
from statekeeper.node.ops.streams import ERRORS as STREAM_ERRORS

# code -> (HTTP status, the client's exception class), written once from node/errors.py's
# STATUS and client/errors.py's error_class before the families declared their own codes.
WIRE = {
    "archived": (410, "Archived"),
    "client_certificate_required": (401, "TlsError"),
    "compacted": (410, "Compacted"),
    "compare_failed": (409, "Conflict"),
    "crdt_type_mismatch": (409, "CrdtTypeMismatch"),
    "expectation_failed": (409, "ExpectationFailed"),
    "fence_mismatch": (409, "FenceMismatch"),
    "future_revision": (400, "InvalidRequest"),
    "grant_prefix_too_long": (400, "InvalidRequest"),
    "headers_too_large": (431, "StatekeeperError"),
    "host_not_allowed": (421, "StatekeeperError"),
    "idempotency_key_reused": (422, "InvalidRequest"),
    "insufficient_storage": (507, "InsufficientStorage"),
    "internal": (500, "StatekeeperError"),
    "invalid_argument": (400, "InvalidRequest"),
    "invalid_crdt_state": (400, "InvalidRequest"),
    "invalid_request": (400, "InvalidRequest"),
    "invalid_token": (400, "InvalidRequest"),
    "key_not_found": (404, "NotFound"),
    "key_too_large": (413, "InvalidRequest"),
    "lease_not_found": (404, "LeaseNotFound"),
    "lock_held": (409, "LockHeld"),
    "lock_not_held": (404, "LockNotHeld"),
    "malformed_body": (400, "InvalidRequest"),
    "malformed_http": (400, "InvalidRequest"),
    "member_change_pending": (409, "Conflict"),
    "member_exists": (409, "Conflict"),
    "member_is_leader": (409, "Conflict"),
    "member_not_found": (404, "NotFound"),
    "member_unreachable": (409, "Conflict"),
    "method_not_allowed": (405, "InvalidRequest"),
    "not_found": (404, "NotFound"),
    "not_leader": (421, "StatekeeperError"),
    "not_live": (503, "Unavailable"),
    "not_ready": (503, "Unavailable"),
    "origin_not_allowed": (403, "PermissionDenied"),
    "permission_denied": (403, "PermissionDenied"),
    "request_timeout": (408, "StatekeeperError"),
    "request_too_large": (413, "InvalidRequest"),
    "stream_not_found": (404, "StreamNotFound"),
    "timeout": (504, "Timeout"),
    "token_exists": (409, "Conflict"),
    "token_too_large": (400, "InvalidRequest"),
    "too_many_connections": (503, "Unavailable"),
    "too_many_events": (413, "InvalidRequest"),
    "too_many_grants": (400, "InvalidRequest"),
    "too_many_ops": (413, "InvalidRequest"),
    "too_many_policies": (413, "InvalidRequest"),
    "too_many_watches": (429, "InvalidRequest"),
    "transfer_refused": (409, "Conflict"),
    "unauthenticated": (401, "Unauthenticated"),
    "unavailable": (503, "Unavailable"),
    "unknown_op": (400, "InvalidRequest"),
    "unknown_field": (400, "InvalidRequest"),
    "unsupported_media_type": (415, "InvalidRequest"),
    "value_too_large": (413, "InvalidRequest"),
}


def test_the_wire_table_is_unchanged():
    assert {code: c.status for code, c in CODES.items()} == {k: v[0] for k, v in WIRE.items()}
    assert STATUS == {k: v[0] for k, v in WIRE.items()}
    for code, (status, cls) in WIRE.items():
        assert status_for(code) == OpError(code).status == status, code
        assert error_class(code, status) is getattr(client_errors, cls), code


def test_every_code_says_when_it_is_answered():
    assert openapi.ERROR_WHEN.keys() == CODES.keys()
    assert all(c.when and c.code == code for code, c in CODES.items())


def test_families_declare_their_codes_next_to_their_ops():
    assert {c.code for c in STREAM_ERRORS} == {
        "stream_not_found", "too_many_events", "expectation_failed",
    }  # fmt: skip
    assert {c.code for c in LOCK_ERRORS} == {"lock_not_held", "fence_mismatch", "lock_held"}
    assert all(CODES[c.code] is c for c in (*STREAM_ERRORS, *LOCK_ERRORS))


def test_a_code_declared_twice_is_refused_and_changes_nothing():
    before = dict(CODES)
    with pytest.raises(ValueError, match="'lease_not_found' is declared twice"):
        declare(ErrorCode("brand_new", 400, "x"), ErrorCode("lease_not_found", 410, "again"))
    with pytest.raises(ValueError, match="declared twice"):
        declare(errors.CORE_ERRORS[0])
    assert CODES == before and "brand_new" not in STATUS


def test_a_status_must_be_an_http_status():
    with pytest.raises(ValueError, match="not an HTTP status"):
        declare(ErrorCode("odd_code", 42, "x"))
    assert "odd_code" not in CODES
