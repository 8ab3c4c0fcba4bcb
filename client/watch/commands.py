"""The watch operation of both clients (docs/protocol.md, "Watch"), defined once like every
operation (see client/commands.py, whose :class:`commands.Commands` inherits it): a
``@paged`` method, so an iterator on Client and an async iterator on AsyncClient, run by
the transport's ``_watch(session)`` over the sans-IO :class:`watch.WatchSession`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..base import BaseClient, paged
from .core import WatchEvent, WatchProgress, WatchSession, watch_request

__all__ = ["WatchCommands"]


class WatchCommands(BaseClient):
    """The watch operation; a transport's ``_watch`` runs it."""

    if TYPE_CHECKING:

        def _watch(self, session: WatchSession) -> Any: ...

    @paged
    def watch(
        self,
        prefix: str | None = None,
        *,
        start_revision: int,
        key: str | None = None,
        start: str | None = None,
        end: str | None = None,
        ns: str | None = None,
        progress: float | None = 1.0,
        prev_kv: bool = False,
        progress_events: bool = False,
    ) -> Iterator[WatchEvent | WatchProgress]:
        """Every change of the keys starting with ``prefix`` (or of ``key``, or of the range
        [``start``, ``end``)) from ``start_revision`` on, in revision order, then each new
        one as it is committed (``async for`` on an AsyncClient). Never ends by itself.

        Give at most one of ``prefix``, ``key`` or ``start``/``end``; none (or
        ``prefix=""``) watches the whole namespace.

        Args:
            prefix: watch the keys starting with this.
            start_revision: the first revision to deliver (required): a read's revision + 1
                to see every change after that read (``client.get(...).revision + 1``), or
                the last revision you handled + 1 to resume.
            key: watch this key only.
            start, end: watch the keys in [start, end) (end exclusive; no end: to the end
                of the namespace).
            ns: namespace; defaults to the client's.
            progress: seconds without a change after which the server sends a progress
                frame (None/0: never). It also bounds how long a dead connection goes
                unnoticed (``timeout`` + ``progress``).
            prev_kv: give each event the key's previous value (``event.prev_kv``).
            progress_events: also yield :class:`WatchProgress` (every change up to its
                revision has been delivered: "caught up").

        Yields:
            WatchEvent(type, kv, prev_kv, revision), one per changed key: no gap and no
            duplicate, also across reconnections. The iterator survives a node failure:
            on a lost connection, a node shutting down, ``unavailable`` or
            ``WatchOverflow`` (read too slowly) it connects to the next endpoint and
            resumes from the last revision it delivered + 1, backing off per the client's
            RetryPolicy (its attempts and deadline count failures since the last frame).

        Raises:
            Compacted: ``start_revision`` (or where the watch had got to) is at or below the
                compaction point (``.compact_revision``): read the current state, then
                watch from that read's revision + 1.
            InvalidRequest: bad arguments (``start_revision`` < 1, two selections, an
                empty range, ``future_revision`` above the current revision + 1).
            Unavailable: the RetryPolicy gave up (no node served the watch).

        Closing the iterator (``break``, ``close()``/``aclose()``) or the client ends the
        watch and its connection.
        """
        make = functools.partial(
            watch_request,
            self._ns(ns),
            key=key,
            prefix=prefix,
            start=start,
            end=end,
            progress=progress,
            prev_kv=prev_kv,
        )
        make(start_revision)  # bad arguments fail on first iteration, before any connection
        session = WatchSession(
            lambda rev: make(rev),
            start_revision,
            self._endpoints,
            self.retry,
            self.timeout,
            progress=progress,
            progress_events=progress_events,
            ns=self._ns(ns),
        )
        return self._watch(session)
