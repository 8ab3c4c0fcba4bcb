"""LangGraph on statekeeper: a checkpointer and a long-term memory store.

    from statekeeper.client.langgraph import StatekeeperSaver, StatekeeperStore

- StatekeeperSaver (client/langgraph/saver.py): a BaseCheckpointSaver, sync and async in
  one class; every checkpoint with its channel values is one atomic, replicated write.
- StatekeeperStore (client/langgraph/store.py): a BaseStore (batch and abatch) with TTLs
  and semantic search.

Needs `pip install 'statekeeper[langgraph]'` (LangGraph's checkpoint package, which
carries both base classes); docs/langgraph.md has the key layouts and guarantees.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["StatekeeperSaver", "StatekeeperStore"]

_MODULES = {"StatekeeperSaver": "statekeeper.client.langgraph.saver", "StatekeeperStore": "statekeeper.client.langgraph.store"}

if TYPE_CHECKING:
    from statekeeper.client.langgraph.saver import StatekeeperSaver
    from statekeeper.client.langgraph.store import StatekeeperStore


def __getattr__(name: str) -> Any:
    # Imported on first use, so that `import client` never needs LangGraph installed and a
    # missing extra is reported with the command that fixes it.
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        import langgraph.checkpoint.base  # noqa: F401
    except ImportError as e:
        raise ImportError(
            f"{name} needs LangGraph's checkpoint package: pip install 'statekeeper[langgraph]'"
        ) from e
    import importlib

    return getattr(importlib.import_module(module), name)
