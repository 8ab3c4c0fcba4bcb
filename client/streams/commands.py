"""The stream operations of both clients (docs/protocol.md, "Streams"), defined once like
every operation (see client/commands.py, whose :class:`commands.Commands` inherits them):
``append`` is a write (a batch's too, ``b.append``; in a txn branch ``client.ops.append``),
the rest are reads; ``events`` pages through one revision and ``subscribe`` never ends.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..base import BaseClient, Pages, ScanPages, command, paged
from ..ops import append_op, lease_id, with_fence
from ..results import AppendResult, StreamEvent, StreamInfo, StreamList, StreamPage
from ..wire import check_archived_mode
from .requests import (
    MAX_WAIT,
    Subscription,
    list_streams_request,
    read_stream_request,
    stream_info_request,
)

__all__ = ["StreamCommands"]


class StreamCommands(BaseClient):
    """Stream operations; a transport's ``_write`` and ``_iterate`` run them (see
    :class:`commands.Commands`)."""

    if TYPE_CHECKING:

        def _write(
            self, op: dict[str, Any], ns: str | None, idempotency_key: str | None
        ) -> Any: ...

        def _iterate(self, pages: Pages) -> Any: ...

        def _drive_archive(self, plan: Any) -> Any: ...

    @command
    def append(
        self,
        stream: str,
        events: Any,
        *,
        expect: str | int = "any",
        ns: str | None = None,
        idempotency_key: str | None = None,
        fence: Any = None,
        lease: Any = None,
    ) -> AppendResult:
        """Append events to ``stream`` (created by its first append), atomically, at one
        revision.

        Args:
            stream: the stream's name (like a key).
            events: an iterable of bytes | str | :class:`client.Event` | dict(data, type,
                id, meta); one such value alone is one event. Events with an ``id`` the
                stream already holds are not stored again (``duplicate``).
            expect: ``"any"`` (default), ``"no_stream"``, ``"exists"``, or N: the
                stream's last seq must be N (0: no events yet). Not checked when every
                event is a duplicate, so replaying a log after a crash succeeds.
            ns: namespace; defaults to the client's.
            idempotency_key: see :meth:`put`.
            fence: see :meth:`put` (FenceMismatch: nothing appended).
            lease: a lease id or a :class:`client.Lease` (same namespace): attach the
                stream to it, so revoking it or its expiry deletes the whole stream (all
                its events; an append afterwards starts it anew at seq 1). Moves the
                stream from any other lease; an append without ``lease`` leaves the
                attachment as it is (unlike a put, it does not detach).

        Returns:
            AppendResult(revision, stream, first_seq, last_seq, events) with ``.seqs``
            and ``.duplicates``.

        Raises:
            ExpectationFailed: ``expect`` did not hold (``.last_seq``, ``.exists``);
                nothing was appended.
            InvalidRequest: bad events, too many (``too_many_events``), too large, or an
                event id already stored with another payload (``idempotency_key_reused``).
            LeaseNotFound: ``lease`` does not exist (revoked or expired); nothing appended.
        """
        op = append_op(stream, events, expect)
        if lease is not None:
            op["lease"] = lease_id(lease)
        return self._write(with_fence(op, fence), ns, idempotency_key)

    @command
    def read_stream(
        self,
        stream: str,
        *,
        start: int | None = None,
        direction: str = "forward",
        limit: int | None = None,
        ns: str | None = None,
        revision: int | None = None,
        consistency: str | None = None,
        min_revision: int | None = None,
        continuation: Any = None,
        wait: float | None = None,
        archived: str = "error",
    ) -> StreamPage:
        """Read one page of ``stream``'s events. A missing stream reads as empty.

        Args:
            stream: the stream.
            start: first seq (default: 1 forward, the last seq backward).
            direction: ``"forward"`` (seq >= start, ascending) or ``"backward"``.
            limit: page size (server default 1000).
            ns: namespace; defaults to the client's.
            revision: read the stream as of this store revision.
            consistency: ``"linearizable"`` or ``"serializable"``.
            min_revision: see :meth:`get`.
            continuation: the previous page's ``continuation`` (its revision, next seq and
                direction win).
            wait: long poll, in seconds (at most 60): a forward read at the current
                revision that finds nothing waits up to this long for events.
            archived: a forward read from a seq whose events were moved to the archive
                (docs/archive.md): ``"error"`` raises Archived (``.segment``,
                ``.from_seq``, ``.before_seq``); ``"fetch"`` reads them from the archive
                segment: an ArchivedStreamPage (``.archived`` True, no continuation:
                go on from ``page.events[-1].seq + 1``). Needs the ``archive`` extra.

        Returns:
            StreamPage(events, revision, last_seq, more, continuation). Use
            :meth:`events` to iterate over all pages, :meth:`subscribe` to follow.

        Raises:
            Archived: see ``archived``.
        """
        if archived != "error":
            from ..archive.restore import fetch_stream

            check_archived_mode(archived, ("error", "fetch"))
            read = {
                "direction": direction,
                "revision": revision,
                "consistency": consistency,
                "min_revision": min_revision,
                "continuation": continuation,
            }
            read = {k: v for k, v in read.items() if v is not None}
            return self._drive_archive(fetch_stream(stream, self._ns(ns), start, limit, read))
        return self._execute(
            read_stream_request(
                self._ns(ns),
                stream,
                start=start,
                direction=direction,
                limit=limit,
                revision=revision,
                continuation=continuation,
                consistency=self._consistency(consistency),
                min_revision=min_revision,
                wait=wait,
            )
        )

    @paged
    def events(
        self,
        stream: str,
        *,
        start: int | None = None,
        direction: str = "forward",
        ns: str | None = None,
        revision: int | None = None,
        consistency: str | None = None,
        page_size: int | None = None,
    ) -> Iterator[StreamEvent]:
        """Iterate over ``stream``'s events from ``start``, fetching pages lazily (``async
        for`` on an AsyncClient). All pages are read at the revision of the first one, so
        the iteration sees one consistent snapshot and ends; see :meth:`subscribe` to
        follow the stream."""
        make = functools.partial(
            read_stream_request,
            self._ns(ns),
            stream,
            start=start,
            direction=direction,
            limit=page_size,
        )
        read = {"revision": revision, "consistency": self._consistency(consistency)}
        return self._iterate(ScanPages(make, read, lambda page: page.events))

    @paged
    def subscribe(
        self, stream: str, *, start: int = 1, ns: str | None = None, wait: float = 10.0
    ) -> Iterator[StreamEvent]:
        """Follow ``stream`` from seq ``start``: every event, in seq order, then each new
        one as it is appended (``async for`` on an AsyncClient). Never ends by itself:
        catch-up pages, then long polls of up to ``wait`` seconds (at most 60) each.
        Failures are retried by the client's RetryPolicy; the error that exhausts it is
        raised from the iterator (resume with ``start`` = the last seq seen + 1)."""
        if not 0 < wait <= MAX_WAIT:
            raise ValueError(f"wait must be within (0, {MAX_WAIT:g}] seconds")
        make = functools.partial(read_stream_request, self._ns(ns), stream, wait=wait)
        return self._iterate(Subscription(make, start, self._consistency(None)))

    @command
    def stream_info(
        self,
        stream: str,
        *,
        ns: str | None = None,
        consistency: str | None = None,
        min_revision: int | None = None,
    ) -> StreamInfo:
        """``stream``'s counters: StreamInfo(stream, first_seq, last_seq, count, bytes,
        create_revision, mod_revision, revision).

        Raises:
            StreamNotFound: the stream does not exist (a NotFound).
        """
        return self._execute(
            stream_info_request(
                self._ns(ns),
                stream,
                consistency=self._consistency(consistency),
                min_revision=min_revision,
            )
        )

    @command
    def list_streams(
        self,
        prefix: str | None = None,
        *,
        ns: str | None = None,
        limit: int | None = None,
        continuation: Any = None,
        consistency: str | None = None,
    ) -> StreamList:
        """One page of the namespace's streams (names starting with ``prefix``), in name
        byte order: StreamList(streams, revision, more, continuation); pass
        ``continuation`` back for the next page."""
        return self._execute(
            list_streams_request(
                self._ns(ns),
                prefix,
                limit=limit,
                continuation=continuation,
                consistency=self._consistency(consistency),
            )
        )
