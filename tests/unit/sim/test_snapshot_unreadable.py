"""A leader whose snapshot.bin cannot be opened, for a follower that needs a snapshot
(node/raft/syncobj.py, PatchedSyncObj._snapshot_unreadable): pysyncobj's AppendEntries
loop asked again on every pass and never returned on virtual time (the long
exploration's seed 200061 spun there for 40 minutes); on a real clock it burned ~0.1 s
of every tick and logged a traceback per pass. Now the leader drops that link and packs a
new snapshot, which the follower then gets."""

from __future__ import annotations

from statekeeper.chaos.sim.world import World
from tests.unit.sim.worlds import elect


def _put(node, i: int) -> None:
    body = {"op": "put", "ns": "default", "key": f"k{i}", "value": b"v", "idempotency_key": f"ik{i}"}
    node.start_request(body)


def test_a_leader_without_its_snapshot_file_does_not_spin_and_packs_a_new_one(tmp_path):
    async def main(w: World) -> tuple[int, int]:
        await elect(w)
        leader = w.nodes[w.leaders()[0]]
        lagging = next(i for i in ("n0", "n1", "n2") if i != leader.node_id)
        w.kill(lagging)
        for i in range(50):
            _put(leader, i)
            await w.sleep(0.01)
        await w.sleep(0.5)
        leader.raft.compact_journal()  # the log now starts past what the wiped node has
        await w.sleep(1.0)
        snapshots = list(w.disks.data_dir(leader.node_id).rglob("snapshot.bin"))
        assert snapshots
        for path in snapshots:
            path.unlink()
        w.disks.wipe(lagging)
        w.start(lagging)
        await w.sleep(1.0)
        for i in range(50, 55):  # entries to pack a new snapshot from
            _put(leader, i)
            await w.sleep(0.05)
        await w.sleep(2.0)  # under the 5 s after which the world would pack one anyway
        return w.nodes[lagging].sm.revision, leader.sm.revision

    caught_up, revision = World(3, tmp_path / "w").run(main)
    assert revision >= 55
    assert caught_up == revision
