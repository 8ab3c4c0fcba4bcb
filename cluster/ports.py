"""Free TCP ports for throwaway local clusters (tests, chaos runs, benchmarks)."""

from __future__ import annotations

import socket

# Handed out by this process already: never twice, even after the cluster that used a
# port is gone (its sockets may linger in TIME_WAIT).
_handed_out: set[int] = set()


def free_ports(count: int, host: str = "0.0.0.0") -> list[int]:
    """`count` distinct ports that were free a moment ago on `host` (bound to port 0;
    every socket stays open until all are picked, so the OS cannot return one twice)."""
    socks: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind((host, 0))
            port = s.getsockname()[1]
            if port not in _handed_out:
                ports.append(port)
    finally:
        for s in socks:
            s.close()
    _handed_out.update(ports)
    return ports
