"""A retry under the NOSPACE alarm gets its recorded answer, not 507 (issue 26, defect 3,
server side).

The node's HTTP layer with a real store (RocksDB in tmp_path) behind a scripted raft log
on one process: `Log` applies each entry to the store in log order, and while `lagging`
holds them back, as a follower that has not applied what the leader committed. The node
here is a follower (is_leader False), so a linearizable point is a barrier entry.
Before the fix the quota check ran before anything looked at the idempotency record: a
retry of an applied put got 507 "nothing was applied"."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from statekeeper.node import entry
from statekeeper.node.api.routes import Api
from statekeeper.node.api.server import Request
from statekeeper.node.config import ClusterConfig, Limits, NodeConfig
from statekeeper.node.ops.core import validate_op
from statekeeper.node.proposer import Proposer
from statekeeper.node.quota.alarm import MIB, Sample, StorageQuota
from statekeeper.node.raft import SubmitError
from statekeeper.node.store import StateMachine


class Log:
    """A committed raft log applied to `sm` in order (`lagging`: not yet, on this node);
    `refuse` answers every later submit NO_LEADER (no barrier possible)."""

    def __init__(self, sm: StateMachine) -> None:
        self.sm = sm
        self.held: list[tuple[int, bytes, object]] = []
        self.index = 0
        self.lagging = False
        self.refuse = False

    def submit(self, payload: bytes, cb) -> None:
        if self.refuse:
            cb(None, SubmitError.NO_LEADER)
            return
        self.index += 1
        self.held.append((self.index, payload, cb))
        if not self.lagging:
            while self.held:
                index, data, done = self.held.pop(0)
                done(self.sm.apply(index, data), None)


@pytest.fixture
def node(tmp_path: Path):
    sm = StateMachine(tmp_path / "db")
    log = Log(sm)
    cfg = ClusterConfig(
        nodes=(NodeConfig(id="n0", host="127.0.0.1", raft_port=1, http_port=2),), secret="s"
    )
    raft = SimpleNamespace(leader_known=lambda: True, is_leader=lambda: False)
    quota = StorageQuota(16 * MIB)
    api = Api(cfg, "n0", sm=sm, raft=raft, proposer=Proposer(log.submit), quota=quota)
    yield api, log, quota
    sm.close()


def _raise_alarm(quota: StorageQuota) -> None:
    quota.sample(Sample(usage_bytes=17 * MIB, free_bytes=10_000 * MIB, total_bytes=20_000 * MIB))
    assert quota.alarm is not None


def _post(path: str, body: dict) -> Request:
    headers = {"content-type": "application/json"}
    return Request("POST", path, "", headers, json.dumps(body).encode())


async def _answer(api: Api, path: str, body: dict) -> tuple[int, dict]:
    resp = await api.dispatch(_post(path, body))
    return resp.status, json.loads(resp.body)


PUT = {"key": "order-17", "value": "paid", "idempotency_key": "order-17/charge"}


def test_a_retry_of_an_applied_write_replays_under_the_alarm(node) -> None:
    api, _, quota = node

    async def main() -> None:
        status, first = await _answer(api, "/v1/kv/put", PUT)
        assert status == 200, first
        _raise_alarm(quota)  # the first attempt's answer was lost; then the disk filled
        status, again = await _answer(api, "/v1/kv/put", PUT)
        assert status == 200, again  # before the fix: 507 "... nothing was applied"
        assert again["revision"] == first["revision"] and again.get("replayed") is True
        # A batch whose writes were all applied: every one replayed, its reads served.
        batch = {"ops": [dict(PUT, op="put"), {"op": "get", "key": "order-17"}]}
        status, out = await _answer(api, "/v1/batch", batch)
        assert status == 200, out
        assert out["results"][0]["replayed"] is True
        assert out["results"][1]["kv"]["value"] == "paid"

    asyncio.run(main())


def test_a_retry_whose_first_attempt_is_not_applied_here_yet_still_replays(node) -> None:
    """The first attempt went through another node and is committed, but this node has
    not applied it: the lookup looks after a barrier (an entry proposed after the retry
    arrived, applied here after the first attempt's), so it finds the record."""
    api, log, quota = node
    first: list = []
    op = validate_op(dict(PUT, op="put", value=b"paid"), Limits())
    log.lagging = True
    stamped = entry.encode(int(time.time() * 1000), [op])  # records expire by this clock
    log.submit(stamped, lambda results, err: first.extend(results))
    _raise_alarm(quota)
    log.lagging = False  # applies the held entry once the next one (the barrier) comes

    async def main() -> None:
        status, again = await _answer(api, "/v1/kv/put", PUT)
        assert status == 200, again  # a lookup without the barrier: 507
        assert again.get("replayed") is True and again["revision"] == first[0]["revision"]

    asyncio.run(main())


def test_a_refusal_says_this_attempt_was_not_proposed(node) -> None:
    api, log, quota = node

    async def main() -> None:
        await _answer(api, "/v1/kv/put", PUT)
        _raise_alarm(quota)
        # A new key: nothing applied under it, this attempt not proposed.
        status, out = await _answer(api, "/v1/kv/put", dict(PUT, idempotency_key="other"))
        assert status == 507, out
        msg = out["error"]["message"]
        assert "this attempt was not proposed" in msg and "nothing was applied" not in msg
        # The same key with another request: apply's answer, key reused (nothing applied).
        status, out = await _answer(api, "/v1/kv/put", dict(PUT, value="refunded"))
        assert status == 422 and out["error"]["code"] == "idempotency_key_reused", out
        # No barrier possible: the node cannot know whether an earlier attempt applied.
        log.refuse = True
        status, out = await _answer(api, "/v1/kv/put", dict(PUT, idempotency_key="k3"))
        assert status == 507, out
        assert "not known to this node" in out["error"]["message"], out

    asyncio.run(main())
