"""`statekeeper watch PREFIX`: print every change of the keys under PREFIX as it happens.

Like cluster/stream_cli.py: cluster/cli.py calls :func:`register`, the client is imported
only when the command runs, and the endpoints come from --endpoints, $STATEKEEPER_ENDPOINTS,
else the --config file's nodes (no default: cluster/client_cli.py). Values are printed as
text when they are UTF-8 and as base64 (prefixed ``b64:``) otherwise; --json prints one
object per change. The watch resumes by itself on another node when the one it reads from
fails (docs/protocol.md, "Watch").
"""

from __future__ import annotations

import argparse
import base64
import json
from collections.abc import Callable
from typing import Any

from statekeeper.cluster.client_cli import EXIT_OK, client_args, guarded, open_client


def register(command: Callable[..., Any], arg: Callable[..., Any], groups: dict[str, Any]) -> None:
    """Add `statekeeper watch` to cluster/cli.py's registry."""
    command("watch", help="print every change of the keys under PREFIX (Ctrl-C stops)",
            epilog="  statekeeper watch agent/            # changes from now on\n"
                   "  statekeeper watch agent/ --from 1   # every change still in history, "
                   "then follow\n"
                   "  statekeeper watch '' --ns agents --json   # the whole namespace, as JSON",
            args=[*client_args(arg),
                  arg("prefix", nargs="?", default="", metavar="PREFIX",
                      help="watch the keys starting with this (default: the whole namespace)"),
                  arg("--from", dest="start", type=int, metavar="REV",
                      help="first revision to show (default: the next one)")])(cmd_watch)


def _text(data: bytes) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError:
        return "b64:" + base64.b64encode(data).decode()


def _line(ev: Any, as_json: bool) -> str:
    if as_json:
        return json.dumps({"revision": ev.revision, "type": ev.type, "key": ev.kv.key,
                           "value": _text(ev.kv.value) if ev.type == "put" else None,
                           "version": ev.kv.version, "create_revision": ev.kv.create_revision,
                           "mod_revision": ev.kv.mod_revision}, ensure_ascii=False)
    value = _text(ev.kv.value)[:80] if ev.type == "put" else ""
    return f"{ev.revision:>8}  {ev.type:<6}  {ev.kv.key}  {value}".rstrip()


@guarded
def cmd_watch(args: argparse.Namespace) -> int:
    """Watch the keys under PREFIX in namespace --ns: from revision --from (default: the
    revision after the current one) on, every put and delete, in revision order, one line
    each (revision, type, key, value), until Ctrl-C. A revision below the compaction point
    is refused (`compacted`): pick a later --from."""
    with open_client(args) as c:
        start = args.start
        if start is None:
            start = c.range(args.prefix, limit=1, keys_only=True).revision + 1
        try:
            for ev in c.watch(args.prefix, start_revision=start):
                print(_line(ev, args.json), flush=True)
        except KeyboardInterrupt:
            return EXIT_OK
    return EXIT_OK
