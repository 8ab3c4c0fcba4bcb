"""`statekeeper archive run | list | restore`: archival to a cold tier for people and cron
jobs (docs/archive.md).

Like cluster/gc_cli.py: cluster/cli.py calls :func:`register`, the client is imported only
when a command runs, and the endpoints come from --endpoints, $STATEKEEPER_ENDPOINTS, the
--config file's nodes (no default: cluster/client_cli.py). The archive is a URL (file:///dir,
s3://bucket/prefix, ...; a plain path means a local directory) read and written through
fsspec (the ``archive`` extra).

``archive run`` reports each step of the archiver on stderr (one line per step; --quiet
drops them) and turns each into a failpoint hit (node/failpoints.py), so a test can kill
the archiver exactly between two steps with STATEKEEPER_FAILPOINTS="NAME=exit":

    archive-segment-written     the segment file is durable in the archive; no manifest
                                entry, nothing sealed
    archive-manifest-written    its manifest entry is durable too; nothing sealed
    archive-sealed              the seal ops were answered (the keys are tombstoned)

Exit codes: 0 done, 1 failed (cluster unavailable, archive unwritable, corrupt segment),
2 bad arguments or a segment/key the cluster does not know.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from statekeeper.cluster.client_cli import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    client_args,
    connection_options,
    dump,
    endpoints,
    guarded,
    size,
    table,
)
from statekeeper.cluster.client_cli import token as client_token

GROUP_HELP = (
    "archive old checkpoints and stream events to a cold tier, and restore them",
    "Archival: what a retention policy given inline would delete is copied into a segment\n"
    "file in an archive (a local directory, S3, GCS, Azure via fsspec), then removed from\n"
    "the cluster leaving tombstones; gets of archived keys say where they went\n"
    "(docs/archive.md). Needs: pip install 'statekeeper[archive]'.",
)

FAILPOINT_STEPS = ("segment-written", "manifest-written", "sealed")


def open_client(args: argparse.Namespace) -> Any:
    from statekeeper.client import Client

    return Client(
        endpoints(args),
        ns=args.ns or "default",
        token=client_token(args),
        # restore reads segment files only under these (None: $STATEKEEPER_ARCHIVE_ROOTS)
        archive_roots=getattr(args, "archive", None),
        **connection_options(args),
    )


def register(command: Callable[..., Any], arg: Callable[..., Any], groups: dict[str, Any]) -> None:
    """Add the `archive` commands to cluster/cli.py's registry."""
    groups["archive"] = GROUP_HELP
    command(
        "archive",
        "run",
        help="archive what inline retention rules would delete",
        epilog="  statekeeper archive run --ns agents --prefix agent/ --within ckpt "
        "--keep-last 10 --to file:///var/lib/sk-archive\n"
        "  statekeeper archive run --ns agents --streams --prefix agent/ --keep-last 1000 "
        "--to s3://bucket/sk",
        args=[
            *client_args(arg, "default"),
            arg("--prefix", required=True, metavar="P", help="key or stream prefix"),
            arg("--streams", action="store_true", help="archive stream events, not keys"),
            arg("--keep-last", type=int, metavar="N", help="keep the newest N per group"),
            arg(
                "--keep-every",
                type=int,
                metavar="K",
                help="also keep every Kth older key (with --keep-last)",
            ),
            arg("--max-age", metavar="AGE", help="archive what is older: 30d, 12h, 90m"),
            arg(
                "--within",
                metavar="DIR",
                help="keys: only groups whose directory's last segment is DIR (ckpt)",
            ),
            arg("--to", required=True, metavar="URL", help="the archive (URL or directory)"),
            arg("--max-segments", type=int, metavar="N", help="stop after N segments"),
            arg("--quiet", "-q", action="store_true", help="no progress lines"),
        ],
    )(cmd_run)
    command(
        "archive",
        "list",
        help="the cluster's archive segments (or the archive's orphans)",
        epilog="  statekeeper archive list\n  statekeeper archive list --ns agents --json\n"
        "  statekeeper archive list --orphans --to file:///var/lib/sk-archive",
        args=[
            *client_args(arg, None),
            arg(
                "--orphans",
                action="store_true",
                help="compare the archive at --to with the cluster's records",
            ),
            arg("--to", metavar="URL", help="the archive (with --orphans)"),
        ],
    )(cmd_list)
    command(
        "archive",
        "restore",
        help="put archived keys and events back into the cluster",
        epilog="  statekeeper archive restore 20261201T005300Z-0a1b2c3d\n"
        "  statekeeper archive restore 20261201T005300Z-0a1b2c3d --archive s3://b/arch\n"
        "  statekeeper archive restore 20261201T005300Z-0a1b2c3d --key agent/a/ckpt/7",
        args=[
            arg("segment", metavar="SEGMENT_ID", help="the segment (see archive list)"),
            arg(
                "--archive",
                action="append",
                metavar="URL",
                help="an archive root the segment file may be read from (repeatable; "
                "default: $STATEKEEPER_ARCHIVE_ROOTS); a segment URL under none is refused",
            ),
            *client_args(arg, None),
            arg("--key", action="append", metavar="K", help="only this key (repeatable)"),
            arg("--stream", action="append", metavar="S", help="only this stream (repeatable)"),
        ],
    )(cmd_restore)


def _progress(quiet: bool) -> Callable[[str, dict[str, Any]], None]:
    from statekeeper.node import failpoints

    def report(step: str, info: dict[str, Any]) -> None:
        if not quiet:
            if step == "planned":
                line = f"planned: {info['keys']} keys, {info['streams']} streams"
            else:
                line = (
                    f"{step}: segment {info['segment']} ({info['keys']} keys, "
                    f"{info['events']} events, {size(info['bytes'])})"
                )
                if step == "sealed":
                    line += f": sealed {info['sealed_keys']} keys, {info['sealed_events']} events"
            print(f"archive: {line}", file=sys.stderr, flush=True)
        if step in FAILPOINT_STEPS:
            failpoints.hit(f"archive-{step}")

    return report


def _archive_errors(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """The archive's own failures (no fsspec, unwritable, unreadable) as one line."""

    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except ImportError as e:
            print(f"statekeeper: error: {e}", file=sys.stderr)
            return EXIT_FAILURE
        except OSError as e:
            print(f"statekeeper: error: archive: {e}", file=sys.stderr)
            return EXIT_FAILURE

    run.__name__, run.__doc__ = fn.__name__, fn.__doc__
    return guarded(run)


@_archive_errors
def cmd_run(args: argparse.Namespace) -> int:
    """Archive, segment by segment, what a retention policy with these rules would delete
    under --prefix: copy into a segment file, make it and its manifest durable, then seal
    (the cluster deletes exactly what was copied and remembers where it went)."""
    if args.keep_last is None and args.max_age is None:
        print("statekeeper: error: give --keep-last and/or --max-age", file=sys.stderr)
        return EXIT_USAGE
    with open_client(args) as c:
        r = c.archive_run(
            args.prefix,
            to=args.to,
            target="streams" if args.streams else "keys",
            keep_last=args.keep_last,
            keep_every=args.keep_every,
            max_age=args.max_age,
            within=args.within,
            max_segments=args.max_segments,
            progress=_progress(args.quiet),
        )
    if args.json:
        dump(r)
        return EXIT_OK
    for s in r["segments"]:
        print(
            f"segment {s['segment']}: {s['sealed_keys']} keys, {s['sealed_events']} events, "
            f"{size(s['bytes'])} -> {s['url']}"
        )
    print(
        f"archived {r['sealed_keys']} keys and {r['sealed_events']} events in "
        f"{len(r['segments'])} segments ({size(r['bytes'])}); {len(r['skipped'])} skipped"
    )
    for name, reason in r["skipped"]:
        print(f"  skipped {name}: {reason}")
    return EXIT_OK


def _records(c: Any, ns: str | None) -> list[dict[str, Any]]:
    out, token = [], None
    while True:
        page = c.archive_list(ns=ns, all_namespaces=ns is None, continuation=token)
        out += page["segments"]
        token = page.get("continuation")
        if not page["more"] or token is None:
            return out


@_archive_errors
def cmd_list(args: argparse.Namespace) -> int:
    """The cluster's segment records; with --orphans, what the archive at --to and the
    cluster disagree on: unsealed / stray files (safe to delete), missing files or
    manifests (data the cluster points at is gone from the archive)."""
    if args.orphans and not args.to:
        print("statekeeper: error: --orphans needs --to URL", file=sys.stderr)
        return EXIT_USAGE
    with open_client(args) as c:
        records = _records(c, args.ns)
    if args.orphans:
        return _orphans(args, records)
    if args.json:
        dump({"segments": records})
        return EXIT_OK
    rows = [
        (
            r["ns"],
            r["id"],
            r["keys"],
            r["events"],
            r["restored_keys"],
            r["restored_events"],
            size(r["bytes"]),
            r["sealed_revision"],
            r["url"],
        )
        for r in records
    ]
    print(
        table(
            (
                "NS",
                "SEGMENT",
                "KEYS",
                "EVENTS",
                "RESTORED_KEYS",
                "RESTORED_EVENTS",
                "BYTES",
                "SEALED_AT",
                "URL",
            ),
            rows,
            fmt=args.write_out,
        )
        if rows
        else "no archive segments"
    )
    return EXIT_OK


def _orphans(args: argparse.Namespace, records: list[dict[str, Any]]) -> int:
    from statekeeper.client.archive import manifest
    from statekeeper.client.archive.storage import ArchiveStore, ns_unescape

    store = ArchiveStore(args.to)
    mine = [r for r in records if str(r["url"]).startswith(store.url + "/")]
    entries, files = [], []
    for path in store.list("manifest"):
        try:
            entries.append(manifest.decode_entry(store.get(path)))
        except ValueError:
            print(f"statekeeper: warning: unreadable manifest {path}", file=sys.stderr)
    for path in store.list("segments"):
        parts = path.split("/")
        if len(parts) == 3 and parts[2].endswith(".skseg"):
            files.append((ns_unescape(parts[1]), parts[2].removesuffix(".skseg")))
    if args.ns is not None:
        entries = [e for e in entries if e["ns"] == args.ns]
        files = [f for f in files if f[0] == args.ns]
    found = manifest.orphans(entries, files, mine)
    if args.json:
        dump({"orphans": found, "segments": len(mine)})
    elif found:
        print(
            table(
                ("NS", "SEGMENT", "KIND"),
                [(o["ns"], o["segment"], o["kind"]) for o in found],
                fmt=args.write_out,
            )
        )
    else:
        print(f"no orphans ({len(mine)} sealed segments in {store.url})")
    return EXIT_OK


@_archive_errors
def cmd_restore(args: argparse.Namespace) -> int:
    """Read a segment back from the archive (verifying its sha256) and restore its keys
    and stream events (or only --key / --stream ones). Keys come back with a new
    revision; events byte-identical with their original revisions."""
    with open_client(args) as c:
        r = c.archive_restore(args.segment, keys=args.key, streams=args.stream, ns=args.ns)
    if args.json:
        dump(r)
        return EXIT_OK
    print(
        f"restored {r['restored_keys']} keys and {r['restored_events']} events from "
        f"{r['segment']} (ns {r['ns']}, revision {r['revision']})"
    )
    for name, reason in r["skipped"]:
        print(f"  skipped {name}: {reason}")
    return EXIT_OK
