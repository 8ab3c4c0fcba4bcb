"""`statekeeper backup --out FILE`, `statekeeper backup --inspect FILE` and
`statekeeper restore FILE`: online backup of a running cluster and restore into a new one
(issue 16, item 4).

Like cluster/kv_cli.py: cluster/cli.py calls :func:`register`; the endpoints, TLS and the
bearer token come from cluster/client_cli.py (--endpoints, $STATEKEEPER_ENDPOINTS or
cluster.toml; the root token derived from the config's secret, or --token-file /
$STATEKEEPER_TOKEN: it must hold admin on every namespace).

backup: GET /v1/admin/backup from the first endpoint that answers (node/api/backup.py:
one revision, after a read barrier, without stopping writes), streamed into a new temporary
file next to FILE (mkstemp: O_EXCL, a random name, mode 0600: the backup holds every value
and the auth tokens' hashes; never a fixed FILE.partial another user could pre-create or
point a symlink from), fsynced, checked
whole (node/backup/file.py), then renamed to FILE. restore: verifies FILE, then seeds
the data dirs of a new, stopped cluster (node/backup/seed.py) so `statekeeper cluster
up` starts it with the contents.

Exit codes: 0 done; 1 the cluster or transport failed (no endpoint answered, a refused
token, an interrupted download, a node still running); 2 bad arguments, a corrupted,
truncated or foreign backup file, or data dirs that are not empty (without --force).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from statekeeper.cluster.client_cli import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    client_args,
    cluster_config,
    endpoints,
    exit_code,
    output_args,
    size,
    tls_context,
    token,
)
from statekeeper.cluster.config_file import (
    DEFAULT_BASE_PORT,
    base_port_arg,
    create_config_if_missing,
)

EXIT_CODES = (
    "exit codes: 0 done; 1 cluster/transport failure (no endpoint answered, refused token,\n"
    "interrupted download, a node still running); 2 usage, a corrupted/truncated/foreign\n"
    "backup file, or data dirs that are not empty (restore without --force)."
)


def register(command: Callable[..., Any], arg: Callable[..., Any], groups: dict[str, Any]) -> None:
    """Add `backup` and `restore` to cluster/cli.py's registry."""
    base = [a for a in client_args(arg) if a[0][0] != "--ns"]
    command(
        "backup",
        help="take a consistent online backup of a running cluster",
        epilog="  statekeeper backup --out sk-2026-12-01.skb\n"
        "  statekeeper backup --out b.skb --endpoints https://10.0.0.5:7000 --token-file t\n"
        "  statekeeper backup --inspect b.skb     # verify a file and print its metadata\n\n"
        + EXIT_CODES,
        args=[
            *base,
            arg("--out", "-o", metavar="FILE", help="where to write the backup"),
            arg("--inspect", metavar="FILE", help="verify FILE and print its metadata"),
            arg("--quiet", "-q", action="store_true", help="no progress bar"),
        ],
    )(cmd_backup)
    command(
        "restore",
        help="seed a new (stopped) cluster's data dirs from a backup file",
        epilog="  statekeeper restore sk.skb --config new/cluster.toml && "
        "statekeeper cluster up --config new/cluster.toml\n"
        "  statekeeper restore sk.skb --config cluster.toml --node node-0   # one node\n"
        "  statekeeper restore sk.skb --config cluster.toml --force   # replace old state\n\n"
        + EXIT_CODES,
        args=[
            arg("file", metavar="FILE", help="a file written by 'statekeeper backup'"),
            arg(
                "--config",
                "-c",
                default="cluster.toml",
                metavar="PATH",
                help="the new cluster's config: every node's data dir is seeded; created "
                "(3 local nodes, like 'cluster up') if missing (default: cluster.toml)",
            ),
            arg(
                "--node",
                action="append",
                metavar="ID",
                help="seed only this node of the config (repeatable; default: every node), "
                "e.g. each pod of a StatefulSet its own",
            ),
            base_port_arg(arg),
            arg("--force", action="store_true", help="replace the state in non-empty data dirs"),
            *output_args(arg),
        ],
    )(cmd_restore)


def cmd_backup(args: argparse.Namespace) -> int:
    """Take a backup of a running cluster.

    The node that answers first waits for a read barrier (so the backup holds every
    write acknowledged before the command started), takes a RocksDB checkpoint between
    two applies (writes go on; applies wait a few ms) and streams it. The file holds one
    revision of everything: keys with their history, streams, leases, locks, retention
    policies, idempotency records and auth tokens; nothing of raft (log, members,
    addresses) and not the cluster secret. Restore it with 'statekeeper restore'."""
    if args.inspect:
        return _inspect(args.inspect, args.json)
    if not args.out:
        print("statekeeper: error: backup needs --out FILE (or --inspect FILE)", file=sys.stderr)
        return EXIT_USAGE
    if not Path(args.out).resolve().parent.is_dir():
        print(f"statekeeper: error: no directory for {args.out}", file=sys.stderr)
        return EXIT_USAGE
    from statekeeper.client.errors import StatekeeperError

    try:
        return _backup(args)
    except StatekeeperError as e:
        print(f"statekeeper: error: {e.message or e}", file=sys.stderr)
        return exit_code(e)


def _inspect(path: str, as_json: bool) -> int:
    from statekeeper.node.backup.file import BackupError, verify

    try:
        meta, digest, body = verify(path)
    except BackupError as e:
        print(f"statekeeper: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    _print_meta({**meta, "sha256": digest, "size": os.path.getsize(path)}, as_json)
    return EXIT_OK


def _print_meta(meta: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(meta, indent=2, sort_keys=True))
        return
    created, clock = (_utc(meta.get(k)) for k in ("created_ms", "clock_ms"))
    print(
        f"backup of cluster {meta.get('cluster')!r} by {meta.get('source_node')} at {created}\n"
        f"  revision {meta['revision']} (compacted up to {meta.get('compact_revision')}), "
        f"raft index {meta.get('applied_index')}, cluster clock {clock}\n"
        f"  size {size(meta['size'])}, sha256 {meta['sha256']}, statekeeper "
        f"{meta.get('version')}"
    )


def _utc(ms: Any) -> str:
    if not isinstance(ms, int):
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def _backup(args: argparse.Namespace) -> int:
    import urllib3

    from statekeeper.client.base import bearer
    from statekeeper.client.errors import StatekeeperError
    from statekeeper.node.api.backup import PATH
    from statekeeper.node.backup.file import BackupError, verify

    out = Path(args.out)
    headers = {"Authorization": auth} if (auth := bearer(token(args))) else {}
    pm = urllib3.PoolManager(ssl_context=tls_context(args), retries=False)
    failures = []
    for url in endpoints(args):
        started = time.monotonic()
        try:
            resp = pm.request(
                "GET",
                url.rstrip("/") + PATH,
                headers=headers,
                preload_content=False,
                timeout=urllib3.Timeout(connect=10.0, read=120.0),
            )
        except urllib3.exceptions.HTTPError as e:
            failures.append(f"{url}: {e}")
            continue
        try:
            if resp.status != 200:
                message = _error_message(resp.read())
                if resp.status in (401, 403):  # the next node would say the same
                    raise StatekeeperError(f"{url}: {message}")
                failures.append(f"{url}: {resp.status} {message}")
                continue
            partial, written = _download(resp, out, args.quiet)
        except (urllib3.exceptions.HTTPError, OSError) as e:
            failures.append(f"{url}: the download broke off: {e}")
            continue
        finally:
            resp.release_conn()
        try:
            meta, digest, _ = verify(str(partial))
        except BackupError as e:  # e.g. the node failed mid-way and the stream ended early
            partial.unlink()
            failures.append(f"{url}: {e}")
            continue
        os.replace(partial, out)
        _fsync_dir(out.parent)
        took = time.monotonic() - started
        if args.json:
            print(json.dumps({**meta, "file": str(out), "size": written, "sha256": digest}))
            return EXIT_OK
        print(
            f"backup of revision {meta['revision']} from {meta.get('source_node')} "
            f"written to {out}: {size(written)} in {took:.1f} s "
            f"(applies paused {meta.get('apply_pause_ms')} ms)\nsha256 {digest}"
        )
        return EXIT_OK
    raise StatekeeperError("no backup taken: " + "; ".join(failures))


def _download(resp: Any, out: Path, quiet: bool) -> tuple[Path, int]:
    """Stream the answer into a new temporary file next to `out`; its path and size.

    The temporary is made by mkstemp (O_CREAT|O_EXCL, mode 0600, a random name) in out's
    directory, so the rename onto `out` stays on one file system. A fixed name such as
    FILE.partial opened with O_TRUNC let another local user pre-create it (their file, mode
    0666, then received the whole backup) or plant a symlink there (the backup, often run
    as root, overwrote its target): issue 27, item 9."""
    fd, name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent)
    partial = Path(name)
    bar = None
    if not quiet and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(unit="B", unit_scale=True, desc="backup", file=sys.stderr)
    written = 0
    try:
        with os.fdopen(fd, "wb") as f:
            for data in resp.stream(1 << 20):
                f.write(data)
                written += len(data)
                if bar is not None:
                    bar.update(len(data))
            f.flush()
            os.fsync(f.fileno())
    except BaseException:  # Ctrl-C too: no half file left behind
        partial.unlink(missing_ok=True)
        raise
    finally:
        if bar is not None:
            bar.close()
    return partial, written


def _error_message(body: bytes) -> str:
    try:
        err = json.loads(body)["error"]
        return f"{err['code']}: {err['message']}"
    except (ValueError, KeyError, TypeError):
        return body[:200].decode("utf-8", "replace")


def _fsync_dir(path: Path) -> None:
    from statekeeper.node.snapshot_file import fsync_dir

    fsync_dir(str(path.resolve()))


def cmd_restore(args: argparse.Namespace) -> int:
    """Seed a new cluster from a backup file.

    Verifies the whole file first (magic, version, sha256): a corrupted, truncated or
    foreign file is refused and nothing is written. Then every node of --config (or each
    --node) gets its own copy of the store and a raft snapshot of it, and no raft log:
    start the cluster with 'statekeeper cluster up --config ...'. The nodes must be
    stopped, and their data dirs empty unless --force (which replaces their store and
    raft state). The new cluster keeps the revision, history, auth tokens and cluster
    clock of the backup; its members, addresses and secret are the config's."""
    from statekeeper.node.backup.file import BackupError
    from statekeeper.node.backup.seed import SeedError, seed

    try:
        cfg, node_ids = _targets(args)
        meta = seed(args.file, cfg, node_ids, force=args.force, say=print)
    except (BackupError, SeedError, _Running) as e:
        print(f"statekeeper: error: {e}", file=sys.stderr)
        return EXIT_FAILURE if isinstance(e, _Running) else EXIT_USAGE
    meta["size"] = os.path.getsize(args.file)
    _print_meta(meta, args.json)
    if not args.json:
        start = f"statekeeper cluster up --config {args.config}"
        print(
            f"restored {len(node_ids)} node(s): each starts from a raft snapshot at index "
            f"{meta['raft_index']} (no members, term or log of the source); revision, "
            f"history, tokens and cluster clock are the backup's.\nstart it: {start}"
        )
    return EXIT_OK


class _Running(Exception):
    """A node of the target cluster is running."""


def _targets(args: argparse.Namespace) -> tuple[Any, list[str]]:
    """The new cluster's config (written if missing) and the nodes to seed."""
    cfg = cluster_config(args)
    if cfg is None:
        base_port = DEFAULT_BASE_PORT if args.base_port is None else args.base_port
        cfg, _ = create_config_if_missing(args.config, base_port=base_port)
        print(f"wrote {args.config} ({len(cfg.nodes)} local nodes, data in {cfg.data_dir}/)")
    elif args.base_port is not None:  # as `cluster up` says it
        print(f"note: {args.config} exists; --base-port applies only when creating it")
    node_ids = args.node or [n.id for n in cfg.nodes]
    for nid in node_ids:
        cfg.node(nid)  # an unknown id is a ConfigError: usage, exit 2
    from statekeeper.cluster.supervisor import LocalCluster

    lc = LocalCluster(cfg, args.config)
    running = [nid for nid in node_ids if lc.is_running(nid)]
    if running:
        raise _Running(
            f"{', '.join(running)} of {args.config} running: restore seeds a stopped "
            "cluster ('statekeeper cluster down' first)"
        )
    return cfg, node_ids
