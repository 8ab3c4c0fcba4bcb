"""Agent and AsyncAgent (and Projection and AsyncProjection) expose the same public
methods with the same parameters, the async ones as coroutine functions, like
tests/unit/test_client_api.py does for Client and AsyncClient."""

from __future__ import annotations

import inspect

import pytest

from statekeeper.client.agent import Agent, AsyncAgent, AsyncProjection, Projection
from statekeeper.client.agent.agent import AgentCore
from statekeeper.client.agent.projection import ProjectionCore
from statekeeper.client.plan import planned


def public_methods(cls: type) -> dict[str, object]:
    out = {}
    for name in dir(cls):
        if name.startswith("_"):
            continue
        attr = inspect.getattr_static(cls, name)
        if isinstance(attr, property):
            continue
        if inspect.isfunction(attr):
            out[name] = getattr(cls, name)
    return out


PAIRS = [(Agent, AsyncAgent, AgentCore), (Projection, AsyncProjection, ProjectionCore)]


@pytest.mark.parametrize(("sync", "async_", "core"), PAIRS, ids=["agent", "projection"])
def test_same_public_methods_with_the_same_parameters(sync, async_, core) -> None:
    s, a = public_methods(sync), public_methods(async_)
    assert sorted(s) == sorted(a)
    ops = [n for base in core.__mro__ for n, v in vars(base).items() if isinstance(v, planned)]
    assert ops and set(ops) <= set(s)
    for name in ops:
        assert not inspect.iscoroutinefunction(s[name]), name
        assert inspect.iscoroutinefunction(a[name]), name
        assert inspect.signature(s[name]) == inspect.signature(a[name]), name
        assert s[name].__doc__ and s[name].__doc__ == a[name].__doc__, name
    for name in set(s) - set(ops):  # shared helpers: the very same function
        assert s[name] is a[name], name


def test_the_agent_operations_are_all_there() -> None:
    expected = {
        "log",
        "checkpoint",
        "maybe_checkpoint",
        "rollback",
        "hydrate",
        "state_at",
        "checkpoints",
        "get_checkpoint",
        "latest",
        "history",
        "gc",
    }
    assert expected <= set(public_methods(AsyncAgent))
    assert {"catch_up", "run", "load", "save"} <= set(public_methods(AsyncProjection))
