"""benchmarks/redis_streams.py against Debian's real redis-server: the managed server runs
with the durable settings the append rows claim, RedisSystem.append stores every event,
and nothing outlives the context. Skipped where redis-server or redis-py is missing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statekeeper.benchmarks.redis_streams import MEMBER, RedisSystem, find_redis

pytestmark = pytest.mark.integration


async def test_managed_redis_is_durable_and_appends_every_event(tmp_path: Path) -> None:
    redis = pytest.importorskip("redis.asyncio")
    try:
        find_redis()
    except RuntimeError:
        pytest.skip("redis-server is not installed")
    async with RedisSystem.managed_cluster(tmp_path, quiet=True) as control:
        pid = control.pid(MEMBER)
        assert pid is not None and await control.leader() == MEMBER
        system = RedisSystem(control.endpoints)
        client = redis.Redis.from_url(control.endpoints[0])  # a second client checks
        await system.setup()
        try:
            await system.append("s01", [b"e" * 256])
            await system.append("s01", [b"f" * 256] * 100)
            assert await client.xlen("s01") == 101
            assert (await client.config_get("appendfsync"))["appendfsync"] == "always"
            assert (await client.config_get("appendonly"))["appendonly"] == "yes"
            assert (await client.config_get("save"))["save"] == ""
        finally:
            await system.teardown()
            await client.aclose()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert any(p.name.startswith("appendonly") for p in (tmp_path / MEMBER).rglob("*"))
