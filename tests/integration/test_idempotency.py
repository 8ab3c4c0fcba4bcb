"""idempotency_status against a real 3-node cluster (docs/protocol.md, "Idempotency
status"): through both clients and `statekeeper idempotency status`. The record semantics
(expiry, pruning, namespaces) are tests/unit/store/test_idempotency.py's."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from statekeeper import AsyncClient, Client, IdempotencyStatus
from statekeeper.cluster.supervisor import LocalCluster

pytestmark = pytest.mark.integration


def _urls(lc: LocalCluster) -> list[str]:
    return [lc.url(n) for n in lc.node_ids]


def test_status_says_a_put_applied_at_its_revision(shared_cluster: LocalCluster) -> None:
    ns = f"idem-{uuid.uuid4().hex[:8]}"
    with Client(_urls(shared_cluster), ns=ns) as c:
        put = c.put("k", b"v", idempotency_key="put-1")
        status = c.idempotency_status("put-1")
        assert isinstance(status, IdempotencyStatus)
        assert status.applied and status.revision == put.revision
        assert status.expires_ms is not None and status.remembered_after_ms is None
        # Scoped to the namespace; an unknown key is not applied, and says since when.
        for unknown in (
            c.idempotency_status("put-1", ns=f"{ns}-other"),
            c.idempotency_status("never-sent"),
        ):
            assert not unknown.applied and unknown.revision >= put.revision
            assert unknown.remembered_after_ms is not None and unknown.expires_ms is None
        serializable = c.idempotency_status(
            "put-1", consistency="serializable", min_revision=put.revision
        )
        assert serializable.applied and serializable.revision == put.revision


async def test_async_client_and_cli_agree(shared_cluster: LocalCluster) -> None:
    ns = f"idem-{uuid.uuid4().hex[:8]}"
    async with AsyncClient(_urls(shared_cluster), ns=ns) as c:
        put = await c.put("k", b"v", idempotency_key="put-2")
        assert (await c.idempotency_status("put-2")).revision == put.revision
    cli = [
        sys.executable,
        "-m",
        "statekeeper.cluster.cli",
        "idempotency",
        "status",
        "--endpoints",
        ",".join(_urls(shared_cluster)),
        "--ns",
        ns,
    ]
    out = subprocess.run([*cli, "put-2", "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    assert set(answer) == {"applied", "revision", "expires_ms"} and answer["expires_ms"] > 0
    assert answer["applied"] is True and answer["revision"] == put.revision
    out = subprocess.run([*cli, "nope"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("not applied as of revision"), out
