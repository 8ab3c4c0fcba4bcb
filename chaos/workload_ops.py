"""The ops of a workload client (``chaos.workload``): get, put, cas, delete and txn on the
shared keys, and the idempotency probes and their re-sends, each recorded in the history
as it went."""

from __future__ import annotations

import time
from typing import Any

from statekeeper.client import Conflict, NotFound, StatekeeperError

__all__ = ["WorkloadOps"]


class WorkloadOps:
    """The ``_op_<kind>`` methods of :class:`chaos.workload.Workload`, which they are
    mixed into: each records its invoke, runs the op with retries (``_run_op``) and
    records the outcome (``_finish``).
    """

    async def _op_get(self, route, p, n, key, seen, rng, serializable: bool = False) -> None:
        extra = {"consistency": "serializable"} if serializable else {}
        op_id = self.history.invoke(p, "get", key, **extra)
        outcome, res = await self._run_op(op_id, route, lambda c: c.get(key, **extra))
        node = route.node_id
        if outcome != "ok":
            self._finish(op_id, outcome, res, node=node)
            return
        if isinstance(res, NotFound):
            if not serializable:
                seen[key] = (None, 0)
            self._finish(op_id, "ok", value=None, revision=res.revision, node=node)
            return
        value = res.text
        if not serializable:
            seen[key] = (value, res.mod_revision)
        self._finish(
            op_id, "ok", value=value, revision=res.revision, mod_revision=res.mod_revision,
            node=node,
        )

    async def _op_put(self, route, p, n, key, seen, rng) -> None:
        value, ik = self._names(p, n)
        op_id = self.history.invoke(p, "put", key, value=value, idempotency_key=ik)
        outcome, res = await self._run_op(
            op_id, route, lambda c: c.put(key, value, idempotency_key=ik)
        )
        if outcome == "ok":
            seen[key] = (value, res.revision)
            self._finish(op_id, "ok", revision=res.revision, node=route.node_id)
        else:
            self._finish(op_id, outcome, res, node=route.node_id)

    async def _op_probe(self, route, p, n, resends, rng) -> None:
        """An idempotency probe: a put to a key of its own, re-sent later (same key)."""
        value, ik = self._names(p, n)
        key = f"idem-{p}-{n}"
        op_id = self.history.invoke(p, "put", key, value=value, idempotency_key=ik)
        outcome = await self._probe_put(route, op_id, key, value, ik)
        if outcome != "fail":  # info: it may have been applied; a re-send must not be again
            times = 2 if rng.random() < 1 / 3 else 1
            due = time.monotonic() + rng.uniform(*self.config.resend_delay)
            resends.append((due, key, value, ik, op_id, times))

    async def _op_resend(self, route, p, item, resends, rng) -> None:
        _, key, value, ik, first, times = item
        op_id = self.history.invoke(
            p, "put", key, value=value, idempotency_key=ik, resend_of=first
        )
        await self._probe_put(route, op_id, key, value, ik)
        if times > 1:
            due = time.monotonic() + rng.uniform(*self.config.resend_delay)
            resends.append((due, key, value, ik, first, times - 1))

    async def _probe_put(self, route, op_id, key, value, ik) -> str:
        """Run the put of a probe or of a re-send and record its outcome (returned), with
        whether the node replayed the stored result."""
        outcome, res = await self._run_op(
            op_id, route, lambda c: c.put(key, value, idempotency_key=ik)
        )
        if outcome == "ok":
            self._finish(
                op_id, "ok", revision=res.revision, replayed=res.replayed, node=route.node_id
            )
        else:
            self._finish(op_id, outcome, res, node=route.node_id)
        return outcome

    async def _op_delete(self, route, p, n, key, seen, rng) -> None:
        _, ik = self._names(p, n)
        op_id = self.history.invoke(p, "delete", key, idempotency_key=ik)
        outcome, res = await self._run_op(
            op_id, route, lambda c: c.delete(key, idempotency_key=ik)
        )
        if outcome == "ok":
            seen[key] = (None, 0)
            self._finish(
                op_id, "ok", revision=res.revision, deleted=res.deleted, node=route.node_id
            )
        else:
            self._finish(op_id, outcome, res, node=route.node_id)

    async def _op_cas(self, route, p, n, key, seen, rng) -> None:
        value, ik = self._names(p, n)
        expect, mod_rev = seen.get(key, (None, 0))
        # By mod_revision, recorded by value: with unique values the two are equivalent
        # (a version would not be: it restarts at 1 after a delete).
        kw: dict[str, Any] = (
            {"expect_mod_revision": mod_rev} if expect is not None else {"must_not_exist": True}
        )
        op_id = self.history.invoke(p, "cas", key, value=value, expect=expect, idempotency_key=ik)
        outcome, res = await self._run_op(
            op_id, route, lambda c: c.cas(key, value, idempotency_key=ik, **kw)
        )
        node = route.node_id
        if outcome != "ok":
            self._finish(op_id, outcome, res, node=node)
            return
        if isinstance(res, Conflict):
            cur = res.current
            if cur is None:
                seen[key] = (None, 0)
                self._finish(
                    op_id, "ok", succeeded=False, value=None, revision=res.revision, node=node
                )
            else:
                seen[key] = (cur.text, cur.mod_revision)
                self._finish(
                    op_id,
                    "ok",
                    succeeded=False,
                    value=cur.text,
                    mod_revision=cur.mod_revision,
                    revision=res.revision,
                    node=node,
                )
            return
        seen[key] = (value, res.revision)
        self._finish(op_id, "ok", succeeded=True, revision=res.revision, node=node)

    async def _op_txn(self, route, p, n, key, seen, rng) -> None:
        from statekeeper.client import compare, ops

        keys = self.config.key_names()
        i = keys.index(key) // 2 * 2
        a, b = keys[i], keys[i + 1]
        if rng.random() < 0.5:
            a, b = b, a
        va, ik = self._names(p, n)
        vb = f"{va}b"  # still unique: no other op writes a value ending in "b"
        expect, _ = seen.get(a, (None, 0))
        cmp = compare.value(a) == expect if expect is not None else compare.missing(a)
        both = rng.random() < 0.5
        success = [ops.put(a, va), ops.put(b, vb) if both else ops.get(b)]
        failure = [ops.get(a), ops.get(b)]
        op_id = self.history.invoke(
            p,
            "txn",
            keys=[a, b],
            compare=[{"key": a, "value": expect, "op": "=="}],
            success=[
                {"f": "put", "key": a, "value": va},
                {"f": "put", "key": b, "value": vb} if both else {"f": "get", "key": b},
            ],
            failure=[{"f": "get", "key": a}, {"f": "get", "key": b}],
            idempotency_key=ik,
        )
        outcome, res = await self._run_op(
            op_id, route, lambda c: c.txn([cmp], success, failure, idempotency_key=ik)
        )
        node = route.node_id
        if outcome != "ok":
            self._finish(op_id, outcome, res, node=node)
            return
        results: list[Any] = []
        for r in res.results:
            if isinstance(r, StatekeeperError):
                results.append(None)  # never expected: the txn was validated whole
            elif hasattr(r, "mod_revision"):  # a KeyValue from a get
                results.append(r.text)
            else:
                results.append(None)  # a put's WriteResult or a get of a missing key
        if res.succeeded:
            seen[a] = (va, res.revision)
            if both:
                seen[b] = (vb, res.revision)
        elif results and results[0] is not None:
            seen[a] = (results[0], res.results[0].mod_revision)
        else:
            seen[a] = (None, 0)
        self._finish(
            op_id, "ok", succeeded=res.succeeded, revision=res.revision, results=results,
            node=node,
        )
