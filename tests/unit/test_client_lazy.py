"""client/__init__.py imports its exports lazily (module __getattr__): `import client`, or
importing a pure submodule such as client.crdt.model, loads no transport, while every
name it exports still imports, and type checkers see each one (the TYPE_CHECKING block)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import statekeeper.client as client
import statekeeper.client.crdt  # noqa: F401  (binds client.crdt)

ROOT = Path(__file__).resolve().parents[2]


def test_every_exported_name_imports() -> None:
    for name in client.__all__:
        assert getattr(client, name) is not None, name
    for name in client.crdt.__all__:
        assert getattr(client.crdt, name) is not None, name
    assert set(client.__all__) <= set(dir(client))


def test_unknown_name_is_an_attribute_error() -> None:
    try:
        client.NoSuchThing  # noqa: B018
    except AttributeError as e:
        assert "NoSuchThing" in str(e)
    else:
        raise AssertionError("client.NoSuchThing resolved")


def test_ops_is_the_builder_not_the_submodule() -> None:
    importlib.import_module("statekeeper.client.ops")  # binds client.ops to the submodule, if lazy
    from statekeeper.client import Ops, ops

    assert isinstance(ops, Ops)


def test_type_checkers_see_every_export() -> None:
    # Names bound at runtime or under `if TYPE_CHECKING:` in client/__init__.py: an export
    # missing there would be an unknown import for mypy/pyright and IDEs.
    tree = ast.parse((ROOT / "client" / "__init__.py").read_text())
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            bound |= {a.asname or a.name for a in node.names}
    assert bound == set(client.__all__)


def test_import_client_loads_no_transport() -> None:
    code = (
        "import sys, statekeeper.client, statekeeper.client.crdt.model, statekeeper.client.auth.tokens\n"
        "heavy = [m for m in ('urllib3', 'httptools', 'statekeeper.client.sync', 'statekeeper.client.aio',"
        " 'statekeeper.client.cache', 'statekeeper.client.agent') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
