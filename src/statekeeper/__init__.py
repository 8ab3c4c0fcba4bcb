"""statekeeper: a Raft-replicated key-value store for the state of AI agents.

    from statekeeper import Client, NotFound
    with Client(["http://127.0.0.1:7000", "http://127.0.0.1:7001"], ns="agent-42") as c:
        c.put("memory/plan", "step 1")

Every name of statekeeper.client is importable from here; it is loaded on first use, so
`import statekeeper.node` (a node process) loads no client. The layers are subpackages:
statekeeper.client, statekeeper.node, statekeeper.cluster (the CLI), statekeeper.chaos,
statekeeper.benchmarks (docs/architecture.md).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    client = importlib.import_module("statekeeper.client")
    try:
        return getattr(client, name)
    except AttributeError:
        raise AttributeError(f"module 'statekeeper' has no attribute {name!r}") from None


def __dir__() -> list[str]:
    client = importlib.import_module("statekeeper.client")
    return sorted(set(globals()) | set(getattr(client, "__all__", ())))


# A checkout (an editable install, or PYTHONPATH=<checkout>/src): the layers are the
# repository's top-level folders, as setup.py maps them for an install.
_CHECKOUT = Path(__file__).resolve().parents[2]
if not (Path(__file__).parent / "node").is_dir() and (_CHECKOUT / "node" / "__init__.py").is_file():
    __path__.append(str(_CHECKOUT))

# What a child process's PYTHONPATH needs to import this same statekeeper (a checkout's
# src/, or the site-packages it is installed in): the supervisor, the chaos runner and
# the benchmarks start nodes with it, so the nodes run the code that started them.
IMPORT_ROOT = str(Path(__file__).resolve().parent.parent)
