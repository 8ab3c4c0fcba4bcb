"""The Operations page's data (console/views/operations.py) over a fake client: members
paged with the leader, the backup link's permission from whoami's grants, retention
policies joined with their status, segments paged by the API's continuation."""

from __future__ import annotations

from statekeeper.client.auth.commands import TokenInfo
from statekeeper.console.views import operations as view

STATUS = {
    "leader": "n2",
    "revision": 40,
    "storage": {"usage_bytes": 1234},
    "members": [
        {"id": "n3", "url": "https://h:3", "raft_address": "h:13"},
        {"id": "n1", "url": "https://h:1", "raft_address": "h:11"},
        {"id": "n2", "url": "https://h:2", "raft_address": "h:12"},
    ],
}
POLICY = {"ns": "app", "target": "keys", "prefix": "agent/", "keep_last": 2, "keep_every": None,
          "max_age_s": None, "within": "ckpt", "create_revision": 3, "mod_revision": 3}  # fmt: skip


class Fake:
    ns = "app"

    def __init__(self, grants=(), token_id="t1") -> None:
        self.me = TokenInfo(token_id, "n", tuple(grants), 0, 0)
        self.calls: list[tuple] = []

    async def status(self):
        return STATUS

    async def auth_whoami(self):
        return self.me

    async def retention_list(self, *, ns, limit, continuation):
        self.calls.append(("retention_list", ns, limit, continuation))
        return {"revision": 9, "policies": [POLICY], "more": True, "continuation": "c1"}

    async def retention_status(self, *, ns):
        self.calls.append(("retention_status", ns))
        held = {**POLICY, "holds": {"groups": 1, "keys": 5, "bytes": 500},
                "frees": {"keys": 3, "bytes": 300}}  # fmt: skip
        return {"policies": [held], "last_gc": {"app": None},
                "history": {"compact_revision": 7, "history_revisions": 1000},
                "idempotency": {"idempotency_seconds": 600}}  # fmt: skip

    async def archive_list(self, *, ns, limit, continuation):
        seg = {"ns": ns, "id": "s1", "url": "file:///a/s1", "sha256": "0" * 64, "bytes": 10,
               "sealed_revision": 5, "keys": 3, "events": 0}  # fmt: skip
        return {"revision": 9, "segments": [seg], "more": False}


async def test_members_in_id_order_with_the_leader_paged() -> None:
    page = await view.members(Fake(), limit=2)
    assert [(m.id, m.is_leader) for m in page.members] == [("n1", False), ("n2", True)]
    assert page.leader_id == "n2" and page.next_cursor == "n2"
    rest = await view.members(Fake(), cursor=page.next_cursor)
    assert [m.id for m in rest.members] == ["n3"] and rest.next_cursor is None


async def test_backup_link_allowed_only_for_admin_of_every_namespace() -> None:
    everywhere = {"ns": "*", "role": "admin", "prefix": ""}
    link = await view.backup(Fake([everywhere]))
    assert (link.path, link.allowed, link.store_bytes, link.revision) == (
        "/v1/admin/backup", True, 1234, 40,
    )  # fmt: skip
    assert not (await view.backup(Fake([{"ns": "app", "role": "admin", "prefix": ""}]))).allowed
    assert not (await view.backup(Fake([{**everywhere, "prefix": "a/"}]))).allowed
    assert (await view.backup(Fake(token_id=None))).allowed  # auth disabled


async def test_retention_joins_list_and_status() -> None:
    fake = Fake()
    page = await view.retention(fake, limit=1000)
    (p,) = page.policies
    assert (p.prefix, p.within, p.holds["keys"], p.frees["bytes"]) == ("agent/", "ckpt", 5, 300)
    assert page.next_cursor == "c1" and page.compact_revision == 7
    assert page.idempotency_seconds == 600 and page.last_gc is None
    assert fake.calls[0] == ("retention_list", "app", 500, None)  # limit bounded
    bare = await view.retention(Fake(), with_status=False)
    assert bare.policies[0].holds is None and bare.compact_revision is None


async def test_archive_segments_page() -> None:
    page = await view.archive_segments(Fake())
    (s,) = page.segments
    assert (s.id, s.keys, s.restored_keys, page.next_cursor) == ("s1", 3, 0, None)
