"""The memory tests drive live recall: their world is the suite's ``live_recall_world`` (tests/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from standins.harness import CallWorld, call_world
from standins.llm_server import FakeLLM


@pytest.fixture
def world(live_recall_world: CallWorld) -> CallWorld:
    return live_recall_world


@pytest.fixture(params=["sqlite", "postgresql"])
async def any_backend(request: pytest.FixtureRequest, tmp_path: Path, fake_llm: FakeLLM) -> AsyncIterator[CallWorld]:
    """The live-recall world on SQLite and on PostgreSQL, in front of the strict fake LLM; the emulator's agent
    waits 5 s for an answer (a stream that never ends fails the test promptly)."""
    url = request.getfixturevalue("postgres_url") if request.param == "postgresql" else None
    async with call_world(
        tmp_path, database_url=url, llm_base_url=fake_llm.base_url, llm={"timeout_seconds": 1.0}
    ) as world:
        world.emu.llm_timeout = 5
        yield world
