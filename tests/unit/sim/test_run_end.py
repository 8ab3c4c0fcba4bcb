"""How a run ends (chaos/sim/scenario.py): the checks wait for the clients' last ops, and
a member change the harness gave up on may still commit (chaos/sim/scenario.py,
Run._learn_unsure_changes): the settled leader's configuration says how it ended, and
only the outcomes of those changes are accepted (seed 200063 failed "n2 reports members
[n0, n1, n2], the log says [n1, n2]" when an add given up on committed 11 s later)."""

from __future__ import annotations

from types import SimpleNamespace

from statekeeper.chaos.sim.scenario import Run


class _Raft:
    def __init__(self, members: list[str], leader: bool, pending: bool = False):
        self._members, self._leader, self._pending = members, leader, pending

    def is_leader(self) -> bool:
        return self._leader

    def member_change_pending(self) -> bool:
        return self._pending

    def members(self):
        return [SimpleNamespace(id=i) for i in self._members]


def _run(
    members: set[str], unsure, leader_has: list[str], pending: bool = False, joining=()
) -> Run:
    run = Run.__new__(Run)
    notes: list[str] = []
    nodes = {
        "n1": SimpleNamespace(raft=_Raft(leader_has, True, pending)),
        "n2": SimpleNamespace(raft=_Raft(["n1"], False)),
    }
    nodes.update({i: SimpleNamespace(raft=_Raft([], False)) for i in joining})
    run.w = SimpleNamespace(nodes=nodes, note=notes.append, kill=nodes.pop)
    run.members, run.unsure, run.notes = set(members), list(unsure), notes
    run.joining = set(joining)
    return run


def test_an_add_given_up_on_that_committed_makes_the_node_a_member():
    run = _run({"n1", "n2"}, [("add", "n0")], ["n0", "n1", "n2"])
    run._learn_unsure_changes()
    assert run.members == {"n0", "n1", "n2"} and run.unsure == []
    assert run.notes == ["member changes given up on took effect: members ['n0', 'n1', 'n2']"]


def test_a_new_member_whose_add_was_given_up_on_and_did_not_take_effect_is_stopped():
    """The harness starts a new member before the add (as add-node does) and leaves it
    running when it gives the add up; once the leader says it is no member, it stops."""
    run = _run({"n1", "n2"}, [("add", "n0")], ["n1", "n2"], joining=["n0"])
    run._learn_unsure_changes()
    assert run.members == {"n1", "n2"} and not run.joining
    assert "n0" not in run.w.nodes and run.notes == ["n0 is no member: stopped"]


def test_a_new_member_whose_add_was_given_up_on_but_committed_stays():
    run = _run({"n1", "n2"}, [("add", "n0")], ["n0", "n1", "n2"], joining=["n0"])
    run._learn_unsure_changes()
    assert run.members == {"n0", "n1", "n2"} and "n0" in run.w.nodes and not run.joining


def test_a_removal_given_up_on_may_have_committed_or_not():
    run = _run({"n0", "n1", "n2"}, [("rem", "n0")], ["n1", "n2"])
    run._learn_unsure_changes()
    assert run.members == {"n1", "n2"}
    run = _run({"n0", "n1", "n2"}, [("rem", "n0")], ["n0", "n1", "n2"])
    run._learn_unsure_changes()
    assert run.members == {"n0", "n1", "n2"} and run.notes == []


def test_a_configuration_no_unsure_change_explains_is_not_accepted():
    run = _run({"n0", "n1", "n2"}, [("rem", "n0")], ["n0", "n1"])
    run._learn_unsure_changes()
    assert run.members == {"n0", "n1", "n2"}  # check_members then reports the difference


def test_nothing_is_decided_while_a_change_is_pending_or_without_one_leader():
    run = _run({"n1", "n2"}, [("add", "n0")], ["n0", "n1", "n2"], pending=True)
    run._learn_unsure_changes()
    assert run.members == {"n1", "n2"} and run.unsure == [("add", "n0")]


def test_the_end_checks_wait_for_the_clients_last_ops(tmp_path):
    """Seed 400015 failed "positions never became equal" (the leader had applied a
    client's last entry, the followers not yet): the checks ran a fixed second after the
    liveness writes while a client was still at work. quiesce() waits for the clients."""
    import asyncio

    from statekeeper.chaos.sim.world import World

    out: dict = {}

    async def main(w: World) -> None:
        run = Run(w, [], 0, None)

        async def last_op() -> None:
            await asyncio.sleep(4.0)  # an op answered after its timeout, say

        run.clients = [w.loop.create_task(last_op())]
        start = w.clock.now
        await run.quiesce()
        out["waited"] = w.clock.now - start
        out["done"] = run.clients[0].done()

    World(1, tmp_path).run(main)
    assert out["done"] and out["waited"] >= 4.0, out
