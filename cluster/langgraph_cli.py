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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from statekeeper.cluster.client_cli import EXIT_OK, client_args, dump, guarded, open_client, table

EXIT_NOT_FOUND = 3  # as `statekeeper get` (cluster/kv_cli.py)
SAVER_NS = "langgraph"  # StatekeeperSaver's default namespace
_BATCH = 200  # records read per batch request (threads)

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


# -- reading -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Row:
    """One checkpoint as history shows it (its record decoded; no channel values)."""

    checkpoint_ns: str
    checkpoint_id: str
    parent: str | None
    step: Any
    source: Any
    ts: Any
    run: str | None
    writes: int


def _serde() -> Any:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    return JsonPlusSerializer()


def row_of(key: str, value: bytes, writes: int, serde: Any) -> Row:
    """The history row of one ``ckpt/`` kv (metadata and ts decoded with ``serde``)."""
    from statekeeper.client.langgraph import keys as K
    from statekeeper.client.langgraph.saver_codec import loads, unpack_record

    _, cns, cid = K.parse_ckpt_key(key)
    rec = unpack_record(value)
    meta, ckpt = loads(serde, rec.meta), loads(serde, rec.ckpt)
    return Row(
        cns, cid, rec.parent, meta.get("step"), meta.get("source"), ckpt.get("ts"), rec.run, writes
    )


def write_counts(keys: Iterable[str], thread: str) -> dict[tuple[str, str], int]:
    """Pending writes per (checkpoint_ns, checkpoint_id), from ``writes/{thread}/`` keys
    (chunk keys not counted)."""
    from statekeeper.client.langgraph import keys as K

    out: dict[tuple[str, str], int] = {}
    depth = K.writes_prefix(thread).count("/") + 3  # {cns}/{cid}/{task}/{idx}
    for key in keys:
        if K.main_key(key, depth)[1] is not None:
            continue
        cns, cid = key.split("/")[2:4]
        k = (K.unpart(cns), K.unpart(cid))
        out[k] = out.get(k, 0) + 1
    return out


def thread_summaries(keys: Iterable[str]) -> dict[str, tuple[int, str]]:
    """thread -> (checkpoints, the key of its newest root-graph checkpoint), from ``ckpt/``
    keys in key order: a thread's first key is it (the root namespace "" sorts first and
    each namespace is newest first), or its first subgraph's newest when it has no root."""
    from statekeeper.client.langgraph import keys as K

    out: dict[str, tuple[int, str]] = {}
    for key in keys:
        thread = K.parse_ckpt_key(key)[0]
        n, newest = out.get(thread, (0, key))
        out[thread] = (n + 1, newest)
    return out


def history_rows(client: Any, ns: str, thread: str, cns: str | None) -> list[Row]:
    """The thread's checkpoints (of ``cns``, or every namespace), oldest first."""
    from statekeeper.client.langgraph import keys as K

    serde = _serde()
    wkeys = [kv.key for kv in client.scan(K.writes_prefix(thread, cns), ns=ns, keys_only=True)]
    counts = write_counts(wkeys, thread)
    rows = [
        row_of(kv.key, kv.value, counts.get(K.parse_ckpt_key(kv.key)[1:], 0), serde)
        for kv in client.scan(K.ckpt_prefix(thread, cns), ns=ns)
    ]
    rows.reverse()  # keys are newest first within a namespace
    rows.sort(key=lambda r: r.checkpoint_ns)  # stable: namespaces in order, each oldest first
    return rows


def jsonable(value: Any) -> Any:
    from statekeeper.client.agent.codec import jsonable as plain

    return plain(value)


def shown(tup: Any) -> dict[str, Any]:
    """A CheckpointTuple as JSON-ready data."""
    conf = tup.config["configurable"]
    parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    ckpt = tup.checkpoint
    return {
        "thread_id": conf["thread_id"],
        "checkpoint_ns": conf["checkpoint_ns"],
        "checkpoint_id": conf["checkpoint_id"],
        "parent": parent,
        "ts": ckpt.get("ts"),
        "metadata": jsonable(tup.metadata),
        "channel_values": jsonable(ckpt.get("channel_values", {})),
        "channel_versions": jsonable(ckpt.get("channel_versions", {})),
        "pending_writes": [
            {"task_id": t, "channel": ch, "value": jsonable(v)}
            for t, ch, v in tup.pending_writes or []
        ],
    }


def _missing(message: str) -> int:
    print(f"statekeeper: {message}", file=sys.stderr)
    return EXIT_NOT_FOUND


def history_table(rows: Sequence[Row], fmt: str = "table") -> str:
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
    from statekeeper.client.langgraph import keys as K

    serde = _serde()
    with open_client(args) as c:
        found = thread_summaries(kv.key for kv in c.scan(K.CKPT, ns=args.ns, keys_only=True))
        threads = list(found)
        newest: dict[str, Row] = {}
        leases: dict[str, int] = {}
        for i in range(0, len(threads), _BATCH):
            group = threads[i : i + _BATCH]
            b = c.batch(ns=args.ns)
            for t in group:
                b.get(found[t][1])
                b.get(K.ttl_key(t))
            res = b.execute()
            for j, t in enumerate(group):
                kv, lease = res[2 * j], res[2 * j + 1]
                if kv is not None and not isinstance(kv, Exception):
                    newest[t] = row_of(kv.key, kv.value, 0, serde)
                if lease is not None and not isinstance(lease, Exception):
                    leases[t] = int(lease.value)
    out = [
        {
            "thread_id": t,
            "checkpoints": found[t][0],
            "step": getattr(newest.get(t), "step", None),
            "source": getattr(newest.get(t), "source", None),
            "ts": getattr(newest.get(t), "ts", None),
            "lease": leases.get(t),
        }
        for t in threads
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
