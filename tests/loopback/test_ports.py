"""cluster/ports.py: ports for throwaway clusters come from below the ephemeral range (no
outgoing connection can take one before the node binds it), never twice per process, and
never one something already listens on."""

from __future__ import annotations

import socket

from statekeeper.cluster import ports


def test_ports_are_below_the_ephemeral_range_and_distinct() -> None:
    got = ports.free_ports(6) + ports.free_ports(6)
    assert len(set(got)) == 12
    assert all(ports.LOWEST_PORT <= p < ports.port_range().stop for p in got)
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    assert max(got) < low  # bind(0) handed out ports from the ephemeral range


def test_a_port_in_use_is_skipped(monkeypatch) -> None:
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        taken.bind(("0.0.0.0", 0))
        busy = taken.getsockname()[1]
        monkeypatch.setattr(ports, "port_range", lambda: range(busy, busy + 50))
        got = ports.free_ports(3)
        assert busy not in got and len(got) == 3
    finally:
        taken.close()


def test_processes_start_from_different_offsets(monkeypatch) -> None:
    monkeypatch.setattr(ports, "_handed_out", set())
    monkeypatch.setattr(ports.os, "getpid", lambda: 1000)
    first = ports.free_ports(1)[0]
    monkeypatch.setattr(ports, "_handed_out", set())
    monkeypatch.setattr(ports.os, "getpid", lambda: 1001)
    assert abs(ports.free_ports(1)[0] - first) > 100
