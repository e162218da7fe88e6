"""SimCord runs the real command tree offline; the services behind it are real, against the local stand-ins."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import discord
import pytest
import pytest_asyncio

from bot.app import Services
from bot.client import EXTENSIONS, MemoryBot
from bot.llm import LLMClient
from bot.memory.chat import ChatService
from bot.memory.greeting import GreetingWriter
from bot.memory.own_words import OwnWords
from bot.memory.postcall import PostCallProcessor
from standins.harness import CallWorld, call_world
from standins.llm_server import FakeLLM
from tests.conftest import call_world_options


class SimBot(MemoryBot):
    """Production syncs only when definitions change; SimCord's strict sync wants a sync in every test."""

    async def setup_hook(self) -> None:
        await self.translate_commands()
        for extension in self.extensions_to_load:
            await self.load_extension(extension)
        await self.tree.sync()
        if self.services.web is not None:
            await self.services.web.start()  # as production does: its handlers then run as the bot's work


@pytest_asyncio.fixture
async def world(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[CallWorld]:
    """The services the bot runs, its web server started by the bot (`SimBot.setup_hook`); built otherwise with
    ``@pytest.mark.call_world(...)``."""
    async with call_world(tmp_path, start_web=False, **call_world_options(request)) as w:
        yield w


@pytest_asyncio.fixture
async def services(world: CallWorld, fake_llm: FakeLLM) -> AsyncIterator[Services]:
    """The running bot's services, with the fake OpenAI-compatible server as the LLM (tests script replies)."""
    llm = LLMClient(base_url=fake_llm.base_url, model="fake-model", max_retries=0)
    services = Services(
        settings=world.settings,
        store=world.store,
        memory=world.memory,
        agora=world.agora,
        calls=world.calls,
        web=world.web,
        llm=llm,
        counters=world.monitor.counters,
        monitor=world.monitor,
    )
    services.postcall = PostCallProcessor(
        world.store,
        llm,
        clock=world.clock,
        on_processed=services.notify_processed,
        greetings=GreetingWriter(world.store, llm, clock=world.clock),
    )
    services.chat = ChatService(
        world.store,
        world.memory,
        llm,
        idle_minutes=30,
        persona=world.settings.memory.persona,
        own_words=OwnWords(world.memory),
    )
    yield services
    await llm.aclose()


@pytest_asyncio.fixture
async def simcord_bot(services: Services) -> SimBot:
    bot = SimBot(services)
    bot.extensions_to_load = EXTENSIONS
    return bot


@pytest.fixture
def member(simcord_env):
    """A server with a #general channel and one member, alice: (guild, channel, alice)."""
    guild = simcord_env.create_guild()
    channel = guild.create_text_channel("general")
    alice = guild.add_member(simcord_env.create_user("alice"))
    return guild, channel, alice


@pytest.fixture
def server(simcord_env):
    """A server with a #general channel, an admin (Manage Server), carol, and a member, alice:
    (guild, channel, carol, alice)."""
    guild = simcord_env.create_guild()
    channel = guild.create_text_channel("general")
    admins = guild.create_role("Admins", permissions=discord.Permissions(manage_guild=True))
    carol = guild.add_member(simcord_env.create_user("carol"), roles=[admins])
    alice = guild.add_member(simcord_env.create_user("alice"))
    return guild, channel, carol, alice


@pytest.fixture
def discord_locales(monkeypatch: pytest.MonkeyPatch) -> dict[int, str]:
    """Each member's Discord language, by user id (``discord_locales[alice.id] = "es-ES"``): SimCord sends "en-US"
    with every interaction; the listed members' interactions carry theirs instead, as Discord's do."""
    import simcord.interactions

    locales: dict[int, str] = {}
    build = simcord.interactions.base_payload

    def with_locale(backend: Any, **fields: Any) -> tuple[Any, dict[str, Any]]:
        record, payload = build(backend, **fields)
        if fields["user_id"] in locales:
            payload["locale"] = locales[fields["user_id"]]
        return record, payload

    monkeypatch.setattr(simcord.interactions, "base_payload", with_locale)
    return locales
