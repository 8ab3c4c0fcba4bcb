"""`statekeeper agent list | show AGENT | history AGENT | rollback AGENT --to STEP |
checkpoints AGENT [--filter k=v] | gc AGENT`: the agent layer (client/agent/) for people,
with readable tables or --json.

cluster/cli.py calls :func:`register` with its registry (so this module never imports
cli.py, which may be running as __main__); the client is imported only when a command
runs; endpoints and the shared flags: cluster/client_cli.py.
"""

from __future__ import annotations

import argparse
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
    size,
    table,
    when,
)

GROUP_HELP = (
    "inspect and roll back agents' checkpoints and events",
    "Agents stored with client.agent (Agent / AsyncAgent): their checkpoints, events\n"
    "and rollbacks, read from a running cluster. Keys: agent/{id}/head, ckpt/{n},\n"
    "chunk/{sha256}/{i}; stream agent/{id}.",
)


def register(command: Callable[..., Any], arg: Callable[..., Any], groups: dict[str, Any]) -> None:
    """Add the `agent` commands to cluster/cli.py's registry."""
    groups["agent"] = GROUP_HELP
    common = client_args(arg)
    agent_id = arg("agent_id", metavar="AGENT", help="the agent's id")
    command("agent", "list", help="list the agents of a namespace",
            epilog="  statekeeper agent list --ns agents", args=common)(cmd_list)
    command("agent", "show", help="show an agent's current (or given) checkpoint and its state",
            epilog="  statekeeper agent show agent-7\n  statekeeper agent show agent-7 --ckpt 3",
            args=[*common, agent_id, arg("--ckpt", type=int, metavar="N",
                                         help="show checkpoint N instead of the current one")],
            )(cmd_show)
    command("agent", "history", help="an agent's timeline of events, checkpoints and rollbacks",
            epilog="  statekeeper agent history agent-7 --limit 20",
            args=[*common, agent_id, arg("--limit", type=int, metavar="N",
                                         help="only the last N rows")])(cmd_history)
    command("agent", "rollback", help="make an earlier checkpoint current (nothing is deleted)",
            epilog="  statekeeper agent rollback agent-7 --to 12",
            args=[*common, agent_id,
                  arg("--to", type=int, metavar="STEP",
                      help="the state at the end of STEP (a checkpoint, as stored)"),
                  arg("--ckpt", type=int, metavar="N", help="checkpoint number N")],
            )(cmd_rollback)
    command("agent", "checkpoints", help="list an agent's checkpoints, newest first",
            epilog="  statekeeper agent checkpoints agent-7 --limit 5\n"
                   "  statekeeper agent checkpoints agent-7 --filter run=r1",
            args=[*common, agent_id,
                  arg("--filter", action="append", default=[], metavar="KEY=VALUE",
                      help="only checkpoints whose metadata has KEY equal to VALUE (JSON, "
                           "else a string); repeat for several"),
                  arg("--limit", type=int, default=20, metavar="N",
                      help="at most N checkpoints (default 20; 0: all)")])(cmd_checkpoints)
    command("agent", "gc", help="delete chunk sets no checkpoint references (orphans)",
            epilog="  statekeeper agent gc agent-7",
            args=[*common, agent_id])(cmd_gc)


# -- list --------------------------------------------------------------------------------


@guarded
def cmd_list(args: argparse.Namespace) -> int:
    """One row per agent of the namespace: its current checkpoint, step, position, the
    events in its stream, its state's size and when it was last checkpointed."""
    from statekeeper.client.agent.listing import agent_ids_plan, summaries_plan
    from statekeeper.client.plan import run

    with open_client(args) as c:
        ids = run(c, agent_ids_plan(args.ns))
        rows = [(s.agent, s.manifest, s.last_seq) for s in run(c, summaries_plan(args.ns, ids))]
    if args.json:
        dump([{"agent": a, "ckpt": m and m["ckpt"], "step": m and m["step"],
               "position": m and m["position"], "events": last, "size": m and m["size"],
               "time_ms": m and m["time_ms"]} for a, m, last in rows])
        return EXIT_OK
    if not rows:
        print(f"no agents in namespace {args.ns!r}")
        return EXIT_OK
    print(table(("AGENT", "CKPT", "STEP", "POSITION", "EVENTS", "SIZE", "CHECKPOINTED"), [
        (a, m and m["ckpt"], m and m["step"], m and m["position"], last,
         m and size(m["size"]), when(m and m["time_ms"])) for a, m, last in rows],
         fmt=args.write_out))
    return EXIT_OK


# -- show / history / rollback -------------------------------------------------------------


def _describe(ck: Any) -> dict[str, Any]:
    return {"ckpt": ck.n, "step": ck.step, "position": ck.position, "revision": ck.revision,
            "time_ms": ck.time_ms, "parent": ck.parent, "kind": ck.kind, "size": ck.size,
            "chunks": ck.chunks, "metadata": ck.metadata, "header": ck.header}


def show_plan(agent: Any, n: int | None) -> Any:
    from statekeeper.client.agent.checkpoints import head_call, head_of, load_envelope_plan
    from statekeeper.client.agent.errors import CheckpointNotFound
    from statekeeper.client.agent.records import checkpoint_from, unpack_manifest
    from statekeeper.client.errors import NotFound
    from statekeeper.client.plan import call

    ctx = agent.ctx
    if n is None:
        m, kv = head_of(ctx, (yield head_call(ctx)))
        if m is None:
            raise CheckpointNotFound(f"agent {agent.agent_id!r} has no checkpoint in {ctx.ns!r}")
    else:
        try:
            kv = yield call("get", ctx.layout.ckpt(n), ns=ctx.ns)
        except NotFound:
            raise CheckpointNotFound(f"agent {agent.agent_id!r} has no checkpoint #{n}") from None
        m = unpack_manifest(kv.value, kv.key)
    env = yield from load_envelope_plan(ctx, m)
    return checkpoint_from(m, kv.mod_revision), env


@guarded
def cmd_show(args: argparse.Namespace) -> int:
    """The agent's current checkpoint (or --ckpt N): its step, position, revision, time,
    parent, metadata and envelope header, then its state as JSON (decoded without any
    registered class: the data as stored, bytes as {"$bytes": base64})."""
    from statekeeper.client.agent import Agent
    from statekeeper.client.agent.codec import show_envelope
    from statekeeper.client.plan import run

    with open_client(args) as c:
        agent = Agent(c, args.agent_id, ns=args.ns)
        ck, env = run(c, show_plan(agent, args.ckpt))
    shown = show_envelope(env)
    if args.json:
        dump({"agent": args.agent_id, "checkpoint": _describe(ck), "state": shown["data"]})
        return EXIT_OK
    h = shown["header"] or {}
    schema = f"{h.get('schema') or 'plain'} v{h.get('version', 0)}, {h.get('format')}" + (
        f", {h['compression']}" if h.get("compression") else "")
    print(f"agent      {args.agent_id} (namespace {args.ns})")
    print(f"checkpoint #{ck.n} ({ck.kind}), parent {ck.parent if ck.parent else '-'}")
    print(f"step       {ck.step}   position {ck.position}   revision {ck.revision}")
    print(f"written    {when(ck.time_ms)}")
    print(f"size       {size(ck.size)} {'inline' if not ck.chunks else f'in {ck.chunks} chunks'}"
          f"   schema {schema}")
    print(f"metadata   {json.dumps(ck.metadata, sort_keys=True, default=str)}")
    print("state:")
    print(json.dumps(shown["data"], indent=2, sort_keys=True, ensure_ascii=False))
    return EXIT_OK


@guarded
def cmd_history(args: argparse.Namespace) -> int:
    """The agent's events, checkpoints and rollbacks, oldest first, with the store
    revision and time of each."""
    from statekeeper.client.agent import Agent
    from statekeeper.client.agent.codec import jsonable

    with open_client(args) as c:
        rows = Agent(c, args.agent_id, ns=args.ns).history(limit=args.limit)
    if args.json:
        dump([{k: jsonable(getattr(r, k)) for k in r.__slots__} for r in rows])
        return EXIT_OK
    if not rows:
        print(f"agent {args.agent_id!r} has no events or checkpoints in {args.ns!r}")
        return EXIT_OK
    print(table(("REV", "TIME", "KIND", "STEP", "SEQ", "CKPT", "TYPE", "SUMMARY"), [
        (r.revision, when(r.time_ms), r.kind, r.step, r.seq, r.ckpt and f"#{r.ckpt}", r.type,
         r.summary) for r in rows], fmt=args.write_out))
    return EXIT_OK


@guarded
def cmd_rollback(args: argparse.Namespace) -> int:
    """Make an earlier state current: the state at the end of step --to (the newest
    checkpoint with step <= --to, when no event of those steps follows it: the CLI has no
    reducer to fold them), or --ckpt N. The checkpoint's stored bytes are copied, never
    decoded, so any state rolls back (a registered class needs no registry here). A new
    checkpoint and a statekeeper.rollback event are written together; nothing is deleted
    (history still shows what came after)."""
    from statekeeper.client.agent import Agent

    if (args.to is None) == (args.ckpt is None):
        print("statekeeper: error: give exactly one of --to STEP or --ckpt N", file=sys.stderr)
        return EXIT_USAGE
    with open_client(args) as c:
        ck = Agent(c, args.agent_id, ns=args.ns).rollback(to=args.to, ckpt=args.ckpt)
    if args.json:
        dump(_describe(ck))
    else:
        print(f"agent {args.agent_id}: the state at step {ck.step} (checkpoint #{ck.parent}, "
              f"copied as stored) is current again as checkpoint #{ck.n} (revision "
              f"{ck.revision}, rolled back from #{ck.metadata.get('rollback_from')})")
    return EXIT_OK


# -- checkpoints / gc ----------------------------------------------------------------------


def parse_filters(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs as metadata filters: VALUE as JSON when it parses (1, true,
    null, "x"), else as the string it is."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--filter takes KEY=VALUE, not {pair!r}")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    return out


@guarded
def cmd_checkpoints(args: argparse.Namespace) -> int:
    """The agent's checkpoints newest first (states not loaded): number, kind, step,
    position, revision, size, time, parent and metadata; --filter k=v keeps those whose
    metadata has k == v."""
    from statekeeper.client.agent import Agent

    try:
        filters = parse_filters(args.filter)
        if clash := sorted({"limit", "before"} & filters.keys()):
            raise ValueError(f"cannot filter on metadata key {clash[0]!r} (use the API)")
    except ValueError as exc:
        print(f"statekeeper: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    limit = None if args.limit == 0 else args.limit
    with open_client(args) as c:
        agent = Agent(c, args.agent_id, ns=args.ns)
        cks = agent.checkpoints(limit=limit, **filters)
    if args.json:
        dump([_describe(ck) for ck in cks])
        return EXIT_OK
    if not cks:
        print(f"agent {args.agent_id!r} has no checkpoints"
              f"{' matching ' + ' '.join(args.filter) if args.filter else ''} in {args.ns!r}")
        return EXIT_OK
    print(table(("CKPT", "KIND", "STEP", "POSITION", "REV", "SIZE", "WRITTEN", "PARENT",
                 "METADATA"), [
        (f"#{ck.n}", ck.kind, ck.step, ck.position, ck.revision,
         size(ck.size) + ("" if not ck.chunks else f" ({ck.chunks} chunks)"), when(ck.time_ms),
         ck.parent and f"#{ck.parent}", json.dumps(ck.metadata, sort_keys=True, default=str))
        for ck in cks], fmt=args.write_out))
    return EXIT_OK


@guarded
def cmd_gc(args: argparse.Namespace) -> int:
    """Delete the agent's chunk sets that neither its head nor any checkpoint manifest
    references (left by a crash between chunks and manifest, or by retention dropping
    manifests); guarded by the head, so it never deletes what a new checkpoint uses."""
    from statekeeper.client.agent import Agent

    with open_client(args) as c:
        deleted = Agent(c, args.agent_id, ns=args.ns).gc()
    if args.json:
        dump({"agent": args.agent_id, "deleted": deleted})
    else:
        print(f"agent {args.agent_id}: deleted {deleted} orphan chunk key"
              f"{'' if deleted == 1 else 's'}")
    return EXIT_OK
