"""The lease ops' declarations and field kinds: lease_grant, lease_keepalive, lease_revoke,
lease_info, lease_list, the node-internal lease_expire, and put's `lease` / `ttl_ms`
(docs/protocol.md, "Leases"; applied and read by node/store/leases.py).

Like every op they are declared once (`SPECS`, joined into node.ops.core.OPS): the field
kinds below check a field with the protocol's codes and describe it in OpenAPI.

Normalized shapes (raft entries carry the writes', so their msgpack bytes must not change):

    lease_grant      {op, ns, ttl_ms, idempotency_key}
    lease_keepalive  {op, leases: [id, ...]}              (no idempotency key: a renewal
                                                           repeated is harmless, and a
                                                           record per keepalive is not)
    lease_revoke     {op, lease, idempotency_key}
    lease_expire     {op, leases: [id, ...]}              node-internal (INTERNAL_SPECS)
    lease_info       {op, lease}
    lease_list       {op, after, limit}
    put              {op, ns, key, value, prev_kv, idempotency_key} plus `lease` or
                     `ttl_ms` only when given (a put without them keeps its old bytes)

Lease ids are 1, 2, 3, ... (assigned in apply). `lease_expire` is refused on every route:
`validate_op` knows it only when called with `internal=True` (the state machine, which
re-checks every lease it names against the entry's time, so even a forged one could only
expire what is already due).
"""

from __future__ import annotations

from statekeeper.node.config import Limits
from statekeeper.node.errors import ErrorCode, OpError, declare
from statekeeper.node.ops.fields import CHECK_ABSENT, MAX_REVISION, Field, PageLimit, invalid
from statekeeper.node.ops.schemas import int_schema
from statekeeper.node.ops.shared import IDEMPOTENCY_KEY, NS
from statekeeper.node.ops.spec import OpSpec

# The error codes of the lease ops (node/errors.py has the ones every op shares).
ERRORS = declare(
    ErrorCode(
        "lease_not_found",
        404,
        "the lease does not exist: never granted, revoked, or expired (lease_revoke, lease_info, put with `lease`)",
    ),
)

MAX_LEASE_TTL_MS = 86_400_000  # one day
MAX_LEASES_PER_OP = 1000  # lease_keepalive / lease_expire
MAX_LEASE_KEYS_SHOWN = 1000  # lease_info's `keys`


class LeaseId(Field):
    """A lease id: an integer 1..2**63-1 (0 is never a lease)."""

    def check(self, v, limits, in_txn, out):
        if v is None and not self.required:
            return None
        if type(v) is not int or not 1 <= v <= MAX_REVISION:
            raise invalid(f"{self.name} must be a lease id (a positive integer)")
        return v

    def absent(self):
        return CHECK_ABSENT if self.required else None

    def schema(self, limits, wire):
        return int_schema(self.doc, minimum=1, maximum=MAX_REVISION)


class LeaseIds(Field):
    """1..MAX_LEASES_PER_OP lease ids, in the order given (repeats allowed)."""

    _one = LeaseId("lease")

    def check(self, v, limits, in_txn, out):
        if type(v) is not list or not 1 <= len(v) <= MAX_LEASES_PER_OP:
            raise invalid(f"{self.name} must be a list of 1..{MAX_LEASES_PER_OP} lease ids")
        for i, x in enumerate(v):
            if type(x) is not int or not 1 <= x <= MAX_REVISION:
                raise invalid(f"{self.name}[{i}] must be a lease id (a positive integer)")
        return list(v)

    def schema(self, limits, wire):
        return {
            "type": "array",
            "items": self._one.schema(limits, wire),
            "minItems": 1,
            "maxItems": MAX_LEASES_PER_OP,
            "description": self.doc,
        }


class LeaseTTL(Field):
    """A lease's time to live in ms: limits.min_lease_ttl_ms..MAX_LEASE_TTL_MS."""

    def check(self, v, limits, in_txn, out):
        if v is None and not self.required:
            return None
        lo = limits.min_lease_ttl_ms
        if type(v) is not int or not lo <= v <= MAX_LEASE_TTL_MS:
            raise OpError(
                "invalid_argument",
                f"{self.name} must be an integer within {lo}..{MAX_LEASE_TTL_MS} ms "
                f"(min_lease_ttl_ms on this node .. one day), got {v!r}",
            )
        return v

    def absent(self):
        return CHECK_ABSENT if self.required else None

    def schema(self, limits, wire):
        return int_schema(
            f"{self.doc} Within min_lease_ttl_ms ({limits.min_lease_ttl_ms} on this node) "
            f"and {MAX_LEASE_TTL_MS} (one day).",
            minimum=limits.min_lease_ttl_ms,
            maximum=MAX_LEASE_TTL_MS,
        )


# put's lease fields, appended to put's declaration in node/ops/core.py.
PUT_LEASE = LeaseId(
    "lease",
    "Attach the key to this lease (it is deleted when the lease is revoked or expires); "
    "404 `lease_not_found` if the lease does not exist. A put without `lease` detaches "
    "the key from its lease.",
)
PUT_TTL = LeaseTTL(
    "ttl_ms", "Grant the key a lease of its own with this TTL (the result carries `lease`)."
)
PUT_LEASE_EXCLUSIVE = ("lease", ("ttl_ms",))


def put_post(out: dict, limits: Limits) -> None:
    """put: `lease` excludes `ttl_ms`; both are left out of the op when absent (so a put
    without them is the same op, byte for byte, as before leases existed)."""
    lease, ttl = out.pop("lease"), out.pop("ttl_ms")
    if lease is not None and ttl is not None:
        raise invalid("give either lease or ttl_ms, not both")
    if lease is not None:
        out["lease"] = lease
    elif ttl is not None:
        out["ttl_ms"] = ttl


LEASE = LeaseId("lease", "The lease's id.", required=True)
LEASE_IDS = LeaseIds(
    "leases",
    f"Lease ids, 1..{MAX_LEASES_PER_OP}; each is answered on its own (a missing one with "
    "`error: lease_not_found`, the others still renewed).",
    required=True,
)


# The five public lease ops (joined into OPS by node/ops/core.py).
SPECS: tuple[OpSpec, ...] = (
    OpSpec(
        "lease_grant",
        (NS, LeaseTTL("ttl_ms", "The lease's time to live.", required=True), IDEMPOTENCY_KEY),
        "lease_grant op: a new lease in `ns` that expires ttl_ms after the grant unless "
        "kept alive.",
        write=True,
        path="/v1/leases/grant",
    ),
    OpSpec(
        "lease_keepalive",
        (LEASE_IDS,),
        "lease_keepalive op: renew many leases at once (expires = now + ttl).",
        write=True,
        grows=False,
        path="/v1/leases/keepalive",
    ),
    OpSpec(
        "lease_revoke",
        (LEASE, IDEMPOTENCY_KEY),
        "lease_revoke op: delete the lease and every key attached to it, at one revision.",
        write=True,
        grows=False,
        path="/v1/leases/revoke",
    ),
    OpSpec(
        "lease_info",
        (LEASE,),
        "lease_info op: a lease's TTL, expiry and (first 1000) attached keys.",
        write=False,
        path="/v1/leases/info",
    ),
    OpSpec(
        "lease_list",
        (
            LeaseId("after", "Only leases with a larger id (the last id of the previous page)."),
            PageLimit("limit", "At most this many leases per page"),
        ),
        "lease_list op: every lease (all namespaces) in id order, paged.",
        write=False,
        access="admin",
        path="/v1/leases/list",
    ),
)


# Ops only the node itself proposes: no route, refused by validate_op unless internal=True.
INTERNAL_SPECS: tuple[OpSpec, ...] = (
    OpSpec(
        "lease_expire",
        (LEASE_IDS,),
        "lease_expire op (node-internal): revoke those of the leases that are due.",
        write=True,
        grows=False,
        path="/internal/lease_expire",
    ),
)
