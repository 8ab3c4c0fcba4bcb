"""Unit tests need no network and no mounts: a test here that binds a socket fails and
says where it belongs (tests/loopback for real sockets or FUSE, tests/integration for
node processes). Connecting to a port nothing listens on is allowed (a refused connection
is a unit of client behaviour); subprocesses are not watched."""

from __future__ import annotations

import socket

import pytest


@pytest.fixture(autouse=True)
def _no_listening_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    def bind(self, address):  # noqa: ARG001
        raise RuntimeError(
            f"tests/unit binds no socket (tried {address!r}): move this test to tests/loopback"
        )

    monkeypatch.setattr(socket.socket, "bind", bind)
