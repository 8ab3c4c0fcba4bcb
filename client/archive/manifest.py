"""Manifest entries of an archive: one small JSON file per segment, written after the
segment file is durable and before the cluster seals anything into it (client/archive/
archiver.py). Pure: building, encoding, decoding entries and comparing an archive with
the cluster's segment records (``archive list --orphans``).

An entry: ``{"segment", "path", "sha256", "bytes", "ns", "created_ms", "revision",
"keys": [names], "streams": [[stream, from_seq, before_seq], ...]}`` (``path``: the
segment file's path under the archive root). It says what a segment was written to hold;
what was actually sealed into it is the cluster's b"S" record (a seal skips items that
changed). So:

- a manifest (and file) whose segment has no record: the run stopped (or every item
  changed) before a seal: an *orphan* (``unsealed``): no key points at it, it may be
  deleted;
- a record whose file is missing or whose manifest is missing: the archive lost data the
  cluster still points at (``missing_file``) or its index (``missing_manifest``): report
  loudly, never delete;
- a segment file with no manifest and no record (``stray_file``): a run stopped between
  writing the segment and its manifest: an orphan too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["decode_entry", "encode_entry", "entry", "orphans"]

_FIELDS = ("segment", "path", "sha256", "bytes", "ns", "created_ms", "revision", "keys", "streams")


def entry(
    segment: str,
    path: str,
    sha256: str,
    size: int,
    ns: str,
    created_ms: int,
    revision: int,
    keys: Sequence[str],
    streams: Sequence[Sequence[Any]],
) -> dict[str, Any]:
    """A manifest entry (see the module docstring)."""
    return {
        "segment": segment,
        "path": path,
        "sha256": sha256,
        "bytes": size,
        "ns": ns,
        "created_ms": created_ms,
        "revision": revision,
        "keys": list(keys),
        "streams": [[str(s), int(a), int(b)] for s, a, b in streams],
    }


def encode_entry(e: Mapping[str, Any]) -> bytes:
    """The entry as UTF-8 JSON (sorted keys, so the same entry is the same bytes)."""
    return json.dumps(dict(e), sort_keys=True, ensure_ascii=False).encode("utf-8")


def decode_entry(raw: bytes) -> dict[str, Any]:
    """An entry from its JSON; ValueError if it is not one."""
    e = json.loads(raw.decode("utf-8"))
    if not isinstance(e, dict) or any(f not in e for f in _FIELDS):
        raise ValueError("not a manifest entry")
    return e


def orphans(
    manifests: Iterable[Mapping[str, Any]],
    segment_files: Iterable[tuple[str, str]],
    records: Iterable[Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """What the archive and the cluster disagree on, sorted by (ns, segment).

    Args:
        manifests: the archive's manifest entries.
        segment_files: (ns, segment id) of every segment file in the archive.
        records: the cluster's segment records (archive_list's ``segments``).

    Returns:
        ``{"ns", "segment", "kind", "path"?}`` with kind ``unsealed`` (manifest, no record),
        ``stray_file`` (file only), ``missing_file`` (record, no file) or
        ``missing_manifest`` (record and file, no manifest).
    """
    by_manifest = {(m["ns"], m["segment"]): m for m in manifests}
    files = set(segment_files)
    sealed = {(r["ns"], r["id"]) for r in records}
    out: list[dict[str, Any]] = []
    for key, m in by_manifest.items():
        if key not in sealed:
            out.append({"ns": key[0], "segment": key[1], "kind": "unsealed", "path": m["path"]})
    for key in files - sealed - by_manifest.keys():
        out.append({"ns": key[0], "segment": key[1], "kind": "stray_file"})
    for key in sealed:
        if key not in files:
            out.append({"ns": key[0], "segment": key[1], "kind": "missing_file"})
        elif key not in by_manifest:
            out.append({"ns": key[0], "segment": key[1], "kind": "missing_manifest"})
    return sorted(out, key=lambda o: (o["ns"], o["segment"], o["kind"]))
