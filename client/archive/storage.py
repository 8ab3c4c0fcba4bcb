"""Where archive segments live: :class:`ArchiveStore`, a root URL read and written through
fsspec (``file://``, ``s3://``, ``gs://``, ``az://``, ``memory://`` ...; the cloud ones need
their fsspec package: s3fs, gcsfs, adlfs). The only module of the client that imports
fsspec, and only when a store is made: without the ``archive`` extra that raises an
ImportError saying ``pip install 'statekeeper[archive]'``.

Layout under the root::

    segments/{ns_escaped}/{segment_id}.skseg     the segment file (client/archive/segment.py)
    manifest/{ns_escaped}/{segment_id}.json      its manifest entry (client/archive/manifest.py)

``ns_escaped`` is the namespace percent-encoded with nothing safe but ``-._~`` and
alphanumerics (so a "/" in a namespace is not a directory).

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
from typing import Any

__all__ = [
    "ArchiveStore",
    "ArchiveWriteError",
    "manifest_path",
    "ns_escape",
    "ns_unescape",
    "read_url",
    "segment_path",
]

_EXTRA = "pip install 'statekeeper[archive]'"
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
    return urllib.parse.quote(ns, safe="") or "%00"


def ns_unescape(name: str) -> str:
    return "" if name == "%00" else urllib.parse.unquote(name)


def segment_path(ns: str, segment_id: str) -> str:
    return f"segments/{ns_escape(ns)}/{segment_id}{SEGMENT_SUFFIX}"


def manifest_path(ns: str, segment_id: str) -> str:
    return f"manifest/{ns_escape(ns)}/{segment_id}{MANIFEST_SUFFIX}"


def read_url(url: str) -> bytes:
    """The bytes of the file at ``url`` (a segment's URL as the cluster recorded it)."""
    fs, path = _fsspec().core.url_to_fs(url)
    return bytes(fs.cat_file(path))


class ArchiveStore:
    """An archive root (see the module docstring); blocking calls."""

    def __init__(self, url: str) -> None:
        fsspec = _fsspec()
        if not url:
            raise ValueError("an archive needs a URL (file:///path, s3://bucket/prefix, ...)")
        if "://" not in url:
            url = "file://" + os.path.abspath(url)
        self.url = url.rstrip("/")
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
