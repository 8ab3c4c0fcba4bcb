"""The archival operations of both clients (docs/archive.md; docs/protocol.md,
"Archival"), defined once like every operation (client/commands.py's
:class:`commands.Commands` inherits them).

The node's four ops, as they are: ``archive_plan`` (read: what inline retention rules
would archive), ``archive_seal`` (write: delete what was copied into a segment and leave
tombstones naming it), ``archive_restore_op`` (write: put archived data back) and
``archive_list`` (read: the cluster's segment records). Results are the node's answers as
dicts.

And the high-level ones, plans of client/archive/archiver.py run over this client:
``archive_run`` (plan, copy to the archive, seal: the whole ``statekeeper archive run``)
and ``archive_restore`` (read a segment back and restore it). ``get`` and ``read_stream``
take ``archived="error" | "fetch" | "restore"`` (client/commands.py and
client/streams/commands.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..base import BaseClient, command
from ..responses import decode_ok
from ..retention.commands import parse_age
from ..wire import check_archived_mode, new_idempotency_key, post, read_options

__all__ = ["ArchiveCommands"]


def _request(path: str, body: dict[str, Any], op: str, ns: str | None, ik: str | None = None):
    def parse(status: int, ctype: str | None, raw: bytes) -> dict[str, Any]:
        return decode_ok(status, ctype, raw, ns)

    return post(path, body, parse, op, ik)


def _rules(keep_last: Any, keep_every: Any, max_age: Any, within: Any) -> dict[str, Any]:
    rules: dict[str, Any] = {}
    if keep_last is not None:
        rules["keep_last"] = keep_last
    if keep_every is not None:
        rules["keep_every"] = keep_every
    if max_age is not None:
        rules["max_age_s"] = parse_age(max_age)
    if within is not None:
        rules["within"] = within
    return rules


class ArchiveCommands(BaseClient):
    """Archival: the node's ops and the archiver's plans."""

    def _drive_archive(
        self, plan: Any, store: Any = None, progress: Callable[..., Any] | None = None
    ) -> Any:
        """Run an archiver plan over this client (an awaitable of its result on an
        AsyncClient); :class:`commands.Commands` and ``AsyncCommands`` implement it."""
        raise NotImplementedError

    @command
    def archive_plan(
        self,
        prefix: str,
        *,
        target: str = "keys",
        keep_last: int | None = None,
        keep_every: int | None = None,
        max_age: Any = None,
        max_age_s: int | None = None,
        within: str | None = None,
        limit: int | None = None,
        ns: str | None = None,
        consistency: str | None = None,
        min_revision: int | None = None,
    ) -> dict[str, Any]:
        """What retention rules given inline would delete, which is what an archive run
        archives (no policy is stored; stored ones are not consulted): {revision, keys:
        [[key, mod_revision, value_len]], streams: [[stream, first_seq, before_seq]],
        more}. ``max_age`` as for retention_set (or whole seconds as ``max_age_s``);
        ``limit`` 1..500 items (default 500)."""
        ns = self._ns(ns)
        body: dict[str, Any] = {"ns": ns, "target": target, "prefix": prefix}
        body.update(_rules(keep_last, keep_every, max_age, within))
        if max_age_s is not None:
            body["max_age_s"] = max_age_s
        if limit is not None:
            body["limit"] = limit
        read_options(body, None, self._consistency(consistency), min_revision)
        return self._execute(_request("/v1/archive/plan", body, "archive_plan", ns))

    @command
    def archive_seal(
        self,
        segment: dict[str, Any],
        *,
        keys: Iterable[Iterable[Any]] = (),
        streams: Iterable[Iterable[Any]] = (),
        ns: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Seal items copied into ``segment`` ({id, url, sha256, bytes}): each key of
        ``keys`` ([key, mod_revision]) still at that mod_revision is deleted and a
        tombstone naming the segment written; each stream range ([stream, from_seq,
        before_seq]) still starting at from_seq is truncated and a tombstone written.
        Others are skipped. {revision, segment, sealed_keys, sealed_events, skipped}."""
        ns = self._ns(ns)
        ik = idempotency_key or new_idempotency_key()
        body = {
            "ns": ns,
            "segment": dict(segment),
            "keys": [list(k) for k in keys],
            "streams": [list(s) for s in streams],
            "idempotency_key": ik,
        }
        return self._execute(_request("/v1/archive/seal", body, "archive_seal", ns, ik))

    @command
    def archive_restore_op(
        self,
        segment: str,
        *,
        keys: Iterable[Iterable[Any]] = (),
        streams: Iterable[Iterable[Any]] = (),
        ns: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """The raw restore op (``archive_restore`` reads the segment and calls this):
        ``keys`` [[key, value]], ``streams`` [[stream, [[seq, data, type, time_ms,
        revision, id, meta], ...]]]. {revision, segment, restored_keys, restored_events,
        skipped}."""
        ns = self._ns(ns)
        ik = idempotency_key or new_idempotency_key()
        body = {
            "ns": ns,
            "segment": segment,
            "keys": [list(k) for k in keys],
            "streams": [[s, [list(e) for e in evs]] for s, evs in streams],
            "idempotency_key": ik,
        }
        return self._execute(_request("/v1/archive/restore", body, "archive_restore", ns, ik))

    @command
    def archive_list(
        self,
        *,
        ns: str | None = None,
        all_namespaces: bool = False,
        limit: int | None = None,
        continuation: str | None = None,
        consistency: str | None = None,
        min_revision: int | None = None,
    ) -> dict[str, Any]:
        """One page of the cluster's archive segment records (of ``ns``, or of every
        namespace with ``all_namespaces=True``): {revision, segments: [{ns, id, url,
        sha256, bytes, sealed_revision, keys, events, restored_keys, restored_events}],
        more, continuation?}."""
        body: dict[str, Any] = {} if all_namespaces else {"ns": self._ns(ns)}
        if limit is not None:
            body["limit"] = limit
        if continuation is not None:
            body["continuation"] = continuation
        read_options(body, None, self._consistency(consistency), min_revision)
        return self._execute(_request("/v1/archive/list", body, "archive_list", None))

    @command
    def archive_run(
        self,
        prefix: str,
        *,
        to: str,
        target: str = "keys",
        keep_last: int | None = None,
        keep_every: int | None = None,
        max_age: Any = None,
        within: str | None = None,
        max_segments: int | None = None,
        ns: str | None = None,
        progress: Callable[[str, dict[str, Any]], Any] | None = None,
    ) -> dict[str, Any]:
        """Archive what these retention rules would delete under ``prefix`` into the
        archive at ``to`` (a URL: file:///dir, s3://bucket/prefix, ...; needs the
        ``archive`` extra): segment by segment, plan, copy into a segment file, make it
        and its manifest durable, then seal (docs/archive.md has the crash-safety
        argument). Items that change meanwhile are left out (``skipped``).

        ``progress(step, info)`` is called at each step ("planned", "segment-written",
        "manifest-written", "sealed"). Returns {segments, sealed_keys, sealed_events,
        skipped, bytes}."""
        from . import archiver
        from .storage import ArchiveStore

        ns = self._ns(ns)
        check_archived_mode(target, ("keys", "streams"))
        store = ArchiveStore(to)
        plan = archiver.run_plan(
            ns=ns,
            target=target,
            prefix=prefix,
            rules=_rules(keep_last, keep_every, max_age, within),
            store_url=store.url_of,
            clock_ms=lambda: time.time_ns() // 1_000_000,
            random_bytes=os.urandom,
            max_segments=max_segments,
        )
        return self._drive_archive(plan, store, progress)

    @command
    def archive_restore(
        self,
        segment: str,
        *,
        keys: Iterable[str] | None = None,
        streams: Iterable[str] | None = None,
        ns: str | None = None,
    ) -> dict[str, Any]:
        """Restore archived data of ``segment`` (all of it, or only ``keys`` / ``streams``):
        the segment file is read from where the cluster recorded it and verified
        (ArchiveCorrupt otherwise), then put back in chunks. A key comes back with a new
        revision (version 1); stream events come back byte-identical with their original
        revisions. A stream archived in several segments is restored newest segment first.
        ``ns`` None: the segment is looked up in every namespace. Returns {segment, ns,
        restored_keys, restored_events, skipped, revision}."""
        from .restore import restore_plan

        plan = restore_plan(
            segment,
            ns=ns,
            keys=None if keys is None else list(keys),
            streams=None if streams is None else list(streams),
        )
        return self._drive_archive(plan)
