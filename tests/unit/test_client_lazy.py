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


def _literal_imports() -> dict[str, str]:
    """name -> submodule, for the names client/__init__.py imports by name (at runtime or
    under `if TYPE_CHECKING:`): what mypy/pyright and IDEs see."""
    tree = ast.parse((ROOT / "client" / "__init__.py").read_text())
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            bound |= {a.asname or a.name: node.module for a in node.names}
    return bound


def test_type_checkers_see_every_export() -> None:
    # __all__ is built from the lazy table, so this is the check that the table and the
    # TYPE_CHECKING block agree: an export missing from either fails here.
    assert set(_literal_imports()) == set(client.__all__)


def test_lazy_table_names_the_module_type_checkers_see() -> None:
    for name, module in _literal_imports().items():
        defined = importlib.import_module(f"statekeeper.client.{module}")
        assert getattr(client, name) is getattr(defined, name), (name, module)


def test_import_client_loads_no_transport() -> None:
    code = (
        "import sys, statekeeper.client, statekeeper.client.crdt.model, statekeeper.client.auth.tokens\n"
        "heavy = [m for m in ('urllib3', 'httptools', 'statekeeper.client.sync', 'statekeeper.client.aio',"
        " 'statekeeper.client.cache', 'statekeeper.client.agent') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
