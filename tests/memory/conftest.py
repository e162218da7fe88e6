"""The memory tests drive live recall: their world is the suite's ``live_recall_world`` (tests/conftest.py)."""

from __future__ import annotations

import pytest

from standins.harness import CallWorld


@pytest.fixture
def world(live_recall_world: CallWorld) -> CallWorld:
    return live_recall_world
