"""What the agent-layer integration tests share: the reducer their agents fold events
with, and a client on the shared cluster in a namespace of the test's own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from statekeeper.client import Client
from statekeeper.cluster.supervisor import LocalCluster


def reducer(state: dict, event) -> dict:
    """Sums the data of "add" events into state["total"]; other events change nothing."""
    if event.type == "add":
        return {**state, "total": state.get("total", 0) + event.data}
    return state


@pytest.fixture
def ns(request: pytest.FixtureRequest) -> str:
    return f"{request.module.__name__.rsplit('_', 1)[-1]}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def client(shared_cluster: LocalCluster, ns: str) -> Iterator[Client]:
    with Client([shared_cluster.url(n) for n in shared_cluster.node_ids], ns=ns) as c:
        yield c


@pytest.fixture
async def async_client(shared_cluster: LocalCluster, ns: str):
    """An AsyncClient on the shared cluster in the test's own namespace."""
    from statekeeper.client import AsyncClient

    async with AsyncClient([shared_cluster.url(n) for n in shared_cluster.node_ids], ns=ns) as c:
        yield c
