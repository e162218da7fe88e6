"""Live recall's world: the bot's LLM route in front of the strict fake LLM (``fake_llm``), driven by the Agora
emulator."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakes.llm_server import FakeLLM
from tests.harness import CallWorld, call_world


@pytest.fixture
async def world(tmp_path: Path, fake_llm: FakeLLM) -> AsyncIterator[CallWorld]:
    async with call_world(tmp_path, llm_base_url=fake_llm.base_url, llm={"timeout_seconds": 1.0}) as w:
        yield w
