"""Loopback tests: real sockets and FUSE mounts on this machine, no cluster.

What lives here binds a socket (an HTTP server, a Toxiproxy, a fake node, a port probe) or
mounts a FUSE filesystem (LazyFS; those tests skip, saying why, without root, /dev/fuse,
fusermount3 or pyfuse3), but starts no statekeeper node: tests/unit needs neither network
nor mounts, tests/integration runs real node processes.

Fixtures: the Toxiproxy contract and toxic tests share one embedded server per module and
a toxiproxy-python client pointed at it, cleaned after each test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from toxiproxy import Toxiproxy

from statekeeper.chaos.toxiproxy import ToxiproxyServer, configure_client


@pytest.fixture(scope="module")
def server() -> Iterator[ToxiproxyServer]:
    with ToxiproxyServer() as srv:
        yield srv


@pytest.fixture
def tp(server: ToxiproxyServer) -> Iterator[Toxiproxy]:
    configure_client(server.url)
    client = Toxiproxy()
    yield client
    client.destroy_all()
