"""The Operations page: the cluster's members, the backup download, the retention policies
with what they hold and would free, and the archive segments (console/views/operations.py
has the data).

The backup download (GET /ui/operations/backup) streams GET /v1/admin/backup to the
browser with the user's own token (AsyncClient.backup): the console holds at most the
stream connection's 1 MiB read buffer plus one piece in flight, never the file (the
node's StreamedResponse asks for the next piece only while the browser's socket drains).
It is offered only to a token that may take one (BackupLink.allowed: admin of every
namespace); any other token that asks anyway gets the API's 403 as a page.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator

from statekeeper.client.errors import PermissionDenied
from statekeeper.console.context import PageContext
from statekeeper.console.pages.coordination import section
from statekeeper.console.views import operations as view
from statekeeper.node.api.server import Response, StreamedResponse

TITLE = "Operations"
PATH = "/ui/operations"
BACKUP = PATH + "/backup"


async def _retention(ctx: PageContext, ns: str, limit: int) -> view.RetentionPage:
    """The policies with what they hold and free; without those when the token may not
    read the status (it scans what every policy covers) but may list the policies."""
    cursor = ctx.query.get("retention_cursor") or None
    try:
        return await view.retention(ctx.client, ns=ns, limit=limit, cursor=cursor)
    except PermissionDenied:
        return await view.retention(
            ctx.client, ns=ns, limit=limit, cursor=cursor, with_status=False
        )


async def page(ctx: PageContext) -> Response:
    ns = ctx.namespace()
    limit, _ = ctx.page_args()
    members_cursor = ctx.query.get("members_cursor") or None
    segments_cursor = ctx.query.get("segments_cursor") or None
    results = await asyncio.gather(
        section(view.members(ctx.client, limit=limit, cursor=members_cursor)),
        section(view.backup(ctx.client)),
        section(_retention(ctx, ns, limit)),
        section(view.archive_segments(ctx.client, ns=ns, limit=limit, cursor=segments_cursor)),
    )
    (members, members_error), (backup, backup_error) = results[0], results[1]
    (retention, retention_error), (segments, segments_error) = results[2], results[3]
    return ctx.render(
        "operations.html",
        ns=ns,
        members=members,
        members_error=members_error,
        backup=backup,
        backup_error=backup_error,
        backup_url=BACKUP,
        retention=retention,
        retention_error=retention_error,
        segments=segments,
        segments_error=segments_error,
        page_url=lambda **q: ctx.url(PATH, ns=ns, **q),
    )


async def _rest(first: bytes, pieces: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
    try:
        yield first
        async for piece in pieces:
            yield piece
    finally:
        await pieces.aclose()  # type: ignore[attr-defined]


async def backup(ctx: PageContext) -> Response | StreamedResponse:
    """The backup file as the API streams it. The first piece is read before answering,
    so a refusal (403 for a token that is not admin everywhere) becomes the error page,
    not a broken download."""
    pieces = ctx.client.backup()
    try:
        first = await anext(pieces)
    except StopAsyncIteration:
        first = b""
    except BaseException:
        await pieces.aclose()
        raise
    name = time.strftime("statekeeper-%Y%m%d-%H%M%S.skb", time.gmtime())
    headers = (("Content-Disposition", f'attachment; filename="{name}"'),)
    return StreamedResponse(200, view.BACKUP_CONTENT_TYPE, _rest(first, pieces), headers)


ROUTES = [("GET", PATH, page), ("GET", BACKUP, backup)]
# A GET that acts: ConsoleApp writes an audit line for it as for every POST.
AUDITED = (BACKUP,)
