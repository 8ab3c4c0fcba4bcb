"""failpoints.enable(name, "off") turns a failpoint off (the docstring's promise: "off
lets a wrapper disable one name"). Found by the simulator: a crash point enabled for a
few seconds stayed on after its `off`, and the nodes crashed on every start after the
heal (seed 2 of `statekeeper sim run`)."""

from __future__ import annotations

import pytest

from statekeeper.node import failpoints


@pytest.fixture(autouse=True)
def _clean():
    failpoints.configure("")
    yield
    failpoints.configure("")


def test_off_disables_an_enabled_failpoint():
    failpoints.enable("journal-fsync", "1*error")
    with pytest.raises(OSError):
        failpoints.hit("journal-fsync")
    failpoints.enable("journal-fsync", "off")
    failpoints.hit("journal-fsync")  # nothing happens
    assert "journal-fsync" not in failpoints.enabled()


def test_off_disables_a_switch():
    failpoints.enable("read-barrier-skip")
    assert failpoints.active("read-barrier-skip")
    failpoints.enable("read-barrier-skip", "off")
    assert not failpoints.active("read-barrier-skip")
