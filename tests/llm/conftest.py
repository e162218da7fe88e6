"""Fixtures for the LLM client tests: a running FakeLLM per test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fakes.llm_server import FakeLLM, running_fake_llm


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeLLM]:
    async with running_fake_llm() as llm:
        yield llm
