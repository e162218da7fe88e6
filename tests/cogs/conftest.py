"""SimCord runs the real command tree offline; the services behind it are real, against the local stand-ins."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from bot.app import Services
from bot.client import EXTENSIONS, MemoryBot
from bot.llm import LLMClient
from bot.memory.chat import ChatService
from bot.memory.postcall import PostCallProcessor
from tests.fakes.llm_server import FakeLLM, running_fake_llm
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
async def fake_llm() -> AsyncIterator[FakeLLM]:
    async with running_fake_llm() as llm:
        yield llm


@pytest_asyncio.fixture
async def services(world: CallWorld, fake_llm: FakeLLM) -> AsyncIterator[Services]:
    """The running bot's services, with the fake OpenAI-compatible server as the LLM (tests script replies)."""
    llm = LLMClient(base_url=fake_llm.base_url, model="fake-model", max_retries=0)
    services = Services(settings=world.settings, store=world.store, memory=world.memory, agora=world.agora,
                        calls=world.calls, web=world.web, llm=llm)
    services.postcall = PostCallProcessor(
        world.store, llm, clock=world.clock, on_processed=services.notify_processed
    )
    services.chat = ChatService(world.store, world.memory, llm, idle_minutes=30, persona=world.settings.memory.persona)
    yield services
    await llm.aclose()


@pytest_asyncio.fixture
async def simcord_bot(services: Services) -> SimBot:
    bot = SimBot(services)
    bot.extensions_to_load = EXTENSIONS
    return bot
