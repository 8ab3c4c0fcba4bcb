"""`statekeeper stream append | read | tail | info | list`: event streams for people.

Like cluster/agent_cli.py: cluster/cli.py calls :func:`register`, the client is imported
only when a command runs, and the endpoints come from --endpoints, $STATEKEEPER_ENDPOINTS,
else the --config file's nodes (cluster/client_cli.py). Event data that is an agent envelope
(what Agent.log writes) is decoded as `agent history` does and shown as its schema and its
data in JSON; other data as text when it is UTF-8 and as base64 (prefixed ``b64:``)
otherwise; -w json (--json) prints one object per event (an envelope's header under
"envelope").
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections.abc import Callable
from typing import Any

from statekeeper.cluster.client_cli import (
    EXIT_OK,
    EXIT_USAGE,
    client_args,
    dump,
    guarded,
    open_client,
    table,
    when,
)

GROUP_HELP = (
    "append to, read and follow event streams",
    "Event streams: append-only, consecutive sequence numbers per stream, one revision\n"
    "per append (docs/protocol.md, \"Streams\").",
)


def register(command: Callable[..., Any], arg: Callable[..., Any], groups: dict[str, Any]) -> None:
    """Add the `stream` commands to cluster/cli.py's registry."""
    groups["stream"] = GROUP_HELP
    common = client_args(arg)
    name = arg("stream", metavar="STREAM", help="the stream's name")
    command("stream", "append", help="append events (one per DATA argument) in one atomic append",
            epilog="  statekeeper stream append orders '{\"id\": 1}' --type order.placed\n"
                   "  statekeeper stream append orders again --expect 1   # only if last seq is 1",
            args=[*common, name,
                  arg("data", nargs="+", metavar="DATA", help="event data (UTF-8 text)"),
                  arg("--type", default="", help="the events' type"),
                  arg("--id", action="append", metavar="ID",
                      help="event id (repeat once per event): a replayed id is not appended "
                           "again"),
                  arg("--expect", default="any", metavar="EXPECT",
                      help="any (default), no_stream, exists, or the last seq N the stream "
                           "must have")])(cmd_append)
    command("stream", "read", help="print a page of events",
            epilog="  statekeeper stream read orders --from 10 --limit 5\n"
                   "  statekeeper stream read orders --backward --limit 3   # the newest three",
            args=[*common, name,
                  arg("--from", dest="start", type=int, metavar="SEQ", help="first seq to read"),
                  arg("--backward", action="store_true", help="newest first"),
                  arg("--limit", type=int, default=100, metavar="N", help="at most N (100)"),
                  arg("--revision", type=int, metavar="REV",
                      help="read the stream as it was at this revision")])(cmd_read)
    command("stream", "tail", help="print events as they are appended (Ctrl-C stops)",
            epilog="  statekeeper stream tail orders            # from the next event on\n"
                   "  statekeeper stream tail orders --from 1   # everything, then follow",
            args=[*common, name,
                  arg("--from", dest="start", type=int, metavar="SEQ",
                      help="first seq (default: after the current last)")])(cmd_tail)
    command("stream", "info", help="a stream's first/last seq, count and bytes",
            epilog="  statekeeper stream info orders", args=[*common, name])(cmd_info)
    command("stream", "list", help="the streams of a namespace",
            epilog="  statekeeper stream list agent/ --ns agents",
            args=[*common, arg("prefix", nargs="?", metavar="PREFIX",
                               help="only streams starting with this")])(cmd_list)


def _envelope(data: bytes) -> dict[str, Any] | None:
    """{"header", "data"} of an agent envelope (client/agent/envelope.py: what Agent.log
    and checkpoints write), decoded without a registry as `agent show` does (so any schema
    shows, registered here or not); None for data that is no envelope (or does not decode)."""
    from statekeeper.client.agent.codec import show_envelope
    from statekeeper.client.agent.envelope import MAGIC
    from statekeeper.client.errors import StatekeeperError

    if data[:3] != MAGIC:
        return None
    try:
        return show_envelope(data)
    except StatekeeperError:
        return None


def _raw(data: bytes) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError:
        return "b64:" + base64.b64encode(data).decode()


def _event(ev: Any) -> dict[str, Any]:
    """An event as JSON: an envelope's data decoded (and its header under "envelope"),
    other data as text, or b64: when it is not UTF-8."""
    shown = _envelope(ev.data)
    out = {"seq": ev.seq, "type": ev.type, "data": _raw(ev.data) if shown is None else
           shown["data"], "id": ev.id, "time_ms": ev.time_ms, "revision": ev.revision,
           "meta": ev.meta or {}}
    if shown is not None:
        out["envelope"] = shown["header"]
    return out


def _data(data: bytes, width: int = 80) -> str:
    """An event's data on one line: an envelope as its schema and its data in JSON."""
    shown = _envelope(data)
    if shown is None:
        text = _raw(data)
    else:
        h = shown["header"]
        schema = f"{h['schema']} v{h['version']} " if h.get("schema") else ""
        text = schema + json.dumps(shown["data"], ensure_ascii=False, sort_keys=True)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _print_events(events: list[Any], fmt: str) -> None:
    if fmt == "json":
        for ev in events:
            print(json.dumps(_event(ev), ensure_ascii=False), flush=True)
        return
    print(table(("SEQ", "TYPE", "TIME", "REV", "ID", "DATA"),
                [(e.seq, e.type or "-", when(e.time_ms), e.revision, e.id,
                  _data(e.data)) for e in events], fmt), flush=True)


def _expect(text: str) -> Any:
    return int(text) if text.isdigit() else text


@guarded
def cmd_append(args: argparse.Namespace) -> int:
    """Append the DATA arguments as events, each with --type and its --id."""
    from statekeeper.client import Event

    ids = args.id or []
    if ids and len(ids) != len(args.data):
        print("statekeeper: error: give one --id per DATA argument, or none", file=sys.stderr)
        return EXIT_USAGE
    events = [Event(d.encode(), type=args.type, id=ids[i] if ids else None)
              for i, d in enumerate(args.data)]
    with open_client(args) as c:
        r = c.append(args.stream, events, expect=_expect(args.expect))
    if args.json:
        dump({"revision": r.revision, "first_seq": r.first_seq, "last_seq": r.last_seq,
              "events": [{"seq": e.seq, "duplicate": e.duplicate} for e in r.events]})
    else:
        dups = f", {r.duplicates} already there" if r.duplicates else ""
        print(f"{args.stream}: seqs {', '.join(map(str, r.seqs))} (last seq {r.last_seq}, "
              f"revision {r.revision}{dups})")
    return EXIT_OK


@guarded
def cmd_read(args: argparse.Namespace) -> int:
    """One page of events, forward from --from (or backward from the end)."""
    with open_client(args) as c:
        page = c.read_stream(args.stream, start=args.start, limit=args.limit,
                             direction="backward" if args.backward else "forward",
                             revision=args.revision)
    if not page.events and not args.json:
        print(f"{args.stream}: no events there (last seq {page.last_seq}, revision "
              f"{page.revision})")
        return EXIT_OK
    _print_events(page.events, args.write_out)
    if page.more and not args.json:
        print(f"... more (last seq {page.last_seq}); continue with --from "
              f"{page.events[-1].seq + (-1 if args.backward else 1)}")
    return EXIT_OK


@guarded
def cmd_tail(args: argparse.Namespace) -> int:
    """Follow the stream: catch up from --from, then long-poll for new events."""
    with open_client(args) as c:
        start = args.start
        if start is None:
            start = c.read_stream(args.stream, direction="backward", limit=1).last_seq + 1
        try:
            for ev in c.subscribe(args.stream, start=start):
                _print_events([ev], "json") if args.json else print(
                    f"{ev.seq:>6}  {when(ev.time_ms)}  {ev.type or '-'}  "
                    f"{_data(ev.data, width=200)}", flush=True)
        except KeyboardInterrupt:
            return EXIT_OK
    return EXIT_OK


@guarded
def cmd_info(args: argparse.Namespace) -> int:
    """first/last seq, count, bytes, revisions of one stream."""
    with open_client(args) as c:
        info = c.stream_info(args.stream)
    fields = {"stream": info.stream, "first_seq": info.first_seq, "last_seq": info.last_seq,
              "count": info.count, "bytes": info.bytes,
              "create_revision": info.create_revision, "mod_revision": info.mod_revision}
    if args.json:
        dump(fields)
    else:
        print(table(("FIELD", "VALUE"), list(fields.items()), fmt=args.write_out))
    return EXIT_OK


@guarded
def cmd_list(args: argparse.Namespace) -> int:
    """Every stream of the namespace (optionally under PREFIX), in name order."""
    rows, cont = [], None
    with open_client(args) as c:
        while True:
            page = c.list_streams(args.prefix, continuation=cont)
            rows += page.streams
            if not page.more:
                break
            cont = page.continuation
    if args.json:
        dump([{"stream": s.stream, "last_seq": s.last_seq, "count": s.count, "bytes": s.bytes}
              for s in rows])
    elif not rows:
        print(f"no streams in namespace {args.ns!r}")
    else:
        print(table(("STREAM", "LAST SEQ", "COUNT", "BYTES", "MOD REV"),
                    [(s.stream, s.last_seq, s.count, s.bytes, s.mod_revision) for s in rows],
                    fmt=args.write_out))
    return EXIT_OK
