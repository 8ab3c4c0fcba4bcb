"""chaos.faults.crash.read_install_round: which "restoring state machine from snapshot"
lines of the crash-install victim's log were snapshots installed from the leader (each one
drew the 60% exit first) and which were the node's own snapshot file restored at start
(no install, no draw). Counting the second kind as installs is what made the failpoint
look like it fired far below 60% (docs/chaos-suite-results.md, issue 12)."""

from __future__ import annotations

from statekeeper.chaos.faults.crash import read_install_round

START = "--- 2026-12-01 01:19:03 starting node-2\nfailpoints enabled: snapshot-install=60%exit\n"
SERVING = "2026-12-01 01:19:06,114 node-2 INFO statekeeper.node: node-2 serving HTTP\n"
CRASH = "failpoint snapshot-install: exiting (hit 1)\n"


def restored(index: int) -> str:
    return f"2026-12-01 01:19:06,196 node-2 INFO statekeeper.raft: restoring state machine from snapshot at index {index}\n"


def ready(applied: int) -> str:
    return f"2026-12-01 01:19:09,024 node-2 INFO statekeeper.node: ready 0.54 s after start (applied index {applied}, leader node-0)\n"


def test_a_wiped_node_installs_from_the_leader() -> None:
    r = read_install_round(START + SERVING + restored(1058) + ready(1064), None)
    assert (r.installs, r.crashes, r.local, r.ready, r.received) == ([1058], 0, [], True, 1)


def test_a_crash_then_the_restart_restores_the_received_snapshot_locally_first() -> None:
    # The watcher's restart loads the snapshot the crashed install left on disk (RocksDB is
    # behind it): a local restore, not an install. Its next install from the leader is one.
    text = START + SERVING + CRASH + START + SERVING + restored(606) + restored(1058)
    r = read_install_round(text, None)
    assert r.installs == [1058]
    assert r.local == [606]
    assert r.crashes == 1 and r.received == 2 and not r.ready
    # It came back from the crashed install (the round may end there: one draw per round).
    assert r.recovered == 1
    before = read_install_round(START + SERVING + CRASH + START + SERVING, None)
    assert before.crashes == 1 and before.recovered == 0 and before.local == []


def test_crashes_in_a_row_are_each_a_draw() -> None:
    text = START + CRASH + START + restored(606) + CRASH + START + restored(700) + CRASH
    r = read_install_round(text, None)
    assert (r.installs, r.local, r.crashes, r.received, r.recovered) == ([], [606, 700], 3, 3, 2)


def test_the_nodes_own_snapshot_restored_at_start_is_no_install() -> None:
    # Kept down after a SIGKILL: RocksDB behind its own snapshot (at 900) restores it at
    # start; the leader, having compacted past it, then sends one at 1500.
    r = read_install_round(START + restored(900) + SERVING + restored(1500) + ready(1510), 900)
    assert (r.installs, r.local, r.ready, r.recovered) == ([1500], [900], True, 0)
    # Its own snapshot was not needed (RocksDB ahead of it): the first restore is the install.
    r = read_install_round(START + SERVING + restored(1500), 900)
    assert (r.installs, r.local) == ([1500], [])


def test_caught_up_without_any_snapshot_and_a_partial_last_line() -> None:
    r = read_install_round(START + SERVING + ready(300), 250)
    assert r.ready and r.received == 0 and not r.local
    # A line still being written is not read (an index cut short would look new).
    r = read_install_round(START + restored(1058)[:-3], None)
    assert r.installs == [] and r.received == 0


def test_ready_is_about_the_last_process_only() -> None:
    r = read_install_round(START + ready(300) + CRASH + START + restored(606), None)
    assert not r.ready and r.crashes == 1 and r.local == [606]
