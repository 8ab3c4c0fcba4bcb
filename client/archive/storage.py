"""Where archive segments live: :class:`ArchiveStore`, a root URL read and written through
fsspec (``file://``, ``s3://``, ``gs://``, ``az://``, ``memory://`` ...; the cloud ones need
their fsspec package: s3fs, gcsfs, adlfs). The only module of the client that imports
fsspec, and only when a store is made: without the ``archive`` extra that raises an
ImportError saying ``pip install 'statekeeper[archive]'``.

Layout under the root::

    segments/{ns_escaped}/{segment_id}.skseg     the segment file (client/archive/segment.py)
    manifest/{ns_escaped}/{segment_id}.json      its manifest entry (client/archive/manifest.py)

``ns_escaped`` is the namespace percent-encoded with nothing safe but ``-._~`` and
alphanumerics (so a "/" in a namespace is not a directory), and the namespaces "." and
".." as ``%2E`` / ``%2E%2E`` (unescaped they were the directory itself and its parent).

Reading a segment the cluster names (``get(archived="fetch")``, ``archive restore``):
its URL is whatever a writer of the namespace sealed, so :func:`read_segment_url` reads
only under the archive roots this client was configured with (:func:`configured_roots`:
``archive_roots=``, else $STATEKEEPER_ARCHIVE_ROOTS, comma-separated; the root of an
``archive_run`` too), refuses dot segments, queries and control characters
(:class:`~client.errors.ArchiveUrlRefused`), and reads at most the size the cluster recorded
(+1 byte, so a larger file fails its check instead of filling memory).

Durability (:meth:`ArchiveStore.put_durable`), what the archiver's crash safety rests on
(docs/archive.md): on the local filesystem the bytes go to a temporary name in the target
directory, are fsynced, renamed over the target and the directory is fsynced, so after a
crash the file is either absent or complete. On any other backend the object is written
and then read back: its size and sha256 must match what was written ("confirmed by the
backend"); object stores make a completed PUT durable and atomic.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import tempfile
import urllib.parse
from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import ArchiveUrlRefused

__all__ = [
    "ROOTS_ENV",
    "ArchiveStore",
    "ArchiveWriteError",
    "configured_roots",
    "manifest_path",
    "ns_escape",
    "ns_unescape",
    "read_segment_url",
    "root_url",
    "segment_path",
]

_EXTRA = "pip install 'statekeeper[archive]'"
ROOTS_ENV = "STATEKEEPER_ARCHIVE_ROOTS"
# What a segment read is bounded by when the cluster sent no size (a node before the size
# was in its 410 answer): twice the archiver's largest segment payload (archiver.MAX_PAYLOAD).
MAX_UNSIZED_SEGMENT_BYTES = 128 << 20
SEGMENT_SUFFIX = ".skseg"
MANIFEST_SUFFIX = ".json"


class ArchiveWriteError(OSError):
    """A write to the archive could not be confirmed (read back differs)."""


def _fsspec() -> Any:
    try:
        import fsspec
    except ImportError as exc:
        raise ImportError(f"archival needs fsspec: {_EXTRA}") from exc
    return fsspec


def ns_escape(ns: str) -> str:
    name = urllib.parse.quote(ns, safe="")
    if name in (".", ".."):  # a path component would be the dir itself or its parent
        return name.replace(".", "%2E")
    return name or "%00"


def ns_unescape(name: str) -> str:
    return "" if name == "%00" else urllib.parse.unquote(name)


def segment_path(ns: str, segment_id: str) -> str:
    return f"segments/{ns_escape(ns)}/{segment_id}{SEGMENT_SUFFIX}"


def manifest_path(ns: str, segment_id: str) -> str:
    return f"manifest/{ns_escape(ns)}/{segment_id}{MANIFEST_SUFFIX}"


def root_url(root: str) -> str:
    """An archive root as a URL without a trailing "/" (a plain path: a local dir)."""
    if "://" not in root:
        root = "file://" + os.path.abspath(root)
    return root.rstrip("/")


def configured_roots(roots: Iterable[str] | None = None) -> tuple[str, ...]:
    """The archive roots given, else those in $STATEKEEPER_ARCHIVE_ROOTS; may be empty."""
    if roots is None:
        roots = os.environ.get(ROOTS_ENV, "").split(",")
    return tuple(root_url(r.strip()) for r in roots if r.strip())


def _refuse(url: str, why: str) -> ArchiveUrlRefused:
    return ArchiveUrlRefused(
        f"not reading archive segment URL {url[:200]!r}: {why}",
        code="archive_url_refused",
        details={"url": url},
    )


def check_segment_url(url: str, roots: Sequence[str]) -> None:
    """Raise ArchiveUrlRefused unless ``url`` is a plain path under one of ``roots``."""
    if any(ord(c) < 0x21 or c == "\x7f" for c in url) or "?" in url or "#" in url:
        raise _refuse(url, "it has control characters, spaces, a query or a fragment")
    after_scheme = url.split("://", 1)[-1]
    if any(urllib.parse.unquote(p) in (".", "..") for p in after_scheme.split("/")):
        raise _refuse(url, "it has '.' or '..' path segments")
    if not roots:
        raise _refuse(
            url,
            f"no archive root is configured (pass archive_roots= or set {ROOTS_ENV}; "
            "`statekeeper archive restore --archive URL`)",
        )
    if not any(url.startswith(root + "/") for root in roots):
        raise _refuse(url, f"it is under none of the configured archive roots {list(roots)}")


def read_segment_url(url: str, roots: Sequence[str], size: int | None) -> bytes:
    """The bytes of the segment file at ``url`` (as the cluster recorded it), checked by
    :func:`check_segment_url`; at most ``size`` + 1 bytes are read, so a file larger than
    recorded fails the segment's size check without being read whole."""
    check_segment_url(url, roots)
    limit = MAX_UNSIZED_SEGMENT_BYTES if size is None else min(size, MAX_UNSIZED_SEGMENT_BYTES)
    fs, path = _fsspec().core.url_to_fs(url)
    with fs.open(path, "rb") as f:
        return bytes(f.read(limit + 1))


class ArchiveStore:
    """An archive root (see the module docstring); blocking calls."""

    def __init__(self, url: str) -> None:
        fsspec = _fsspec()
        if not url:
            raise ValueError("an archive needs a URL (file:///path, s3://bucket/prefix, ...)")
        self.url = root_url(url)
        self.fs, self.root = fsspec.core.url_to_fs(self.url)
        self.root = self.root.rstrip("/")
        protocol = self.fs.protocol
        protocols = (protocol,) if isinstance(protocol, str) else tuple(protocol)
        self.local = "file" in protocols or "local" in protocols

    def full(self, path: str) -> str:
        return posixpath.join(self.root, path) if self.root else path

    def url_of(self, path: str) -> str:
        """The URL of ``path`` (what the cluster records for a segment)."""
        return f"{self.url}/{path}"

    def put_durable(self, path: str, data: bytes) -> None:
        """Write ``data`` at ``path`` so that it survives a crash once this returns."""
        if self.local:
            self._put_local(self.full(path), data)
            return
        target = self.full(path)
        self.fs.pipe_file(target, data)
        back = bytes(self.fs.cat_file(target))
        if len(back) != len(data) or hashlib.sha256(back).digest() != hashlib.sha256(data).digest():
            raise ArchiveWriteError(
                f"{self.url_of(path)}: read back {len(back)} bytes that "
                f"differ from the {len(data)} written"
            )

    @staticmethod
    def _put_local(target: str, data: bytes) -> None:
        directory = os.path.dirname(target)
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def get(self, path: str) -> bytes:
        """The bytes at ``path``; FileNotFoundError if there are none."""
        return bytes(self.fs.cat_file(self.full(path)))

    def exists(self, path: str) -> bool:
        return bool(self.fs.exists(self.full(path)))

    def list(self, prefix: str) -> list[str]:
        """Paths (relative to the root) of the files under the directory ``prefix``,
        sorted; temporary files of interrupted writes are left out."""
        base = self.full(prefix).rstrip("/")
        if not self.fs.exists(base):
            return []
        out = []
        for p in self.fs.find(base):
            p = p if isinstance(p, str) else str(p)
            rel = p[len(self.root) + 1 :] if self.root and p.startswith(self.root + "/") else p
            rel = rel.lstrip("/")
            if not posixpath.basename(rel).startswith(".tmp-"):
                out.append(rel)
        return sorted(out)

    def delete(self, path: str) -> None:
        """Remove ``path`` (nothing if it is absent)."""
        try:
            self.fs.rm_file(self.full(path))
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return f"ArchiveStore({self.url!r})"
