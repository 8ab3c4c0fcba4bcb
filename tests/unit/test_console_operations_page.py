"""The Operations page's routes (console/pages/operations.py) over a fake client: members,
retention with what it holds and frees, segments; the backup offered to an admin of every
namespace only; the download streams the API's pieces as an attachment, pulling them only
as they are sent, and a refusal becomes the API's 403 as a page."""

from __future__ import annotations

import re

from statekeeper.client.errors import PermissionDenied
from statekeeper.node.api.server import StreamedResponse
from tests.unit.test_console_coordination_page import _req, logged_in
from tests.unit.test_console_views_operations import Fake

ADMIN = ({"ns": "*", "prefix": "", "role": "admin"},)
READER = ({"ns": "app", "prefix": "", "role": "reader"},)


class PageFake(Fake):
    def __init__(self, grants=ADMIN, pieces=(b"SKB1", b"body"), status_denied=False) -> None:
        super().__init__(grants)
        self.pieces, self.pulled, self.status_denied = list(pieces), 0, status_denied
        self.closed_stream = False

    async def close(self) -> None:
        pass

    async def retention_status(self, *, ns):
        if self.status_denied:
            raise PermissionDenied("needs admin", code="permission_denied", status=403)
        return await super().retention_status(ns=ns)

    async def backup(self):
        if ("*", "admin") not in {(g["ns"], g["role"]) for g in self.me.grants}:
            raise PermissionDenied(
                "backup needs admin on every namespace", code="permission_denied", status=403
            )
        try:
            for piece in self.pieces:
                self.pulled += 1
                yield piece
        finally:
            self.closed_stream = True


async def test_members_retention_segments_and_the_backup_link_for_an_admin() -> None:
    app, cookie = await logged_in(PageFake())
    resp = await app.handle(_req("GET", "/ui/operations", cookie=cookie))
    html = resp.body.decode()
    assert resp.status == 200, html
    assert re.findall(r'data-member="([^"]+)"', html) == ["n1", "n2", "n3"]
    assert "<strong>leader</strong>" in re.search(r'data-member="n2">(.*?)</tr>', html, re.S)[1]
    policy = re.search(r'data-policy="keys:agent/">(.*?)</tr>', html, re.S)[1]
    assert "bytes 500 · groups 1 · keys 5" in policy and "bytes 300 · keys 3" in policy
    assert 'data-segment="s1"' in html
    assert 'href="/ui/operations/backup" id="backup-download"' in html


async def test_a_reader_is_not_offered_the_backup_and_sees_policies_without_status() -> None:
    app, cookie = await logged_in(PageFake(READER, status_denied=True))
    html = (await app.handle(_req("GET", "/ui/operations", cookie=cookie))).body.decode()
    assert "backup-download" not in html and 'id="backup-refused"' in html
    policy = re.search(r'data-policy="keys:agent/">(.*?)</tr>', html, re.S)[1]
    assert '<td class="holds">–</td>' in policy


async def test_the_backup_streams_as_an_attachment_pulling_pieces_as_they_go() -> None:
    fake = PageFake(pieces=[b"SKB1", b"a" * 10, b"b" * 10])
    app, cookie = await logged_in(fake)
    resp = await app.handle(_req("GET", "/ui/operations/backup", cookie=cookie))
    assert isinstance(resp, StreamedResponse) and resp.status == 200
    assert resp.content_type == "application/vnd.statekeeper.backup"
    disposition = dict(resp.headers)["Content-Disposition"]
    assert re.fullmatch(r'attachment; filename="statekeeper-\d{8}-\d{6}\.skb"', disposition)
    assert ("Content-Security-Policy" in dict(resp.headers)) and fake.pulled == 1
    body = [piece async for piece in resp.chunks]
    assert b"".join(body) == b"SKB1" + b"a" * 10 + b"b" * 10 and fake.closed_stream


async def test_a_refused_backup_is_the_apis_403_as_a_page() -> None:
    app, cookie = await logged_in(PageFake(READER))
    resp = await app.handle(_req("GET", "/ui/operations/backup", cookie=cookie))
    assert resp.status == 403 and "backup needs admin on every namespace" in resp.body.decode()
