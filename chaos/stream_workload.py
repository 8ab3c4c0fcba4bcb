"""The event-stream ops of the chaos workload (``chaos.workload``), checked by
``chaos.checker.streams``.

A few streams (``WorkloadConfig.streams``, named ``s0``, ``s1``, ...) get concurrent
appenders and readers; every non-pinned client makes a ``stream_share`` of its ops
stream ops, and pinned readers read streams whole from their node as often.

Appends: a client remembers each stream's ``last_seq`` from its last answer (an ok
append, a 409's ``last_seq``, a read); when it does not know it (first time, or after
an unknown outcome) it reads the stream's tail first (a recorded backward read of one
event). It then appends 1-3 events with ``expect=<that last_seq>`` (a share with
``expect="any"``), each with a unique id ``w{process}-{op}-{i}`` and data naming it.
Outcomes, as for kv writes (``Workload._attempts``): ``ok`` (the answer: seqs and which
events were duplicates), ``fail`` (``expectation_failed`` 409 with the server's
``last_seq`` and ``exists``, another 4xx, or nothing submitted), ``info`` (unknown).
An unknown append is re-sent later (``stream_resend_delay``, up to ``stream_resends``
times) with the same events, same ids and data, as an agent replaying its log would:
the store must answer the ids already stored as ``duplicate`` and never store them twice.
So is a ``stream_resend_share`` of the acknowledged appends (once; every event must come
back ``duplicate`` at the seq first acknowledged, even when the expectation no longer
holds). Half of the re-sends keep the first attempt's expectation, half use ``"any"``. Every
attempt of one history op carries one ``idempotency_key``; a re-send is a new op with a
new one, so it is the event-id dedup that is exercised, not the op-level replay.

Reads: forward from seq 1, page by page (``stream_page`` events, continuation tokens:
every page at the first page's revision), linearizable, recorded as one op with every
event seen (seq, id, data) and the ``last_seq`` served.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from statekeeper.chaos.stream_reads import read_whole, seen
from statekeeper.client import StatekeeperError

__all__ = ["StreamOps", "StreamState"]


@dataclass
class _Resend:
    due: float
    stream: str
    events: list[dict[str, str]]
    expect: Any
    first: int | str  # the op id of the first attempt
    left: int  # re-sends left after this one


@dataclass
class StreamState:
    """One client's view of the streams: the last_seq it knows (None: unknown) and the
    unknown appends waiting for their re-send."""

    last_seq: dict[str, int | None] = field(default_factory=dict)
    resends: list[_Resend] = field(default_factory=list)

    def due(self, now: float) -> _Resend | None:
        ready = [r for r in self.resends if r.due <= now]
        if not ready:
            return None
        item = min(ready, key=lambda r: r.due)
        self.resends.remove(item)
        return item


class StreamOps:
    """The stream ops of :class:`chaos.workload.Workload` (mixed into it)."""

    async def _stream_turn(self, route, p, n, rng, st: StreamState) -> bool:
        """Run a due re-send, or (a ``stream_share`` of the time) a stream op; returns
        whether it did one."""
        cfg = self.config
        streams = cfg.stream_names()
        if not streams:
            return False
        item = st.due(time.monotonic())
        if item is not None:
            await self._append(route, p, n, item.stream, item.events, item.expect, st, rng, item)
            return True
        if rng.random() >= cfg.stream_share:
            return False
        stream = rng.choice(streams)
        if rng.random() < cfg.stream_read_share:
            await self._op_read_stream(route, p, n, stream)
        else:
            await self._op_append(route, p, n, stream, rng, st)
        return True

    async def _op_append(self, route, p, n, stream: str, rng, st: StreamState) -> None:
        cfg = self.config
        expect: Any = "any"
        if rng.random() >= cfg.stream_any_share:
            known = st.last_seq.get(stream)
            if known is None:
                known = await self._read_tail(route, p, stream, st)
                if known is None:
                    return  # could not learn it: the next turn tries again
            expect = known
        events = [
            {"id": f"w{p}-{n}-{i}", "data": f"event w{p}-{n}-{i} of {stream}"}
            for i in range(rng.randint(1, 3))
        ]
        await self._append(route, p, n, stream, events, expect, st, rng)

    async def _append(
        self,
        route,
        p,
        n,
        stream: str,
        events: list[dict[str, str]],
        expect: Any,
        st: StreamState,
        rng,
        resend: _Resend | None = None,
    ) -> None:
        """One append op (a first attempt, or the re-send ``resend``), recorded."""
        _, ik = self._names(p, n)
        extra = {"retry_of": resend.first} if resend is not None else {}
        op_id = self.history.invoke(
            p, "append", stream=stream, events=events, expect=expect, idempotency_key=ik, **extra
        )
        payload = [{"data": e["data"].encode(), "id": e["id"]} for e in events]
        outcome, res = await self._run_op(
            op_id, route, lambda c: c.append(stream, payload, expect=expect, idempotency_key=ik)
        )
        node = route.node_id
        if outcome == "ok" and isinstance(res, StatekeeperError):
            outcome = self._append_refused(op_id, stream, res, st, node)
        elif outcome == "ok":
            st.last_seq[stream] = res.last_seq
            self._finish(
                op_id,
                "ok",
                revision=res.revision,
                first_seq=res.first_seq,
                last_seq=res.last_seq,
                seqs=[e.seq for e in res.events],
                duplicates=[e.duplicate for e in res.events],
                replayed=res.replayed,
                node=node,
            )
        else:
            st.last_seq[stream] = None
            self._finish(op_id, outcome, res, node=node)
        self._plan_resend(op_id, outcome, stream, events, expect, st, rng, resend)

    def _plan_resend(self, op_id, outcome, stream, events, expect, st, rng, resend) -> None:
        """Re-send an unknown append (up to ``stream_resends`` times), and a
        ``stream_resend_share`` of the acknowledged first attempts (once), later, with
        the same events: half keep the expectation, half say "any"."""
        cfg = self.config
        if outcome == "info":
            left = cfg.stream_resends if resend is None else resend.left
        elif outcome == "ok" and resend is None and rng.random() < cfg.stream_resend_share:
            left = 1
        else:
            return
        if left > 0:
            first = op_id if resend is None else resend.first
            again = expect if rng.random() < 0.5 else "any"
            due = time.monotonic() + rng.uniform(*cfg.stream_resend_delay)
            st.resends.append(_Resend(due, stream, events, again, first, left - 1))

    def _append_refused(self, op_id, stream: str, err: StatekeeperError, st, node) -> str:
        """A definite answer that is not a result: ``expectation_failed`` is a failure
        (nothing applied; its last_seq is news); anything else (a Conflict / NotFound
        the spec does not give an append) is recorded unknown, never guessed. Returns
        the outcome recorded."""
        if err.code != "expectation_failed":
            st.last_seq[stream] = None
            self._finish(op_id, "info", err, node=node)
            return "info"
        self._note(err.code)
        last = err.last_seq
        st.last_seq[stream] = last
        where = {"node": node} if node is not None else {}
        self.history.fail(op_id, error=err.code, last_seq=last, exists=err.exists, **where)
        self.counters.fail += 1
        return "fail"

    async def _read_tail(self, route, p, stream: str, st: StreamState) -> int | None:
        """A recorded backward read of the last event: the stream's last_seq, or None."""
        op_id = self.history.invoke(
            p, "read_stream", stream=stream, start=None, direction="backward", limit=1
        )
        outcome, res = await self._run_op(
            op_id, route, lambda c: c.read_stream(stream, direction="backward", limit=1)
        )
        if outcome != "ok" or isinstance(res, StatekeeperError):
            self._finish(op_id, "info" if outcome == "ok" else outcome, res, node=route.node_id)
            return None
        st.last_seq[stream] = res.last_seq
        self._finish(
            op_id,
            "ok",
            revision=res.revision,
            last_seq=res.last_seq,
            events=seen(res.events),
            pages=1,
            node=route.node_id,
        )
        return res.last_seq

    async def _op_read_stream(self, route, p, n, stream: str) -> None:
        """A recorded linearizable read of the whole stream, forward from seq 1."""
        op_id = self.history.invoke(p, "read_stream", stream=stream, start=1, direction="forward")
        outcome, res = await self._run_op(
            op_id, route, lambda c: read_whole(c, stream, self.config.stream_page)
        )
        if outcome != "ok" or isinstance(res, StatekeeperError):
            self._finish(op_id, "info" if outcome == "ok" else outcome, res, node=route.node_id)
            return
        first, events, pages = res
        self._finish(
            op_id,
            "ok",
            revision=first.revision,
            last_seq=first.last_seq,
            events=seen(events),
            pages=pages,
            node=route.node_id,
        )
