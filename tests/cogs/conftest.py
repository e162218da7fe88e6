"""SimCord runs the real command tree offline; the services behind it are real, against the local stand-ins."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest_asyncio

from bot.app import Services
from bot.client import EXTENSIONS, MemoryBot
from bot.memory.chat import ChatService
from bot.memory.postcall import PostCallProcessor
from tests.harness import CallWorld, call_world


class SimBot(MemoryBot):
    """Production syncs only when definitions change; SimCord's strict sync wants a sync in every test."""

    async def setup_hook(self) -> None:
        for extension in self.extensions_to_load:
            await self.load_extension(extension)
        await self.tree.sync()
        if self.services.web is not None:
            await self.services.web.start()  # as production does: its handlers then run as the bot's work


@pytest_asyncio.fixture
async def world(tmp_path: Path):
    async with call_world(tmp_path, start_web=False) as w:
        yield w


@pytest_asyncio.fixture
async def services(world: CallWorld) -> Services:
    services = Services(settings=world.settings, store=world.store, memory=world.memory, agora=world.agora,
                        calls=world.calls, web=world.web)
    services.postcall = PostCallProcessor(world.store, None, on_processed=services.notify_processed)
    services.chat = ChatService(world.store, world.memory, None, idle_minutes=30, persona="p")
    return services


@pytest_asyncio.fixture
async def simcord_bot(services: Services) -> SimBot:
    bot = SimBot(services)
    bot.extensions_to_load = tuple(e for e in EXTENSIONS if importlib.util.find_spec(e) is not None)  # TODO strict
    return bot
