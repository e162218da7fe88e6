"""Suite-wide fixtures. Network access is blocked by pytest-socket (see pyproject addopts): only loopback works."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from bot.config import DEFAULT_PERSONA
from bot.memory.service import MemoryService
from bot.store.sqlite import SqliteStore
from tests.browser import browser, sdk_stub_url  # noqa: F401 - shared session fixtures


@pytest_asyncio.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    s = SqliteStore(tmp_path / "memory.db")
    await s.open()
    yield s
    await s.close()


@pytest_asyncio.fixture
async def memory(store: SqliteStore) -> AsyncIterator[MemoryService]:
    service = MemoryService(store, budget_tokens=1500, persona=DEFAULT_PERSONA)
    yield service
    await service.wait_scrubbed()
