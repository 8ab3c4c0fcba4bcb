"""The Coordination page's data (console/views/coordination.py) over in-memory fakes: lock
holder and owner, leases listed by an admin and (a 403) from the namespace's locks,
effects paged with maybe_happened, CRDTs decoded from a range with their replicas."""

from __future__ import annotations

import msgpack

from statekeeper.client.crdt import model
from statekeeper.client.crdt.stored import counts_by_replica, replica_ids, unwrap
from statekeeper.client.effects.ledger import AsyncEffects, Effects
from statekeeper.client.effects.plan import EFFECTS_PREFIX
from statekeeper.client.errors import LeaseNotFound, PermissionDenied
from statekeeper.client.leases.results import LeaseInfo, LeaseList
from statekeeper.client.locks.results import LockInfo, LockList, LockWaiter
from statekeeper.console.views import coordination as view
from tests.unit.test_agent_fake import AsyncMemoryClient, MemoryClient


class Fake(AsyncMemoryClient):
    """The in-memory store plus locks and leases as the API lists them."""

    def __init__(self, locks=(), leases=(), admin=True) -> None:
        super().__init__(MemoryClient("app"))
        self.__dict__.update(locks=list(locks), leases=list(leases), admin=admin)
        self.__dict__["effects"] = AsyncEffects(self)

    async def lock_list(self, prefix=None, *, after=None, limit=None, ns=None):
        sel = [i for i in self.locks if i.name.startswith(prefix or "") and i.name > (after or "")]
        return LockList(sel[:limit], 7, len(sel) > limit)

    async def lease_list(self, *, after=None, limit=None):
        if not self.admin:
            raise PermissionDenied("needs admin", code="permission_denied", status=403)
        sel = [i for i in self.leases if i.lease > (after or 0)]
        return LeaseList(sel[:limit], 8, len(sel) > limit)

    async def lease_info(self, lease):
        for i in self.leases:
            if i.lease == lease:
                return i
        raise LeaseNotFound("gone", code="lease_not_found", status=404)


def _lease(i: int, ns: str = "app") -> LeaseInfo:
    return LeaseInfo(i, ns, 10_000, 99_000, 4_000 + i, [f"k{i}"], False, 8)


async def test_locks_show_the_holder_its_owner_and_page_by_name() -> None:
    held = LockInfo(
        "job", 12, 3, 2, [LockWaiter("w12", 12, 3, "pod-a"), LockWaiter("w15", 15, 4, None)]
    )
    fake = Fake(locks=[held, LockInfo("job2", 20, 5, 1, [LockWaiter("w20", 20, 5, None)])])
    page = await view.locks(fake, limit=1)
    (row,) = page.locks
    assert (row.name, row.holder_fence, row.holder_lease, row.holder_owner, row.count) == (
        "job", 12, 3, "pod-a", 2,
    )  # fmt: skip
    assert page.next_cursor == "job" and page.ns == "app"
    page = await view.locks(fake, cursor=page.next_cursor)
    assert [r.name for r in page.locks] == ["job2"] and page.next_cursor is None


async def test_leases_of_the_namespace_for_an_admin_and_from_locks_otherwise() -> None:
    leases = [_lease(1), _lease(2, "other"), _lease(3), _lease(4)]
    page = await view.leases(Fake(leases=leases), limit=2)
    assert [(r.lease_id, r.remaining_ms, r.keys) for r in page.leases] == [
        (1, 4_001, ("k1",)),
        (3, 4_003, ("k3",)),
    ]
    assert page.complete and page.next_cursor == "3"
    page = await view.leases(Fake(leases=leases), cursor=page.next_cursor)
    assert [r.lease_id for r in page.leases] == [4] and page.next_cursor is None

    lock = LockInfo("job", 12, 3, 1, [LockWaiter("w12", 12, 3, None)])
    page = await view.leases(Fake(locks=[lock], leases=leases, admin=False))
    assert [r.lease_id for r in page.leases] == [3] and not page.complete and page.note


async def test_effects_page_with_state_attempt_and_maybe_happened() -> None:
    fake = Fake(locks=[LockInfo("effect:pay/2", 9, 1, 1, [])])
    store = fake.inner
    for key, state, attempt in (
        ("pay/1", "done", 1),
        ("pay/2", "claimed", 2),
        ("pay/3", "claimed", 1),
    ):
        rec = {"state": state, "attempt": attempt, "fence": attempt, "idempotency_key": key,
               "started_ms": 1, "result": {"ok": b"\x01"} if state == "done" else None}  # fmt: skip
        store.put(EFFECTS_PREFIX + key, msgpack.packb(rec), ns="app")
    page = await view.effects(fake, prefix="pay/", limit=2)
    assert [(r.key, r.state, r.attempt, r.maybe_happened, r.in_progress) for r in page.effects] == [
        ("pay/1", "done", 1, False, False),
        ("pay/2", "claimed", 2, True, True),
    ]
    assert page.effects[0].result == {"ok": {"$bytes": "AQ=="}}
    assert page.next_cursor == "pay/2"
    page = await view.effects(fake, prefix="pay/", cursor=page.next_cursor)
    assert [(r.key, r.maybe_happened, r.in_progress) for r in page.effects] == [
        ("pay/3", True, False)
    ]
    assert page.next_cursor is None
    # the blocking client's ledger pages the same way (issue 31 uses both clients' API)
    assert [r.key for r in Effects(store).list("pay/", ns="app", after="pay/1")] == [
        "pay/2",
        "pay/3",
    ]


def _envelope(t: str, state) -> bytes:
    return msgpack.packb([b"skcrdt", 1, t, state], use_bin_type=True)


async def test_crdts_decoded_from_a_range_with_replicas() -> None:
    fake = Fake()
    counter = model.merge(
        "pncounter", model.pncounter_add(model.empty("pncounter"), "r1", 5),
        model.pncounter_add(model.empty("pncounter"), "r2", -2),
    )  # fmt: skip
    tags = model.orset_add(model.empty("orset"), "r3", "red")
    fake.inner.put("c/a", _envelope("pncounter", counter), ns="app")
    fake.inner.put("c/b", b"plain value", ns="app")
    fake.inner.put("c/c", _envelope("orset", tags), ns="app")
    fake.inner.put("d", _envelope("orset", tags), ns="app")
    page = await view.crdts(fake, prefix="c/", limit=2)
    assert [(r.key, r.type, r.value, r.replicas, r.per_replica) for r in page.crdts] == [
        ("c/a", "pncounter", 3, ("r1", "r2"), {"r1": 5, "r2": -2})
    ]
    assert page.scanned == 2 and page.next_cursor == "c/b"
    page = await view.crdts(fake, prefix="c/", cursor=page.next_cursor)
    assert [(r.key, r.value, r.replicas, r.per_replica) for r in page.crdts] == [
        ("c/c", ["red"], ("r3",), None)
    ]
    assert page.next_cursor is None


def test_unwrap_refuses_what_is_not_a_valid_crdt() -> None:
    assert unwrap(b"plain") is None
    assert unwrap(msgpack.packb([b"other", 1, "orset", {}])) is None
    assert unwrap(_envelope("gcounter", {"r": -1})) is None  # fails model.check
    assert unwrap(_envelope("gcounter", {"r": 2})) == ("gcounter", {"r": 2})
    reg = model.lwwreg_set(model.empty("lwwreg"), "w", "v", 5)
    assert replica_ids("lwwreg", reg) == ("w",) and counts_by_replica("lwwreg", reg) is None
    mv = model.mvreg_set(model.empty("mvreg"), "m", 1)
    assert replica_ids("mvreg", mv) == ("m",)
    m = model.ormap_update(model.empty("ormap"), "x", "k", "gcounter", {"y": 1})
    assert replica_ids("ormap", m) == ("x", "y")
