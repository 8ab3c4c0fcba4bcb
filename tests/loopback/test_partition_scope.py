"""A partition cuts the raft links of its own cluster and of no other.

Every cluster configured with link addresses uses the same addresses (node i dials node j
at 127.(10+i).(10+j).1), so a rule that matched the address alone also cut the same links
of every other cluster on the machine. Under `make test` two xdist workers each run a
partition test at once: worker A isolating its node-1 cut node-0<->node-2 of worker B's
cluster too, and B's leader stepped down (CI, stop 37). The rules must name the ports.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from statekeeper.chaos.partition import Partitioner, available, link_address
from tests.integration.cluster_fixture import write_test_config

pytestmark = pytest.mark.skipif(not available()[0], reason=available()[1])


@pytest.fixture
def listeners() -> Iterator[callable]:
    """listen(port): accept (and hold) connections on 0.0.0.0:port, as a node's raft does."""
    socks: list[socket.socket] = []

    def listen(port: int) -> None:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", port))
        s.listen(8)
        socks.append(s)
        threading.Thread(target=_accept_all, args=(s,), daemon=True).start()

    yield listen
    for s in socks:
        s.close()


def _accept_all(s: socket.socket) -> None:
    held = []
    while True:
        try:
            held.append(s.accept()[0])
        except OSError:
            return


def _config(directory):
    directory.mkdir()
    return write_test_config(directory, link_addresses=True).config


def _connects(address: str, port: int) -> bool:
    try:
        socket.create_connection((address, port), timeout=1.0).close()
        return True
    except OSError:
        return False


def test_isolating_a_node_cuts_its_own_cluster_only(tmp_path, listeners) -> None:
    ours = _config(tmp_path / "ours")
    theirs = _config(tmp_path / "theirs")
    for n in (*ours.nodes, *theirs.nodes):
        listeners(n.raft_port)
    # node-0 dials node-2 at link(0, 2) in both clusters: the same address, other ports.
    ours_02 = (link_address(0, 2), ours.nodes[2].raft_port)
    theirs_02 = (link_address(0, 2), theirs.nodes[2].raft_port)
    assert _connects(*ours_02) and _connects(*theirs_02)
    with Partitioner(ours) as net:
        net.isolate("node-0")
        assert not _connects(*ours_02), "isolating node-0 left its link to node-2 open"
        assert _connects(*theirs_02), "isolating node-0 of one cluster cut another cluster's link"
    assert _connects(*ours_02), "heal left the link cut"


def test_a_one_way_cut_drops_the_answers_of_a_connection_dialled_the_other_way(
    tmp_path, listeners
) -> None:
    """a->b also travels as the answers on b's own connection to a (source link(b, a)):
    cutting a->b one way makes b's dial to a fail, in this cluster only."""
    ours = _config(tmp_path / "ours")
    theirs = _config(tmp_path / "theirs")
    for n in (*ours.nodes, *theirs.nodes):
        listeners(n.raft_port)
    with Partitioner(ours) as net:
        net.cut("node-0", "node-1", one_way=True)
        # node-1 dials node-0: its SYN passes (b->a is open), node-0's SYN-ACK is a->b.
        assert not _connects(link_address(1, 0), ours.nodes[0].raft_port)
        assert _connects(link_address(1, 0), theirs.nodes[0].raft_port)
        # node-0 dials node-1: the SYN is a->b itself.
        assert not _connects(link_address(0, 1), ours.nodes[1].raft_port)
        # node-2 is not involved.
        assert _connects(link_address(2, 0), ours.nodes[0].raft_port)
