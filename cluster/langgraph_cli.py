"""`statekeeper langgraph threads | history THREAD | show THREAD [CHECKPOINT]`: the
threads StatekeeperSaver stored (client/langgraph/), readable by people, as tables or
-w json|table|simple (--json: -w json) (issue 30 item 18).

Read through the saver's own key layout (client/langgraph/keys.py) and codec
(saver_codec.py, LangGraph's JsonPlusSerializer, never pickle): `threads` scans the
``ckpt/`` keys (keys only) and reads the newest record of each thread; `history` reads one
thread's records and its pending writes' keys; `show` is the saver's get_tuple, its
channel values, metadata and pending writes printed as JSON (objects by their fields,
bytes as {"$bytes": base64}).

cluster/cli.py calls :func:`register` with its registry (so this module never imports
cli.py, which may be running as __main__); the client and LangGraph are imported only when
a command runs; endpoints and the shared flags: cluster/client_cli.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from statekeeper.cluster.client_cli import EXIT_OK, client_args, dump, guarded, open_client, table

EXIT_NOT_FOUND = 3  # as `statekeeper get` (cluster/kv_cli.py)
SAVER_NS = "langgraph"  # StatekeeperSaver's default namespace

GROUP_HELP = (
    "read LangGraph threads stored by StatekeeperSaver",
    "Threads, checkpoints and pending writes of StatekeeperSaver (a LangGraph\n"
    "checkpointer), decoded. Keys: ckpt/{thread}/{ns}/..., blob/..., writes/...\n"
    '(docs/langgraph.md, "Key layout").',
)


def register(command: Callable[..., Any], arg: Callable[..., Any], groups: dict[str, Any]) -> None:
    """Add the `langgraph` commands to cluster/cli.py's registry."""
    groups["langgraph"] = GROUP_HELP
    common = client_args(arg, ns_default=SAVER_NS)
    thread = arg("thread", metavar="THREAD", help="the thread id")
    cns = arg(
        "--checkpoint-ns",
        default=None,
        metavar="CNS",
        help='only this checkpoint namespace ("" is the root graph; default: every one)',
    )
    command(
        "langgraph",
        "threads",
        help="list the threads: checkpoints, newest step, TTL",
        epilog="  statekeeper langgraph threads\n  statekeeper langgraph threads --json",
        args=common,
    )(cmd_threads)
    command(
        "langgraph",
        "history",
        help="a thread's checkpoints, oldest first",
        epilog="  statekeeper langgraph history t-1",
        args=[*common, thread, cns],
    )(cmd_history)
    command(
        "langgraph",
        "show",
        help="a checkpoint's channel values, metadata and pending writes as JSON",
        epilog="  statekeeper langgraph show t-1\n"
        "  statekeeper langgraph show t-1 1f0c5f1e-8d4a-6b2c-8001-0123456789ab",
        args=[
            *common,
            thread,
            arg(
                "checkpoint",
                nargs="?",
                metavar="CHECKPOINT",
                help="a checkpoint id (default: the newest)",
            ),
            arg(
                "--checkpoint-ns",
                default="",
                metavar="CNS",
                help='its checkpoint namespace (default: "", the root graph)',
            ),
        ],
    )(cmd_show)


# -- reading (client/langgraph/inspect.py, shared with the console) ------------------------


def history_rows(client: Any, ns: str, thread: str, cns: str | None) -> list[Any]:
    """The thread's checkpoints (of ``cns``, or every namespace), oldest first."""
    from statekeeper.client.langgraph.inspect import default_serde, history_plan
    from statekeeper.client.plan import run

    rows = list(run(client, history_plan(ns, default_serde(), thread, cns)).rows)
    rows.reverse()  # keys are newest first within a namespace
    rows.sort(key=lambda r: r.checkpoint_ns)  # stable: namespaces in order, each oldest first
    return rows


def _missing(message: str) -> int:
    print(f"statekeeper: {message}", file=sys.stderr)
    return EXIT_NOT_FOUND


def history_table(rows: Sequence[Any], fmt: str = "table") -> str:
    return table(
        ("CHECKPOINT", "PARENT", "NS", "STEP", "SOURCE", "WRITES", "TS"),
        [
            (r.checkpoint_id, r.parent, r.checkpoint_ns or None, r.step, r.source, r.writes, r.ts)
            for r in rows
        ],
        fmt,
    )


# -- commands ------------------------------------------------------------------------------


@guarded
def cmd_threads(args: argparse.Namespace) -> int:
    """One row per thread of the namespace: its checkpoints (every checkpoint namespace),
    the step, source and time of its newest root-graph checkpoint, and its TTL marker's
    lease (StatekeeperSaver(ttl=...))."""
    from statekeeper.client.langgraph.inspect import default_serde, threads_plan
    from statekeeper.client.plan import run

    with open_client(args) as c:
        page = run(c, threads_plan(args.ns, default_serde()))
    out = [
        {
            "thread_id": t.thread_id,
            "checkpoints": t.checkpoints,
            "step": t.step,
            "source": t.source,
            "ts": t.ts,
            "lease": t.lease,
        }
        for t in page.threads
    ]
    if args.json:
        dump(out)
        return EXIT_OK
    if not out:
        print(f"no LangGraph threads in namespace {args.ns!r}")
        return EXIT_OK
    print(
        table(
            ("THREAD", "CHECKPOINTS", "STEP", "SOURCE", "LAST", "LEASE"),
            [
                (r["thread_id"], r["checkpoints"], r["step"], r["source"], r["ts"], r["lease"])
                for r in out
            ],
            args.write_out,
        )
    )
    return EXIT_OK


@guarded
def cmd_history(args: argparse.Namespace) -> int:
    """The thread's checkpoints, oldest first (each checkpoint namespace in turn): id,
    parent, namespace, step, source, pending writes and time."""
    with open_client(args) as c:
        rows = history_rows(c, args.ns, args.thread, args.checkpoint_ns)
    if not rows:
        return _missing(f"thread {args.thread!r} has no checkpoints in namespace {args.ns!r}")
    if args.json:
        dump(
            [
                {
                    "checkpoint_ns": r.checkpoint_ns,
                    "checkpoint_id": r.checkpoint_id,
                    "parent": r.parent,
                    "step": r.step,
                    "source": r.source,
                    "writes": r.writes,
                    "ts": r.ts,
                    "run_id": r.run,
                }
                for r in rows
            ]
        )
        return EXIT_OK
    print(history_table(rows, args.write_out))
    return EXIT_OK


@guarded
def cmd_show(args: argparse.Namespace) -> int:
    """The checkpoint (default: the thread's newest in --checkpoint-ns) decoded by the
    saver: channel values, metadata and pending writes, as JSON."""
    from statekeeper.client.langgraph.saver import StatekeeperSaver

    conf = {"thread_id": args.thread, "checkpoint_ns": args.checkpoint_ns}
    if args.checkpoint:
        conf["checkpoint_id"] = args.checkpoint
    with open_client(args) as c:
        tup = StatekeeperSaver(c, ns=args.ns).get_tuple({"configurable": conf})
    if tup is None:
        what = f"no checkpoint {args.checkpoint}" if args.checkpoint else "no checkpoints"
        return _missing(
            f"thread {args.thread!r} has {what} in checkpoint namespace "
            f"{args.checkpoint_ns!r} of namespace {args.ns!r}"
        )
    from statekeeper.client.langgraph.inspect import shown

    doc = shown(tup)
    if args.json:
        dump(doc)
        return EXIT_OK
    print(
        f"thread      {doc['thread_id']}  (namespace {args.ns}, checkpoint ns "
        f"{doc['checkpoint_ns']!r})"
    )
    print(f"checkpoint  {doc['checkpoint_id']}  parent {doc['parent'] or '-'}")
    print(f"time        {doc['ts']}")
    print(f"metadata    {json.dumps(doc['metadata'], sort_keys=True, ensure_ascii=False)}")
    print("channel values:")
    print(json.dumps(doc["channel_values"], indent=2, sort_keys=True, ensure_ascii=False))
    if doc["pending_writes"]:
        print("pending writes:")
        print(json.dumps(doc["pending_writes"], indent=2, sort_keys=True, ensure_ascii=False))
    return EXIT_OK
