"""node/api/authz.py without a network: authentication (root, tokens, malformed headers, wrong
secrets, expiry, revocation) and authorization (roles x ops, namespace globs, key prefixes,
txn and batch parts, lease namespaces, admin-only ops, minting rules)."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statekeeper.client.auth.tokens import new_token, parse_token, root_token
from statekeeper.node.api.authz import Authorizer, Principal, touched_within
from statekeeper.node.config import Limits
from statekeeper.node.errors import OpError
from statekeeper.node.ops.core import OPS, validate_op
from statekeeper.node.store.auth import TokenRecord

LIMITS = Limits()
SECRET = "cluster-secret"
NOW = 1_000_000


class World:
    """A token view, a clock and leases, as the HTTP layer hands them to the Authorizer."""

    def __init__(self) -> None:
        self.tokens: dict[str, TokenRecord] = {}
        self.now = NOW
        self.leases = {7: "agent-42", 8: "billing"}
        self.authz = Authorizer(
            lambda: self.tokens,
            hashlib.sha256(root_token(SECRET).encode()).digest(),
            lambda: self.now,
            self.leases.get,
        )

    def mint(self, *grants: tuple[str, str, str], expires_ms: int = 0) -> str:
        token, tid, digest = new_token()
        self.tokens = {
            **self.tokens,
            tid: TokenRecord(bytes.fromhex(digest), "t", tuple(grants), NOW, expires_ms),
        }
        return token

    def principal(self, *grants: tuple[str, str, str]) -> Principal:
        return self.authz.authenticate(f"Bearer {self.mint(*grants)}")

    def check(self, principal: Principal, raw: dict) -> None:
        op = validate_op(raw, LIMITS)
        self.authz.authorize(principal, op["op"], op)

    def allowed(self, principal: Principal, raw: dict) -> bool:
        try:
            self.check(principal, raw)
        except OpError as e:
            assert e.code == "permission_denied" and e.status == 403
            return False
        return True


@pytest.fixture
def w() -> World:
    return World()


def _unauth(w: World, header: str | None) -> str:
    with pytest.raises(OpError) as ei:
        w.authz.authenticate(header)
    assert ei.value.code == "unauthenticated" and ei.value.status == 401
    return ei.value.message


def test_root_token(w: World) -> None:
    p = w.authz.authenticate(f"Bearer {root_token(SECRET)}")
    assert p.id == "root"
    for raw in (
        {"op": "compact", "revision": 1},
        {"op": "lease_list"},
        {"op": "auth_token_list"},
        {"op": "put", "ns": "x", "key": "k", "value": b""},
    ):
        assert w.allowed(p, raw)
    assert "wrong root token" in _unauth(w, f"Bearer {root_token('other secret')}")


def test_malformed_missing_unknown_wrong_expired_revoked(w: World) -> None:
    token = w.mint(("agent-42", "", "reader"), expires_ms=NOW + 10)
    tid, secret = parse_token(token)
    assert "no Authorization header" in _unauth(w, None)
    assert "no Authorization header" in _unauth(w, "")
    assert "malformed Authorization" in _unauth(w, f"Basic {token}")
    assert "malformed Authorization" in _unauth(w, "Bearer")
    assert "malformed token" in _unauth(w, "Bearer sk_short_x")
    assert "malformed token" in _unauth(w, f"Bearer {token}\x00")
    wrong = f"sk_{tid}_{'A' * len(secret)}"
    msg = _unauth(w, f"Bearer {wrong}")
    assert "wrong secret" in msg and secret not in msg and tid in msg
    assert w.authz.authenticate(f"bearer {token}").id == tid  # the scheme is case-insensitive
    w.now = NOW + 10
    msg = _unauth(w, f"Bearer {token}")
    assert "expired" in msg and secret not in msg
    w.now = NOW
    w.tokens = {}
    assert "never created, or revoked" in _unauth(w, f"Bearer {token}")


def test_roles_against_read_write_admin_ops(w: World) -> None:
    reader = w.principal(("agent-42", "", "reader"))
    writer = w.principal(("agent-42", "", "writer"))
    admin = w.principal(("agent-42", "", "admin"))
    get = {"op": "get", "ns": "agent-42", "key": "k"}
    put = {"op": "put", "ns": "agent-42", "key": "k", "value": b"v"}
    assert [w.allowed(p, get) for p in (reader, writer, admin)] == [True, True, True]
    assert [w.allowed(p, put) for p in (reader, writer, admin)] == [False, True, True]
    # Cluster-wide admin ops need admin on "*": a namespace admin is not enough.
    for raw in (
        {"op": "compact", "revision": 1},
        {"op": "lease_list"},
        {"op": "auth_token_list"},
        {"op": "retention_list"},
        {"op": "archive_list"},
    ):
        assert not w.allowed(admin, raw), raw
    assert w.allowed(reader, {"op": "retention_list", "ns": "agent-42"})
    assert w.allowed(w.principal(("*", "", "admin")), {"op": "compact", "revision": 1})
    assert not w.allowed(w.principal(("*", "", "writer")), {"op": "compact", "revision": 1})


def test_every_op_declares_its_access() -> None:
    assert {s.access for s in OPS.values()} <= {"read", "write", "admin", "none"}
    assert OPS["compact"].access == OPS["lease_list"].access == "admin"
    assert OPS["auth_token_create"].access == "admin" and OPS["auth_whoami"].access == "none"
    assert all(s.access == "write" for s in OPS.values() if s.write and s.access != "admin")


def test_namespace_patterns(w: World) -> None:
    p = w.principal(("agent-*", "", "writer"))
    assert w.allowed(p, {"op": "get", "ns": "agent-1", "key": "k"})
    assert w.allowed(p, {"op": "get", "ns": "agent-", "key": "k"})
    assert not w.allowed(p, {"op": "get", "ns": "agent", "key": "k"})
    assert not w.allowed(p, {"op": "get", "ns": "billing", "key": "k"})
    exact = w.principal(("agent-4", "", "writer"))
    assert not w.allowed(exact, {"op": "get", "ns": "agent-42", "key": "k"})


def test_key_prefixes(w: World) -> None:
    w.leases[99] = "a"
    p = w.principal(("a", "chat/", "writer"))
    ok = [
        {"op": "put", "ns": "a", "key": "chat/1", "value": b""},
        {"op": "delete", "ns": "a", "key": "chat/old/", "prefix": True},
        {"op": "range", "ns": "a", "prefix": "chat/"},
        {"op": "range", "ns": "a", "start": "chat/a", "end": "chat0"},
        {"op": "append", "ns": "a", "stream": "chat/s", "events": [{"data": b"x"}]},
        {"op": "lock_acquire", "ns": "a", "name": "chat/l", "lease": 99},
        {"op": "list_streams", "ns": "a", "prefix": "chat/x"},
    ]
    for raw in ok:
        assert w.allowed(p, raw), raw
    denied = [
        {"op": "put", "ns": "a", "key": "chat", "value": b""},
        {"op": "get", "ns": "a", "key": "notes"},
        {"op": "delete", "ns": "a", "key": "c", "prefix": True},  # covers more than chat/
        {"op": "range", "ns": "a"},  # the whole namespace
        {"op": "range", "ns": "a", "prefix": "ch"},
        {"op": "range", "ns": "a", "start": "chat/a"},  # no end: past the prefix
        {"op": "range", "ns": "a", "start": "chat/a", "end": "chat1"},
        {"op": "list_streams", "ns": "a"},
        {"op": "lease_grant", "ns": "a", "ttl_ms": 5000},  # keys cannot be told
    ]
    for raw in denied:
        assert not w.allowed(p, raw), raw


@given(prefix=st.text(min_size=1, max_size=6), key=st.text(max_size=8))
def test_a_prefix_grant_never_covers_a_key_outside_it(prefix: str, key: str) -> None:
    assert touched_within(prefix, ("key", key)) == key.startswith(prefix)


_TEXT = st.text(st.characters(blacklist_categories=("Cs",), max_codepoint=0x2FF), max_size=5)


@given(prefix=_TEXT.filter(bool), a=_TEXT, b=_TEXT, k=_TEXT, raw_bounds=st.booleans())
def test_a_prefix_grant_covers_a_range_only_inside_it(
    prefix: str, a: str, b: str, k: str, raw_bounds: bool
) -> None:
    # Bounds near the prefix (often inside it) and anywhere; keys likewise.
    start, end = (a, b) if raw_bounds else (prefix + a, prefix + b)
    for key in (k, prefix + k, start, end):
        inside = start.encode() <= key.encode() < end.encode()
        if inside and touched_within(prefix, ("range", start, end)):
            assert key.startswith(prefix), (prefix, start, end, key)


def test_txn_and_batch_check_every_part(w: World) -> None:
    p = w.principal(("a", "", "writer"), ("b", "", "reader"))
    txn = {
        "op": "txn",
        "ns": "a",
        "compare": [{"ns": "b", "key": "k", "target": "version", "op": "==", "value": 0}],
        "success": [{"op": "put", "key": "x", "value": b""}],
        "failure": [],
    }
    assert w.allowed(p, txn)
    txn["success"].append({"op": "put", "ns": "b", "key": "y", "value": b""})
    assert not w.allowed(p, txn)  # a write into b, where it only reads
    txn["success"].pop()
    txn["compare"][0]["ns"] = "c"
    assert not w.allowed(p, txn)  # a compare reads c


def test_lease_ops_check_the_leases_namespace(w: World) -> None:
    p = w.principal(("agent-42", "", "writer"))
    assert w.allowed(p, {"op": "lease_keepalive", "leases": [7]})
    assert w.allowed(p, {"op": "lease_revoke", "lease": 7})
    assert w.allowed(p, {"op": "lease_info", "lease": 7})
    # An unknown lease (after the HTTP layer's read barrier) is answered as the op would.
    for raw in (
        {"op": "lease_info", "lease": 1234},
        {"op": "lease_revoke", "lease": 1234},
        {"op": "lock_acquire", "ns": "agent-42", "name": "l", "lease": 1234},
    ):
        assert w.authz.unknown_ids(raw["op"], validate_op(raw, LIMITS))
        with pytest.raises(OpError) as ei:
            w.check(p, raw)
        assert ei.value.code == "lease_not_found" and ei.value.status == 404
    assert w.allowed(p, {"op": "lease_keepalive", "leases": [7, 1234]})  # answered per id
    assert not w.authz.unknown_ids("lease_info", {"op": "lease_info", "lease": 7})
    with pytest.raises(OpError) as ei:
        w.check(w.principal(("*", "", "admin")), {"op": "auth_token_revoke", "id": "f" * 16})
    assert ei.value.code == "not_found"
    reader = w.principal(("agent-42", "", "reader"))
    assert w.allowed(reader, {"op": "lease_info", "lease": 7})
    assert not w.allowed(reader, {"op": "lease_keepalive", "leases": [7]})


def test_minting_rules(w: World) -> None:
    def mint(p: Principal, *grants: dict) -> bool:
        _, tid, digest = new_token()
        return w.allowed(
            p, {"op": "auth_token_create", "id": tid, "hash": digest, "grants": list(grants)}
        )

    agents = w.principal(("agent-*", "", "admin"))
    assert mint(agents, {"ns": "agent-42", "role": "writer"})
    assert mint(agents, {"ns": "agent-4*", "role": "admin"})
    assert not mint(agents, {"ns": "billing", "role": "reader"})
    assert not mint(agents, {"ns": "*", "role": "reader"})
    assert not mint(agents, {"ns": "agent-42", "role": "reader"}, {"ns": "b", "role": "reader"})
    chat = w.principal(("a", "chat/", "admin"))
    assert mint(chat, {"ns": "a", "prefix": "chat/x", "role": "writer"})
    assert not mint(chat, {"ns": "a", "role": "reader"})
    writer = w.principal(("agent-42", "", "writer"))
    assert not mint(writer, {"ns": "agent-42", "role": "reader"})
    # Revoking needs admin over every grant of the revoked token.
    victim = parse_token(w.mint(("billing", "", "reader")))[0]
    assert not w.allowed(agents, {"op": "auth_token_revoke", "id": victim})
    mine = parse_token(w.mint(("agent-1", "", "reader")))[0]
    assert w.allowed(agents, {"op": "auth_token_revoke", "id": mine})


def test_watch_needs_read_on_its_keys(w: World) -> None:
    p = w.principal(("a", "chat/", "reader"))
    op = {"op": "watch", "ns": "a", "key": None, "prefix": "chat/", "start": None, "end": None}
    w.authz.authorize(p, "watch", op)
    with pytest.raises(OpError):
        w.authz.authorize(p, "watch", {**op, "prefix": None})
    with pytest.raises(OpError):
        w.authz.authorize(p, "watch", {**op, "ns": "b"})


def test_whoami_needs_only_a_token(w: World) -> None:
    p = w.principal(("a", "x/", "reader"))
    assert w.allowed(p, {"op": "auth_whoami"})
    assert p.info()["grants"] == [{"ns": "a", "prefix": "x/", "role": "reader"}]


def test_denial_names_op_ns_and_access(w: World) -> None:
    p = w.principal(("a", "", "reader"))
    with pytest.raises(OpError) as ei:
        w.check(p, {"op": "put", "ns": "a", "key": "k", "value": b""})
    msg = ei.value.message
    assert "put" in msg and "'a'" in msg and "write" in msg and p.id in msg
    assert ei.value.extra == {"op": "put", "ns": "a"}


# One valid request per op (in namespace "x" when it takes one): every op of node/ops/core.py
# must be listed, so a new op cannot reach the API without a decision about its scope.
EXAMPLES: dict[str, dict] = {
    "put": {"key": "k", "value": b"v"},
    "delete": {"key": "k"},
    "cas": {"key": "k", "value": b"v", "expect": {"version": 1}},
    "txn": {"success": [{"op": "put", "key": "k", "value": b""}]},
    "compact": {"revision": 1},
    "get": {"key": "k"},
    "range": {"prefix": "k"},
    "append": {"stream": "s", "events": [{"data": b"x"}]},
    "read_stream": {"stream": "s"},
    "stream_info": {"stream": "s"},
    "list_streams": {"prefix": "s"},
    "lease_grant": {"ttl_ms": 5000},
    "lease_keepalive": {"leases": [9]},
    "lease_revoke": {"lease": 9},
    "lease_info": {"lease": 9},
    "lease_list": {},
    "lock_acquire": {"name": "l", "lease": 9},
    "lock_release": {"name": "l", "fence": 1},
    "lock_list": {"prefix": "l"},
    "merge": {"key": "k", "type": "gcounter", "state": b"\x80"},
    "crdt_get": {"key": "k"},
    "retention_set": {"prefix": "k", "target": "keys", "keep_last": 1},
    "retention_delete": {"prefix": "k", "target": "keys"},
    "retention_list": {"ns": "x"},
    "retention_status": {"ns": "x"},
    "truncate_stream": {"stream": "s", "before_seq": 2},
    "archive_plan": {"target": "keys", "prefix": "k", "keep_last": 1},
    "archive_seal": {
        "segment": {"id": "seg", "url": "file:///x", "sha256": "0" * 64, "bytes": 1},
        "keys": [["k", 1]],
    },
    "archive_restore": {"segment": "seg", "keys": [["k", b"v"]]},
    "archive_list": {"ns": "x"},
    "auth_token_create": {
        "id": "0" * 16,
        "hash": "0" * 64,
        "grants": [{"ns": "x", "role": "reader"}],
    },
    "auth_token_revoke": {"id": "0" * 16},
    "auth_token_list": {},
    "auth_whoami": {},
    "idempotency_status": {"idempotency_key": "k"},  # a reader of the whole namespace
}
CLUSTER_WIDE = {"compact", "lease_list", "auth_token_list"}


LEASE_NAMING = ("lease_keepalive", "lease_revoke", "lease_info", "lock_acquire")


def test_every_op_is_scoped(w: World) -> None:
    assert set(EXAMPLES) == set(OPS)
    w.leases[9] = "x"
    w.tokens = {"0" * 16: TokenRecord(b"", "v", (("x", "", "reader"),), 0, 0)}
    admin_x = w.principal(("x", "", "admin"))
    elsewhere = w.principal(("y", "", "admin"))
    for name, body in EXAMPLES.items():
        raw = {"op": name, **({"ns": "x"} if OPS[name].has_ns else {}), **body}
        if name in CLUSTER_WIDE:
            assert not w.allowed(admin_x, raw), name
        else:
            assert w.allowed(admin_x, raw), name
        if name in LEASE_NAMING:  # another tenant's lease is not found (issue 27, item 11)
            with pytest.raises(OpError, match="lease_not_found|does not exist"):
                w.check(elsewhere, raw)
        elif name != "auth_whoami":  # needs a token, no grant
            assert not w.allowed(elsewhere, raw), name
        access = OPS[name].access
        if access in ("read", "write") and name not in CLUSTER_WIDE:
            reader = w.principal(("x", "", "reader"))
            assert w.allowed(reader, raw) == (access == "read"), name


def test_a_lease_outside_the_callers_grants_is_not_found(w: World) -> None:
    # Issue 27 item 11: another tenant's lease answered 403 naming its namespace.
    p = w.principal(("agent-42", "", "writer"))
    for raw in (
        {"op": "lease_info", "lease": 8},
        {"op": "lease_revoke", "lease": 8},
        {"op": "lease_keepalive", "leases": [7, 8]},
        {"op": "lock_acquire", "ns": "agent-42", "name": "l", "lease": 8},
    ):
        with pytest.raises(OpError) as ei:
            w.check(p, raw)
        assert ei.value.code == "lease_not_found", raw
        assert "billing" not in ei.value.message and "billing" not in repr(ei.value.extra)


def test_a_created_token_records_its_creator(w: World) -> None:
    # Issue 27 item 6: apply caps a child's expiry at its creator's and revokes it with
    # it; the authorizer binds the op to the caller (whatever the client sent).
    admin = w.principal(("alice", "", "admin"))
    _, tid, digest = new_token()
    raw = {
        "op": "auth_token_create",
        "id": tid,
        "hash": digest,
        "grants": [{"ns": "alice", "role": "admin"}],
    }
    with pytest.raises(OpError, match="unknown field 'parent'"):  # not a request's field
        validate_op({**raw, "parent": "0" * 16}, LIMITS)
    op = {**validate_op(raw, LIMITS), "parent": "0" * 16}
    w.authz.authorize(admin, op["op"], op)
    assert op["parent"] == admin.id
    root = w.authz.authenticate(f"Bearer {root_token(SECRET)}")
    op = {**validate_op(raw, LIMITS), "parent": "0" * 16}
    w.authz.authorize(root, op["op"], op)
    assert "parent" not in op  # the root token is no record: nothing to cap or cascade


@pytest.mark.parametrize(
    ("grants", "code"),
    [
        ([{"ns": f"n{i}", "role": "reader"} for i in range(17)], "too_many_grants"),
        ([{"ns": "a", "prefix": "p" * 257, "role": "reader"}], "grant_prefix_too_long"),
        ([{"ns": f"{i:03}" + "n" * 250, "prefix": "p" * 200, "role": "reader"}
          for i in range(10)], "token_too_large"),
    ],
)
def test_a_token_record_is_bounded(grants: list, code: str) -> None:
    # Issue 27 item 7: 64 grants of 4 KiB prefixes made a ~270 KB record.
    _, tid, digest = new_token()
    raw = {"op": "auth_token_create", "id": tid, "hash": digest, "grants": grants}
    with pytest.raises(OpError) as ei:
        validate_op(raw, LIMITS)
    assert ei.value.code == code and ei.value.status == 400
