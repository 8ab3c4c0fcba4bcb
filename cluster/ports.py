"""Free TCP ports for throwaway local clusters (tests, chaos runs, benchmarks).

Ports come from below the kernel's ephemeral range (ip_local_port_range, 32768-60999 by
default), so no outgoing connection on this machine can take one between the check here
and the node's bind: bind(0) handed out ephemeral ports, and a busy test run (hundreds of
client connections a second) could take a node's port first (a node then retried its
raft port for a minute). Each process walks the range from an offset of its own (its
pid), so two processes handing out ports at once (`make test` runs two pytest workers)
do not pick the same ones.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

# Handed out by this process already: never twice, even after the cluster that used a
# port is gone (its sockets may linger in TIME_WAIT).
_handed_out: set[int] = set()
LOWEST_PORT = 20000


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def port_range() -> range:
    """The ports free_ports picks from: LOWEST_PORT up to the ephemeral range."""
    return range(LOWEST_PORT, max(_ephemeral_low(), LOWEST_PORT + 1000))


def free_ports(count: int, host: str = "0.0.0.0") -> list[int]:
    """`count` distinct ports that were free a moment ago on `host` (each bound once to
    check; every socket stays open until all are picked)."""
    ports_range = port_range()
    start = (os.getpid() * 7919) % len(ports_range)
    socks: list[socket.socket] = []
    ports: list[int] = []
    try:
        for step in range(len(ports_range)):
            port = ports_range[(start + step) % len(ports_range)]
            if port in _handed_out:
                continue
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind((host, port))
            except OSError:
                s.close()
                continue
            socks.append(s)
            ports.append(port)
            if len(ports) == count:
                break
        else:
            raise OSError(f"no {count} free ports in {ports_range.start}-{ports_range.stop - 1}")
    finally:
        for s in socks:
            s.close()
    _handed_out.update(ports)
    return ports
