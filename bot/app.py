"""The services of one bot process, built from settings in one place and closed together."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from bot.config import Settings
from bot.memory.service import MemoryService
from bot.store.repository import Store
from bot.store.sqlite import SqliteStore


@dataclass
class Services:
    settings: Settings
    store: Store
    memory: MemoryService


def build_store(settings: Settings) -> Store:
    return SqliteStore(settings.memory.database_path)


@asynccontextmanager
async def open_services(settings: Settings) -> AsyncIterator[Services]:
    store = build_store(settings)
    await store.open()
    memory = MemoryService(
        store, budget_tokens=settings.memory.context_budget_tokens, persona=settings.memory.persona
    )
    try:
        yield Services(settings=settings, store=store, memory=memory)
    finally:
        await memory.wait_scrubbed()
        await store.close()
