"""The supervisor's decisions (cluster/watchdog.py) with a fake clock: no processes."""

from __future__ import annotations

import pytest

from statekeeper.cluster.watchdog import Policy, Probe, Watchdog

LIVE = Probe(running=True, live=True)
DEAD = Probe(running=False, live=False, detail="process exited on signal SIGKILL")
STUCK = Probe(running=True, live=False, detail="HTTP 503 not_live: raft loop stuck")
NO_HTTP = Probe(running=True, live=False, detail="no answer to GET /v1/health/live")


def kinds(actions) -> list[str]:
    return [a.kind for a in actions]


class Clock:
    now = 0.0


def restart_delays(
    wd: Watchdog, deaths: int, life: float, clock: Clock | None = None
) -> list[float]:
    """node-0 dies `life` seconds after every restart; the delay before each restart."""
    clock = clock or Clock()
    now, delays = clock.now, []
    for _ in range(deaths):
        died_at = now
        actions = wd.step(now, {"node-0": DEAD})
        while "restart" not in kinds(actions):
            now += 0.5
            actions = wd.step(now, {"node-0": DEAD if now < died_at else NO_HTTP})
        delays.append(now - died_at)
        wd.step(now + 1.0, {"node-0": LIVE})
        now += life  # it runs this long, then dies again
    clock.now = now
    return delays


def test_a_node_that_keeps_dying_right_after_start_backs_off_more_each_time() -> None:
    wd = Watchdog(["node-0"], Policy(backoff_initial=1.0, backoff_max=8.0, stable_seconds=60))
    delays = restart_delays(wd, 7, life=2.0)
    assert delays == [0.0, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


def test_a_node_that_ran_stably_is_restarted_at_once_again() -> None:
    wd = Watchdog(["node-0"], Policy(backoff_initial=1.0, stable_seconds=10))
    clock = Clock()
    assert restart_delays(wd, 3, life=2.0, clock=clock) == [0.0, 1.0, 2.0]
    # Now it stays live past stable_seconds each time: every death is a first one.
    clock.now += 30
    wd.step(clock.now, {"node-0": LIVE})
    assert restart_delays(wd, 3, life=30.0, clock=clock) == [0.0, 0.0, 0.0]


def test_the_reason_names_the_failure_and_the_streak() -> None:
    wd = Watchdog(["node-0", "node-1"])
    actions = wd.step(0.0, {"node-0": DEAD, "node-1": LIVE})
    assert kinds(actions) == ["backoff", "restart"]
    assert all(a.node_id == "node-0" for a in actions)
    assert "SIGKILL" in actions[1].reason and "first restart" in actions[0].reason
    assert kinds(wd.step(3.0, {"node-0": LIVE, "node-1": LIVE})) == ["recovered"]
    actions = wd.step(4.0, {"node-0": DEAD, "node-1": LIVE})
    assert "restart 2 in a row, in 1 s" in actions[0].reason


def test_a_running_node_that_is_not_live_is_killed_after_n_failed_probes() -> None:
    wd = Watchdog(["node-0"], Policy(failures=3))
    assert wd.step(0, {"node-0": STUCK}) == []
    assert wd.step(1, {"node-0": STUCK}) == []
    actions = wd.step(2, {"node-0": STUCK})
    assert kinds(actions) == ["kill", "backoff", "restart"]
    assert "not_live" in actions[0].reason and "3 probes" in actions[0].reason


def test_one_good_probe_resets_the_failure_count() -> None:
    wd = Watchdog(["node-0"], Policy(failures=2))
    assert wd.step(0, {"node-0": NO_HTTP}) == []
    assert wd.step(1, {"node-0": LIVE}) == []
    assert wd.step(2, {"node-0": NO_HTTP}) == []
    assert kinds(wd.step(3, {"node-0": NO_HTTP}))[0] == "kill"


def test_a_restarted_node_gets_its_start_grace_then_is_killed() -> None:
    wd = Watchdog(["node-0"], Policy(start_grace=30, failures=1))
    assert "restart" in kinds(wd.step(0, {"node-0": DEAD}))
    assert wd.step(10, {"node-0": NO_HTTP}) == []  # still starting: not a failure
    assert wd.step(29, {"node-0": NO_HTTP}) == []
    actions = wd.step(31, {"node-0": NO_HTTP})
    assert kinds(actions) == ["kill", "backoff"]
    assert "not live 30 s after restart" in actions[0].reason
    assert actions[1].delay == 1.0  # the second restart in a row waits


def test_a_node_dying_while_starting_is_rescheduled() -> None:
    wd = Watchdog(["node-0"])
    wd.step(0, {"node-0": DEAD})
    actions = wd.step(1, {"node-0": DEAD})
    assert kinds(actions) == ["backoff"] and "died while starting" in actions[0].reason
    assert kinds(wd.step(2.5, {"node-0": DEAD})) == ["restart"]


def test_it_gives_up_after_max_restarts_in_a_row_and_says_so_once() -> None:
    wd = Watchdog(["node-0"], Policy(max_restarts=2, backoff_initial=1))
    now = 0.0
    seen: list[str] = []
    for _ in range(20):
        seen += kinds(wd.step(now, {"node-0": DEAD}))
        now += 1.0
    assert seen.count("restart") == 2
    assert seen.count("give_up") == 1 and seen[-1] == "give_up"


def test_start_failed_schedules_another_try() -> None:
    wd = Watchdog(["node-0"])
    wd.step(0, {"node-0": DEAD})
    actions = wd.start_failed("node-0", 0.1, "port 7000 is already in use")
    assert kinds(actions) == ["backoff"] and "port 7000" in actions[0].reason


def test_bad_policies_are_refused() -> None:
    for bad in (
        dict(failures=0),
        dict(backoff_initial=0),
        dict(backoff_max=0.5),
        dict(max_restarts=-1),
    ):
        with pytest.raises(ValueError):
            Policy(**bad)
