"""The console's Keys page data (console/views/keys.py) against a real 3-node cluster with
TLS and auth: namespaces from the token's grants, paging, decoding, revisions and diffs,
and the watch tail with its bound."""

from __future__ import annotations

import asyncio
import json

import msgpack
import pytest

from statekeeper.client import AsyncClient
from statekeeper.client.agent import encode
from statekeeper.cluster.supervisor import LocalCluster
from statekeeper.console.views import keys as kv
from tests.integration import agent_helpers
from tests.integration.cluster_fixture import mint_token

pytestmark = pytest.mark.integration

# The fixtures of the agent tests: an AsyncClient in a namespace of the test's own.
async_client, ns = agent_helpers.async_client, agent_helpers.ns


async def test_namespaces_come_from_the_tokens_grants(shared_cluster: LocalCluster) -> None:
    token = mint_token(
        shared_cluster,
        grants=[{"ns": "keys-one", "role": "reader"}, {"ns": "team-*", "role": "writer"}],
    )
    urls = [shared_cluster.url(n) for n in shared_cluster.node_ids]
    async with AsyncClient(urls, ns="team-a", token=token) as c:
        seen = await kv.visible_namespaces(c)
    assert seen.auth and seen.namespaces == ("keys-one", "team-a")
    assert seen.patterns == ("team-*",) and seen.roles["keys-one"] == "reader"


async def test_browse_pages_and_decodes(async_client: AsyncClient, ns: str) -> None:
    client = async_client
    for i in range(120):
        await client.put(f"p/{i:03d}", b"x")
    await client.put("q", b"outside the prefix")
    keys, cursor, pages = [], None, 0
    while True:
        page = await kv.browse_keys(client, ns, "p/", limit=50, cursor=cursor)
        keys += [r.key for r in page.keys]
        pages += 1
        if page.cursor is None:
            break
        cursor = page.cursor
    assert keys == [f"p/{i:03d}" for i in range(120)] and pages == 3
    values = {
        "j": (json.dumps({"a": [1, 2]}).encode(), "json", {"a": [1, 2]}),
        "m": (msgpack.packb({"b": 1}), "msgpack", {"b": 1}),
        "e": (encode({"step": 3}), "envelope", {"step": 3}),
        "t": (b"plain text", "text", None),
        "b": (b"\xff\x00\xfe", "binary", None),
    }
    for key, (raw, _, _) in values.items():
        await client.put(key, raw)
    for key, (_, fmt, data) in values.items():
        v = await kv.key_value(client, ns, key)
        assert (v.value.format, v.value.data) == (fmt, data)


async def test_revisions_walk_back_to_the_creation_and_diff(
    async_client: AsyncClient, ns: str
) -> None:
    client = async_client
    await client.put("k", b'{"n": -1}')
    await client.delete("k")  # an earlier life: not listed (version restarts at 1)
    revs = [
        (await client.put("k", json.dumps({"n": i, "same": 1}).encode())).revision for i in range(6)
    ]
    page = await kv.key_revisions(client, ns, "k", limit=4)
    assert [r.mod_revision for r in page.revisions] == revs[::-1][:4] and page.versions == 6
    rest = await kv.key_revisions(client, ns, "k", before=page.cursor)
    assert [r.mod_revision for r in rest.revisions] == revs[1::-1] and rest.cursor is None
    d = await kv.key_diff(client, ns, "k", revs[1], revs[5])
    assert [(c.op, c.path, c.old, c.new) for c in d.changes] == [("replace", "/n", 1, 5)]
    assert '-  "n": 1,' in d.lines and '+  "n": 5,' in d.lines


async def test_tail_polls_decoded_events_and_counts_what_the_ring_dropped(
    async_client: AsyncClient, ns: str
) -> None:
    client = async_client
    tail = await kv.KeyTail(client, ns, "t/", bound=3).start()
    try:
        for i in range(5):
            await client.put(f"t/{i}", json.dumps({"i": i}).encode())
        await client.delete("t/0")
        await client.put("other", b"not under the prefix")
        for _ in range(100):
            page = tail.poll(0)
            if page.cursor >= 6:
                break
            await asyncio.sleep(0.05)
        assert page.cursor == 6 and page.dropped == 3 and page.error is None
        assert [(e.type, e.key) for e in page.events] == [
            ("put", "t/3"),
            ("put", "t/4"),
            ("delete", "t/0"),
        ]
        assert page.events[0].value.data == {"i": 3} and page.events[2].value is None
        assert tail.poll(page.cursor).events == ()
    finally:
        await tail.close()
