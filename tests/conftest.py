"""Shared pytest setup: the cluster fixtures and the hook they use to see failures."""

from __future__ import annotations

import pytest

from tests.integration.cluster_fixture import (  # noqa: F401 (fixtures)
    cluster,
    cluster_config,
    plain_shared_cluster,
    shared_cluster,
)
from tests.integration.console_fixture import browser, console_cluster  # noqa: F401 (fixtures)
from tests.integration.raft_harness import member_set  # noqa: F401 (fixture `nodes`)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "cluster_options(**kw): options for the `cluster`/`cluster_config` fixtures "
        "(size, fsync, raft settings, node_command, env, ready_timeout)",
    )


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    # Keep each phase's report on the item so fixtures can tell, at teardown,
    # whether the test failed (then they kill the cluster and print its logs).
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
