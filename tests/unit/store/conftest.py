"""Fixtures of the node/store tests."""

from __future__ import annotations

import pytest

from tests.unit.store.util import Node


@pytest.fixture
def node(tmp_path):
    """A fresh state machine in tmp_path/db (closed after the test)."""
    n = Node(tmp_path / "db")
    yield n
    n.sm.close()
