"""Every op family has its stem in each layer (docs/architecture.md, "Adding an op family: the
checklist"): node/ops/<fam>.py declares it, node/openapi/<fam>.py documents it,
node/store/<fam>.py applies and reads it, client/<fam>/commands.py calls it. A family added
with a file or a registration missing fails here, naming what is missing.

Two families differ, on purpose:
- kv (put, delete, cas, txn, compact, get, range) has no node/ops/kv.py: its specs are
  node/ops/core.py's KV_SPECS (txn's branches recurse into validate_op), its OpenAPI docs are
  node/openapi/document.py's and schemas.py's, it is applied by node/store/kv.py (txn.py,
  compaction.py) and its client commands are client/commands.py's own methods.
- watch is not a registry op: node/ops/watch.py declares the request (no SPECS), and
  node/openapi/watch.py its streamed route, wired into document.py, not FAMILIES. It has no
  node/store/ module: node/api/watch.py serves it from the change log (node/store/changes.py).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import statekeeper.node.store  # noqa: F401  (imports every family's store module)
from statekeeper.client.commands import Commands
from statekeeper.node.openapi.schemas import FAMILIES as OPENAPI_FAMILIES
from statekeeper.node.ops import core

ROOT = Path(__file__).resolve().parents[2]
# node/ops/ modules that are the registry's machinery, not a family.
NOT_FAMILIES = {"__init__", "core", "spec", "fields", "schemas", "shared", "known_fields"}
NOT_REGISTRY_OPS = {"watch"}  # see the module docstring


def _families() -> list[str]:
    return sorted(
        p.stem for p in (ROOT / "node" / "ops").glob("*.py") if p.stem not in NOT_FAMILIES
    )


def _missing(family: str) -> list[str]:
    """What `family` lacks, in the order of the checklist."""
    missing = []
    ops = importlib.import_module(f"statekeeper.node.ops.{family}")
    registered = family not in NOT_REGISTRY_OPS
    if registered and not getattr(ops, "SPECS", ()):
        missing.append(f"node/ops/{family}.py declares no SPECS")
    if registered and ops not in core.FAMILIES:
        missing.append(f"node/ops/{family} is not in node/ops/core.py's FAMILIES")
    if not (ROOT / "node" / "store" / f"{family}.py").exists():
        if registered:
            missing.append(f"node/store/{family}.py")
    elif f"statekeeper.node.store.{family}" not in sys.modules:
        missing.append(f"node/store/{family} is not imported by node/store/__init__.py")
    if not (ROOT / "node" / "openapi" / f"{family}.py").exists():
        missing.append(f"node/openapi/{family}.py")
    elif registered:
        openapi = importlib.import_module(f"statekeeper.node.openapi.{family}")
        if getattr(openapi, "FAMILY", None) not in OPENAPI_FAMILIES:
            missing.append(f"node/openapi/{family}.py's FAMILY in node/openapi/schemas.py")
    if not (ROOT / "client" / family / "commands.py").exists():
        missing.append(f"client/{family}/commands.py")
    else:
        module = f"statekeeper.client.{family}.commands"
        if not any(base.__module__ == module for base in Commands.__mro__):
            missing.append(f"a mixin of {module} in client/commands.py's Commands bases")
    return missing


def test_every_family_has_its_files_in_every_layer() -> None:
    families = _families()
    assert {"streams", "leases", "locks", "crdt", "retention", "archive", "auth"} <= set(families)
    missing = {f: m for f in families if (m := _missing(f))}
    assert not missing, missing


def test_the_registry_lists_only_family_modules() -> None:
    stems = {m.__name__.rpartition(".")[2] for m in core.FAMILIES}
    assert stems == set(_families()) - NOT_REGISTRY_OPS
    documented = {f.tag for f in OPENAPI_FAMILIES}
    assert len(documented) == len(OPENAPI_FAMILIES) == len(core.FAMILIES)


def test_watch_and_kv_are_the_documented_exceptions() -> None:
    assert not hasattr(importlib.import_module("statekeeper.node.ops.watch"), "SPECS")
    assert not (ROOT / "node" / "store" / "watch.py").exists()
    assert not (ROOT / "node" / "ops" / "kv.py").exists()
    assert {s.name for s in core.KV_SPECS} == {
        "put",
        "delete",
        "cas",
        "txn",
        "compact",
        "get",
        "range",
    }
    assert (ROOT / "node" / "store" / "kv.py").exists()
