"""GET /v1/openapi.json states the limits of the node that serves it: a node whose
cluster.toml says `[limits] max_value_bytes = 1000` documents 1000 (the node's HTTP server on
a free loopback port). Schemas against validation: tests/unit/test_op_contract.py."""

from __future__ import annotations

import aiohttp

from statekeeper.node import config as node_config
from statekeeper.node.api import routes as http_api


async def test_served_document_comes_from_the_node_config(tmp_path):
    path = tmp_path / "cluster.toml"
    path.write_text(
        "[limits]\nmax_value_bytes = 1000\nmax_events_per_append = 50\n\n"
        '[[nodes]]\nid = "node-0"\nraft_port = 7100\n'
        "http_port = 7000\n"
    )
    cfg = node_config.load(path)
    assert cfg.limits.max_value_bytes == 1000
    assert cfg.limits.max_events_per_append == 50
    server = http_api.Api(cfg, "node-0", None, None, None).server()
    await server.start("127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{server.port}") as c:
            r = await c.get("/v1/openapi.json")
            served = await r.json()
    finally:
        await server.close()
    value = served["components"]["schemas"]["PutRequest"]["properties"]["value"]
    assert value["maxLength"] == 1000
    assert "max_value_bytes (1000 on this node)" in value["description"]
    assert "max_value_bytes 1000" in served["info"]["description"]
    events = served["components"]["schemas"]["AppendRequest"]["properties"]["events"]
    assert events["maxItems"] == 50 and "max_events_per_append 50" in served["info"]["description"]
