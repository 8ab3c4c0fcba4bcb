"""Child process of test_effects.py: one runner of an effect that charges a "bank".

Usage: python effect_child.py ENDPOINTS NS KEY DIR [--ttl S] [--stop-at before|during|after]
       [--sleep S] [--no-wait] [--async] [--runner ID] [--timeout S]

fn appends "call <key> <attempt> <maybe_happened>" to DIR/calls.log, then charges DIR's bank
with ``ctx.idempotency_key`` (a charge is applied once per idempotency key: a file per key,
made with an atomic link; every applied charge is a line of DIR/charges.log), sleeps
``--sleep`` and returns the charge's receipt. ``--stop-at`` prints "AT <step>" and blocks
(reading stdin: the test SIGKILLs or SIGSTOPs it there; a line on stdin lets it go on):
``before`` as fn is entered (claimed, nothing done), ``during`` after the charge (fn has not
returned), ``after`` once fn returned, before the DONE txn is sent. At the end it prints
"RESULT <json {result, ctx}>" (ctx: null when fn was not called) or "ERROR <class> <json>".
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from statekeeper.client import AsyncClient, Client, StatekeeperError  # noqa: E402


def charge(directory: Path, idempotency_key: str, amount: int) -> str:
    """Apply a charge once per idempotency key; returns its receipt."""
    bank = directory / "bank"
    bank.mkdir(exist_ok=True)
    final = bank / hashlib.sha256(idempotency_key.encode()).hexdigest()
    if not final.exists():
        receipt = f"ch_{uuid.uuid4().hex[:12]}"
        tmp = bank / f".{receipt}"
        tmp.write_text(json.dumps({"receipt": receipt, "key": idempotency_key, "amount": amount}))
        try:
            os.link(tmp, final)  # atomic: exactly one charge per key wins
            with open(directory / "charges.log", "a") as f:
                f.write(f"charge {idempotency_key} {receipt} {amount}\n")
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return str(json.loads(final.read_text())["receipt"])


def stop(args: argparse.Namespace, step: str) -> None:
    if args.stop_at == step:
        print("AT", step, flush=True)
        sys.stdin.readline()


def record_call(args: argparse.Namespace, ctx: Any, seen: list[Any]) -> None:
    seen.append(
        {
            "attempt": ctx.attempt,
            "maybe_happened": ctx.maybe_happened,
            "idempotency_key": ctx.idempotency_key,
            "fence": ctx.fence,
        }
    )
    with open(Path(args.dir) / "calls.log", "a") as f:
        f.write(f"call {ctx.key} {ctx.attempt} {ctx.maybe_happened} {os.getpid()}\n")


def is_done_txn(success: Any) -> bool:
    return any(op.get("op") == "put" and op["key"].startswith("__effects/") for op in success)


def run_sync(args: argparse.Namespace, seen: list[Any]) -> Any:
    with Client(args.endpoints.split(","), ns=args.ns) as c:
        txn = c.txn

        def stopping_txn(compare: Any, success: Any, *a: Any, **kw: Any) -> Any:
            if is_done_txn(success):
                stop(args, "after")
            return txn(compare, success, *a, **kw)

        c.txn = stopping_txn  # type: ignore[method-assign]

        def fn(ctx: Any) -> str:
            stop(args, "before")
            record_call(args, ctx, seen)
            receipt = charge(Path(args.dir), ctx.idempotency_key, 40_00)
            stop(args, "during")
            time.sleep(args.sleep)
            return receipt

        return c.effects.run(args.key, fn, **run_options(args))


def run_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "ttl": args.ttl,
        "wait": not args.no_wait,
        "runner": args.runner,
        "timeout": args.timeout,
    }


async def run_async(args: argparse.Namespace, seen: list[Any]) -> Any:
    async with AsyncClient(args.endpoints.split(","), ns=args.ns) as c:
        txn = c.txn

        async def stopping_txn(compare: Any, success: Any, *a: Any, **kw: Any) -> Any:
            if is_done_txn(success):
                await asyncio.to_thread(stop, args, "after")
            return await txn(compare, success, *a, **kw)

        c.txn = stopping_txn  # type: ignore[method-assign]

        async def fn(ctx: Any) -> str:
            await asyncio.to_thread(stop, args, "before")
            record_call(args, ctx, seen)
            receipt = charge(Path(args.dir), ctx.idempotency_key, 40_00)
            await asyncio.to_thread(stop, args, "during")
            await asyncio.sleep(args.sleep)
            return receipt

        return await c.effects.run(args.key, fn, **run_options(args))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("endpoints")
    p.add_argument("ns")
    p.add_argument("key")
    p.add_argument("dir")
    p.add_argument("--ttl", type=float, default=2.0)
    p.add_argument("--stop-at", choices=("before", "during", "after"))
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--no-wait", action="store_true")
    p.add_argument("--async", dest="use_async", action="store_true")
    p.add_argument("--runner")
    p.add_argument("--timeout", type=float)
    args = p.parse_args()
    seen: list[Any] = []
    try:
        result = asyncio.run(run_async(args, seen)) if args.use_async else run_sync(args, seen)
    except StatekeeperError as e:
        print("ERROR", type(e).__name__, json.dumps({"code": e.code, **e.details}), flush=True)
        return
    print("RESULT", json.dumps({"result": result, "ctx": seen[0] if seen else None}), flush=True)


if __name__ == "__main__":
    main()
