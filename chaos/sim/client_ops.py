"""The ops of the simulated clients (chaos.sim.workload), each sent to one node and
recorded in a chaos history (chaos/history.py's format, so the chaos checkers read it).

A client sends an op to a node with SimNode.start_request and waits for it on virtual
time (asyncio.wait_for over asyncio.shield: the node's task is never cancelled by the
client, as a real server does not stop working when its client gives up). The outcome,
as node/api/routes.py and node/proposer.py give it:
- an answer without "error": ok;
- an answer with "error" (compare_failed, expectation_failed, fence_mismatch, lock_held,
  lock_not_held, ...): the op was applied as a refusal, nothing changed: fail;
- OpError "unavailable": nothing was submitted (no leader known, lost leadership before
  proposing, a read that could not be made safe): fail;
- any other OpError ("timeout": the entry was proposed, it may still commit), no answer
  within the client's timeout (the node died or is cut off: its task never completes),
  any other exception: unknown (history "info") for a write, fail for a read (a read has
  no effect; the checkers drop it either way).

Values are text in the history and UTF-8 bytes on the wire; every write's value is
unique ("c{client}-{n}"), which the lost / duplicated write checks need.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from statekeeper.chaos.history import HistoryWriter, Op, parse_events
from statekeeper.node.errors import OpError

NS = "sim"
KEYS = tuple(f"k{i}" for i in range(8))  # few keys: ops conflict
STREAMS = ("s0", "s1")
LOCK_NAME = "L"
LOCK_KEY = "locked"  # written only by fenced puts (chaos.checker.locks)
LEASE_TTL_MS = 3000
REPLAYABLE = 32  # acknowledged puts a client keeps to replay (op_replay)

OK, FAIL, UNKNOWN = "ok", "fail", "info"


@dataclass
class Answer:
    outcome: str  # ok / fail / info (chaos.history's names)
    result: dict = field(default_factory=dict)  # the node's answer (ok, or a refusal)
    error: str | None = None  # the error code (fail / info)
    node: str = ""


def _drain(task: asyncio.Task) -> None:
    """Retrieve a late task's exception (nobody awaits it once the client gave up)."""
    if not task.cancelled():
        task.exception()


class Recorder:
    """The history (a HistoryWriter on virtual time, in memory) and the op counts."""

    def __init__(self, clock) -> None:
        self._buf = io.StringIO()
        self.history = HistoryWriter(self._buf, clock=lambda: int(clock.now * 1e9))
        self.counts: Counter[tuple[str, str]] = Counter()

    def ops(self) -> list[Op]:
        text = self._buf.getvalue()
        return parse_events(json.loads(line) for line in text.splitlines() if line)

    def events(self) -> list[dict]:
        return [json.loads(line) for line in self._buf.getvalue().splitlines() if line]


async def send(node, body: dict, timeout: float, write: bool, consistency: str = "linearizable"):
    """One request to `node`; the Answer (see the module docstring)."""
    task = node.start_request(body, consistency)
    task.add_done_callback(_drain)
    try:
        res = await asyncio.wait_for(asyncio.shield(task), timeout)
    except OpError as e:
        definite = e.code == "unavailable" or not write
        return Answer(FAIL if definite else UNKNOWN, error=e.code, node=node.node_id)
    except TimeoutError:
        return Answer(UNKNOWN if write else FAIL, error="client_timeout", node=node.node_id)
    except Exception as e:  # noqa: BLE001 - whatever it was, the outcome is not known
        return Answer(UNKNOWN if write else FAIL, error=repr(e), node=node.node_id)
    if isinstance(res, dict) and "error" in res:
        err = res["error"]
        return Answer(FAIL, result=err, error=err.get("code"), node=node.node_id)
    return Answer(OK, result=res, node=node.node_id)


def _refusal(err: dict) -> dict:
    """The fields of a refusal the checkers read (a 409's last_seq / exists, a
    fence_mismatch's holder_fence)."""
    return {k: err[k] for k in ("last_seq", "exists", "holder_fence") if k in err}


def text(value: Any) -> Any:
    # a lock's waiter keys hold binary records: never a decode error in a check
    return (
        value.decode(errors="backslashreplace") if isinstance(value, bytes | bytearray) else value
    )


def kv_fields(kv: dict | None) -> dict:
    """What a get's ok event records of the kv read."""
    if kv is None:
        return {"value": None}
    return {"value": text(kv["value"]), "mod_revision": kv["mod_revision"]}


def stream_rows(events: list[dict]) -> list[list]:
    """[seq, id, data] of each event, as chaos.checker.streams takes them."""
    return [[e["seq"], e.get("id"), text(e["data"])] for e in events]


@dataclass
class ClientState:
    """What one client remembers: the values it last saw (txn compares), each stream's
    last_seq, and the unknown writes waiting for their re-send on another node."""

    process: int
    n: int = 0  # ops started (names values, event ids and idempotency keys)
    seen: dict[str, Any] = field(default_factory=dict)
    last_seq: dict[str, int | None] = field(default_factory=dict)
    retries: list[tuple] = field(default_factory=list)  # (kind, args, node it went to)
    acked: list[tuple] = field(default_factory=list)  # (key, value, ik, op id): op_replay

    def next_name(self) -> tuple[str, str]:
        self.n += 1
        return f"c{self.process}-{self.n}", f"ik-{self.process}-{self.n}"


class ClientOps:
    """The op kinds of a simulated client, mixed into chaos.sim.workload.Workload (which
    gives `rec`, `timeout` and `pick(rng, avoid)`, the node to send to)."""

    rec: Recorder
    timeout: float

    def pick(self, rng, avoid: str | None = None): ...

    def _count(self, kind: str, a: Answer) -> Answer:
        self.rec.counts[(kind, a.outcome)] += 1
        return a

    def _finish(self, op_id, a: Answer, **ok_fields) -> None:
        h = self.rec.history
        if a.outcome == OK:
            h.ok(op_id, node=a.node, **ok_fields)
        elif a.outcome == FAIL:
            h.fail(op_id, error=a.error, node=a.node, **_refusal(a.result))
        else:
            h.info(op_id, error=a.error, node=a.node)

    # -- kv -------------------------------------------------------------------------
    async def op_put(
        self, st: ClientState, node, rng, retry: tuple | None = None, replay: bool = False
    ) -> None:
        """A put with an idempotency key; an unknown outcome is re-sent later on another
        node with the same key and value (up to twice): one logical write. `replay`: the
        re-send of an acknowledged put (op_replay)."""
        if retry is None:
            key = rng.choice(KEYS)
            value, ik = st.next_name()
            extra: dict = {}
        else:
            key, value, ik, first, left = retry
            extra = {"resend_of": first}
        body = {"op": "put", "ns": NS, "key": key, "value": value.encode(), "idempotency_key": ik}
        op_id = self.rec.history.invoke(
            st.process, "put", key, value=value, idempotency_key=ik, **extra
        )
        counted = "put_replay" if replay else "put_retry" if retry else "put"
        a = self._count(counted, await send(node, body, self.timeout, True))
        self._finish(
            op_id, a, revision=a.result.get("revision"), replayed=bool(a.result.get("replayed"))
        )
        if replay:  # it wrote nothing (or was applied again: the checks say so)
            return
        if a.outcome == OK:
            st.seen[key] = value
            if retry is None:
                st.acked = [*st.acked[-(REPLAYABLE - 1) :], (key, value, ik, op_id)]
        elif a.outcome == UNKNOWN:
            st.seen.pop(key, None)
            first, left = (op_id, 2) if retry is None else (retry[3], retry[4])
            if left > 0:
                st.retries.append(("put", (key, value, ik, first, left - 1), a.node))

    async def op_replay(self, st: ClientState, node, rng) -> None:
        """An agent back from a crash re-sends a write it had sent (and was answered)
        seconds ago: a put acknowledged earlier, same key, value and idempotency key. Within
        retention.idempotency_seconds (24 h) it must be answered `replayed` with the first
        revision; one applied again is a duplicate application (checker, check 1). The
        re-sends of unknown writes come at once, so without this nothing tests the window."""
        if not st.acked:
            return await self.op_put(st, node, rng)
        key, value, ik, first = rng.choice(st.acked)
        await self.op_put(st, node, rng, retry=(key, value, ik, first, 0), replay=True)

    async def op_get(self, st: ClientState, node, rng, serializable: bool = False) -> None:
        key = rng.choice(KEYS)
        extra = {"consistency": "serializable"} if serializable else {}
        op_id = self.rec.history.invoke(st.process, "get", key, **extra)
        consistency = "serializable" if serializable else "linearizable"
        body = {"op": "get", "ns": NS, "key": key}
        a = await send(node, body, self.timeout, False, consistency)
        self._count("get_serializable" if serializable else "get", a)
        if a.outcome != OK:
            self._finish(op_id, a)
            return
        fields = kv_fields(a.result.get("kv"))
        self._finish(op_id, a, revision=a.result["revision"], **fields)
        if not serializable:
            st.seen[key] = fields["value"]

    async def op_txn(self, st: ClientState, node, rng) -> None:
        """Compare key a to the value last seen; success: put a (and b, or get b);
        failure: get both. a and b are a fixed pair (k0/k1, ...): small partitions."""
        i = rng.randrange(0, len(KEYS), 2)
        a, b = KEYS[i], KEYS[i + 1]
        if rng.random() < 0.5:
            a, b = b, a
        va, ik = st.next_name()
        vb = f"{va}b"  # unique too: no other write ends in "b"
        expect = st.seen.get(a)
        both = rng.random() < 0.5
        cmp = (
            {"key": a, "target": "value", "op": "==", "value": expect.encode()}
            if expect is not None
            else {"key": a, "target": "exists", "op": "==", "value": False}
        )
        success = [{"op": "put", "key": a, "value": va.encode()}]
        success.append(
            {"op": "put", "key": b, "value": vb.encode()} if both else {"op": "get", "key": b}
        )
        failure = [{"op": "get", "key": a}, {"op": "get", "key": b}]
        body = {"op": "txn", "ns": NS, "compare": [cmp], "success": success,
                "failure": failure, "idempotency_key": ik}  # fmt: skip
        op_id = self.rec.history.invoke(
            st.process, "txn", keys=[a, b],
            compare=[{"key": a, "value": expect, "op": "=="}],
            success=[{"f": "put", "key": a, "value": va},
                     {"f": "put", "key": b, "value": vb} if both else {"f": "get", "key": b}],
            failure=[{"f": "get", "key": a}, {"f": "get", "key": b}],
            idempotency_key=ik,
        )  # fmt: skip
        ans = self._count("txn", await send(node, body, self.timeout, True))
        if ans.outcome != OK:
            self._finish(op_id, ans)
            st.seen.pop(a, None)
            return
        results = [text((r.get("kv") or {}).get("value")) for r in ans.result["results"]]
        ok = ans.result["succeeded"]
        self._finish(op_id, ans, succeeded=ok, revision=ans.result["revision"], results=results)
        st.seen[a] = va if ok else results[0]
        if ok and both:
            st.seen[b] = vb

    # -- streams (chaos.checker.streams) -------------------------------------------
    async def op_append(self, st: ClientState, node, rng, retry: tuple | None = None) -> None:
        """1-3 events with unique ids, expecting the last_seq this client knows (else
        "any"); an unknown append is re-sent later, same events, on another node, and the
        store's event-id dedup must answer "duplicate" for what was stored."""
        if retry is None:
            stream = rng.choice(STREAMS)
            name, _ = st.next_name()
            events = [{"id": f"{name}-{j}", "data": f"{name}-{j} of {stream}"}
                      for j in range(rng.randint(1, 3))]  # fmt: skip
            known = st.last_seq.get(stream)
            expect: Any = known if known is not None and rng.random() < 0.7 else "any"
            extra: dict = {}
        else:
            stream, events, expect, first, left = retry
            extra = {"retry_of": first}
        _, ik = st.next_name()
        op_id = self.rec.history.invoke(st.process, "append", stream=stream, events=events,
                                        expect=expect, idempotency_key=ik, **extra)  # fmt: skip
        body = {"op": "append", "ns": NS, "stream": stream, "expect": expect, "idempotency_key": ik,
                "events": [{"id": e["id"], "data": e["data"].encode()} for e in events]}  # fmt: skip
        a = self._count(
            "append_retry" if retry else "append", await send(node, body, self.timeout, True)
        )
        r = a.result
        if a.outcome == OK:
            st.last_seq[stream] = r["last_seq"]
            self._finish(op_id, a, revision=r["revision"], first_seq=r["first_seq"],
                         last_seq=r["last_seq"], seqs=[e["seq"] for e in r["events"]],
                         duplicates=[e["duplicate"] for e in r["events"]])  # fmt: skip
            return
        self._finish(op_id, a)
        st.last_seq[stream] = r.get("last_seq") if a.error == "expectation_failed" else None
        if a.outcome == UNKNOWN:
            first, left = (op_id, 2) if retry is None else (retry[3], retry[4])
            if left > 0:
                again = expect if rng.random() < 0.5 else "any"
                st.retries.append(("append", (stream, events, again, first, left - 1), a.node))

    async def op_read_stream(self, st: ClientState, node, rng) -> None:
        """A linearizable read of a whole stream, forward from seq 1, page by page (the
        later pages follow the first page's continuation: its revision)."""
        stream = rng.choice(STREAMS)
        op_id = self.rec.history.invoke(
            st.process, "read_stream", stream=stream, start=1, direction="forward"
        )
        body: dict = {"op": "read_stream", "ns": NS, "stream": stream, "start": 1, "limit": 50}
        a = await send(node, body, self.timeout, False)
        first, rows, pages = a.result, [], 0
        while a.outcome == OK:
            rows += stream_rows(a.result["events"])
            pages += 1
            if not a.result.get("more"):
                break
            body = {"op": "read_stream", "ns": NS, "stream": stream, "limit": 50,
                    "continuation": a.result["continuation"]}  # fmt: skip
            a = await send(node, body, self.timeout, False)
        self._count("read_stream", a)
        if a.outcome != OK:
            self._finish(op_id, a)
            return
        st.last_seq[stream] = first["last_seq"]
        self._finish(op_id, a, revision=first["revision"], last_seq=first["last_seq"],
                     events=rows, pages=pages)  # fmt: skip

    # -- leases and locks (chaos.checker.locks) -------------------------------------
    async def _lease(self, st: ClientState, op: str, node, **fields) -> Answer:
        """A lease op (not in the history: no chaos checker reads leases; counted)."""
        body = {"op": op, **fields}
        if op == "lease_grant":
            body["ns"] = NS
        return self._count(op, await send(node, body, self.timeout, True))

    async def op_lock(self, st: ClientState, node, rng) -> None:
        """One hold: grant a lease, acquire the lock without waiting (lock_held: fail,
        nothing written), 1-3 fenced puts of LOCK_KEY with keepalives in between,
        release, revoke the lease (retried on other nodes: a lease left behind would
        hold the lock for good, the simulated node runs no lease expiry)."""
        g = await self._lease(st, "lease_grant", node, ttl_ms=LEASE_TTL_MS)
        if g.outcome != OK:
            return
        lease = g.result["lease"]
        h, p = self.rec.history, st.process
        op_id = h.invoke(p, "lock_acquire", name=LOCK_NAME, lease=lease, locker=p)
        body = {"op": "lock_acquire", "ns": NS, "name": LOCK_NAME, "lease": lease, "wait": False}
        a = self._count("lock_acquire", await send(node, body, self.timeout, True))
        if a.outcome == OK:
            self._finish(op_id, a, fence=a.result["fence"], revision=a.result["revision"],
                         key=a.result["key"])  # fmt: skip
            await self._hold(st, rng, a.result["fence"], lease)
        else:
            self._finish(op_id, a)
        for _ in range(5):  # whichever node answers
            r = await self._lease(st, "lease_revoke", self.pick(rng) or node, lease=lease)
            if r.outcome == OK or r.error == "lease_not_found":
                break
            await asyncio.sleep(0.2)

    async def _hold(self, st: ClientState, rng, fence: int, lease: int) -> None:
        h, p = self.rec.history, st.process
        for _ in range(rng.randint(1, 3)):
            node = self.pick(rng)
            if node is None:
                break
            value, ik = st.next_name()
            value = f"L{p}-f{fence}-{value}"
            op_id = h.invoke(p, "fenced_put", key=LOCK_KEY, value=value, fence=fence,
                             idempotency_key=ik, locker=p)  # fmt: skip
            body = {"op": "put", "ns": NS, "key": LOCK_KEY, "value": value.encode(),
                    "fence": {"name": LOCK_NAME, "token": fence}, "idempotency_key": ik}  # fmt: skip
            a = self._count("fenced_put", await send(node, body, self.timeout, True))
            self._finish(op_id, a, revision=a.result.get("revision"))
            if a.error == "fence_mismatch":
                break
            await asyncio.sleep(rng.uniform(0.01, 0.1))
            await self._lease(st, "lease_keepalive", node, leases=[lease])
        node = self.pick(rng)
        if node is None:
            return
        op_id = h.invoke(p, "lock_release", name=LOCK_NAME, fence=fence)
        body = {"op": "lock_release", "ns": NS, "name": LOCK_NAME, "fence": fence}
        a = self._count("lock_release", await send(node, body, self.timeout, True))
        self._finish(op_id, a, revision=a.result.get("revision"), held=a.result.get("held"))
