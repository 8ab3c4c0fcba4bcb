#!/usr/bin/env bash
# The client installs alone: `pip install .` (no extras) into a clean venv must give a
# working `from statekeeper import Client, AsyncClient` without the server's dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
venv="$(mktemp -d)/client-only"
"$PYTHON" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check .
cd "$(mktemp -d)"  # not the source tree: import what was installed
"$venv/bin/python" - <<'PY'
import importlib.util

from statekeeper import AsyncClient, Client, Conflict

# One package: nothing generic at the top level for a user's own client.py to collide with.
for generic in ("client", "node", "cluster", "chaos", "benchmarks", "console"):
    assert importlib.util.find_spec(generic) is None, f"the install put {generic!r} at the top level"
for heavy in ("rocksdict", "pysyncobj", "cryptography", "aiohttp", "msgspec", "jinja2"):
    assert importlib.util.find_spec(heavy) is None, f"{heavy} came with the client-only install"
with Client("http://127.0.0.1:9", timeout=1) as c:
    assert c.ns == "default"
import os  # no endpoints anywhere (an empty directory): a clear error, not a guess

from statekeeper.client.errors import NoEndpoints

os.environ.pop("STATEKEEPER_ENDPOINTS", None)
try:
    Client()
except NoEndpoints as e:
    assert e.code == "no_endpoints", e
else:
    raise AssertionError("Client() without endpoints guessed some")
AsyncClient("http://127.0.0.1:9")
from statekeeper.client.agent import Agent, AsyncAgent, Projection  # the agent layer: no server parts
from statekeeper.client.agent.envelope import decode, encode

assert decode(encode({"step": 3, "blob": b"x" * 4096})) == {"step": 3, "blob": b"x" * 4096}
import statekeeper.client.langgraph  # without the langgraph extra: importable, and says what is missing

assert importlib.util.find_spec("langgraph") is None, "langgraph came with the client-only install"
try:
    statekeeper.client.langgraph.StatekeeperSaver
except ImportError as e:
    assert "statekeeper[langgraph]" in str(e), e
else:
    raise AssertionError("StatekeeperSaver imported without LangGraph installed")
import statekeeper.client.archive  # without the archive extra: importable, and says what is missing

assert importlib.util.find_spec("fsspec") is None, "fsspec came with the client-only install"
try:
    statekeeper.client.archive.ArchiveStore("file:///tmp/sk-archive")
except ImportError as e:
    assert "statekeeper[archive]" in str(e), e
else:
    raise AssertionError("an ArchiveStore was made without fsspec installed")
try:
    Client("http://127.0.0.1:9", timeout=1).archive_run("p/", to="file:///tmp/a", keep_last=1)
except ImportError as e:
    assert "statekeeper[archive]" in str(e), e
else:
    raise AssertionError("archive_run ran without fsspec installed")
print("client-only install: ok (no rocksdict, pysyncobj, cryptography, aiohttp, msgspec, jinja2)")
PY
rm -rf "$(dirname "$venv")"
