"""Packet-level partitions between raft peers on one machine, with iptables DROP rules.

All loopback connections leave from 127.0.0.1, so a rule cannot tell node A's packets
from node B's by source address. Instead every raft link gets its own loopback address:
node i dials node j at 127.(10+i).(10+j).1 (config `raft_dial`), and every node listens on
the wildcard address (`raft_bind`). A packet of the link i<->j then carries that address
as destination (dialler -> listener) or as source (listener -> dialler), so each link, and
each direction of it, can be cut alone. Client (HTTP) traffic is never touched.

Every cluster uses the same link addresses, so a rule also names the listener's raft port
(dialler -> listener: --dport; listener -> dialler: --sport). Without it, two clusters
partitioned at once on one machine (two pytest workers) cut each other's links: isolating
node-1 of one cluster deposed the leader of another (tests/loopback/test_partition_scope.py).

Rules live in a chain of their own per process, SKCHAOS-<pid>, jumped to from OUTPUT
(loopback packets traverse OUTPUT once), so two runs never flush each other's rules;
`heal()` / leaving the context manager flushes it, also on errors and Ctrl-C, and chains
left behind by processes that died are removed on the next use.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from collections.abc import Iterable

from statekeeper.node.config import ClusterConfig

CHAIN_PREFIX = "SKCHAOS-"


def link_address(from_index: int, to_index: int) -> str:
    return f"127.{10 + from_index}.{10 + to_index}.1"


def with_link_addresses(cfg: ClusterConfig) -> ClusterConfig:
    """The same cluster, with one loopback address per directed raft link."""
    nodes = []
    for i, n in enumerate(cfg.nodes):
        dial = tuple(
            (peer.id, f"{link_address(i, j)}:{peer.raft_port}")
            for j, peer in enumerate(cfg.nodes)
            if peer.id != n.id
        )
        nodes.append(dataclasses.replace(n, raft_bind=f"0.0.0.0:{n.raft_port}", raft_dial=dial))
    return dataclasses.replace(cfg, nodes=tuple(nodes))


def available() -> tuple[bool, str]:
    """Whether partitions can be made here, and if not, why."""
    if os.geteuid() != 0:
        return False, "iptables partitions need root"
    if shutil.which("iptables") is None:
        return False, "iptables is not installed (apt-get install iptables)"
    r = subprocess.run(["iptables", "-S", "OUTPUT"], capture_output=True, text=True)
    if r.returncode != 0:
        return False, f"iptables does not work here: {r.stderr.strip()}"
    return True, ""


def _ipt(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["iptables", "-w", *args], capture_output=True, text=True, check=check)


def _drop_chain(chain: str) -> None:
    _ipt("-F", chain, check=False)
    while _ipt("-D", "OUTPUT", "-j", chain, check=False).returncode == 0:
        pass
    _ipt("-X", chain, check=False)


def _remove_stale_chains() -> None:
    """Chains of processes that no longer exist (killed before they could clean up)."""
    listing = _ipt("-S", check=False).stdout
    for line in listing.splitlines():
        if line.startswith(f"-N {CHAIN_PREFIX}"):
            chain = line.split()[1]
            pid = chain.removeprefix(CHAIN_PREFIX)
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                _drop_chain(chain)


class Partitioner:
    """Cut and heal raft links of one cluster configured with `with_link_addresses`."""

    def __init__(self, cfg: ClusterConfig):
        self._index = {n.id: i for i, n in enumerate(cfg.nodes)}
        self._port = {n.id: n.raft_port for n in cfg.nodes}
        self.active: list[str] = []
        self.chain = f"{CHAIN_PREFIX}{os.getpid()}"

    def __enter__(self) -> Partitioner:
        _remove_stale_chains()
        _ipt("-N", self.chain, check=False)  # exists already after an interrupted run: fine
        _ipt("-F", self.chain)
        if _ipt("-C", "OUTPUT", "-j", self.chain, check=False).returncode != 0:
            _ipt("-I", "OUTPUT", "-j", self.chain)
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.heal()
        _drop_chain(self.chain)

    def _drop(self, match: list[str], why: str) -> None:
        _ipt("-A", self.chain, *match, "-j", "DROP")
        self.active.append(why)

    def cut(
        self, a: str, b: str, *, one_way: bool = False, probability: float | None = None
    ) -> None:
        """Drop a's packets to b (and, unless one_way, b's to a). With probability, drop
        that fraction of packets at random instead of all (-m statistic)."""
        ia, ib = self._index[a], self._index[b]
        pa, pb = str(self._port[a]), str(self._port[b])
        stat = (
            ["-m", "statistic", "--mode", "random", "--probability", f"{probability:.4f}"]
            if probability
            else []
        )
        # a -> b travels as dst=link(a,b):port(b) when a dialled, or as src=link(b,a):port(a)
        # (a answering) when b dialled.
        self._drop(["-p", "tcp", "-d", link_address(ia, ib), "--dport", pb, *stat], f"{a}->{b}")
        self._drop(["-p", "tcp", "-s", link_address(ib, ia), "--sport", pa, *stat], f"{a}->{b}")
        if not one_way:
            self._drop(["-p", "tcp", "-d", link_address(ib, ia), "--dport", pa, *stat], f"{b}->{a}")
            self._drop(["-p", "tcp", "-s", link_address(ia, ib), "--sport", pb, *stat], f"{b}->{a}")

    def isolate(self, node: str, others: Iterable[str] | None = None) -> None:
        """Cut every raft link between `node` and the others (both directions)."""
        for other in others if others is not None else self._index:
            if other != node:
                self.cut(node, other)

    def split(self, side_a: Iterable[str], side_b: Iterable[str]) -> None:
        b = list(side_b)
        for x in side_a:
            for y in b:
                self.cut(x, y)

    def heal(self) -> None:
        _ipt("-F", self.chain, check=False)
        self.active.clear()
