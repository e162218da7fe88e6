"""SimCord runs the real command tree offline; the services behind it are real, against the local stand-ins."""

from __future__ import annotations

import asyncio
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
from bot.memory.own_words import OwnWords
from bot.memory.postcall import PostCallProcessor
from standins.discord_gateway import FakeDiscord, run_until_ready
from standins.discord_gateway.places import EXTERNAL_APP_PERMISSIONS, NotOffered, Place, authorizing_owners
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
    services.postcall = PostCallProcessor(world.store, llm, clock=world.clock, on_processed=services.notify_processed)
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


@pytest_asyncio.fixture
async def bot(fake: FakeDiscord, services: Services) -> AsyncIterator[SimBot]:
    """The bot logged in to the fake Discord, its commands synced; Discord refused nothing it sent."""
    b = SimBot(services, guild_ready_timeout=0.05)
    b.extensions_to_load = EXTENSIONS
    task = await run_until_ready(b)
    yield b
    await b.close()
    await asyncio.wait_for(task, 10)
    fake.assert_no_invalid_requests()


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


class SimcordInstalls:
    """User installs in SimCord, which sends every interaction as from a server install: the interactions of the
    members listed here carry what Discord sends for theirs (``authorizing_integration_owners`` key "1"; in a server
    that never added the bot only that key, with ``app_permissions`` without a bot member), a command their installs
    do not reach is not offered (SimCord's "not visible" SetupError), and the bot's channel messages in a server that
    never added it are refused with 403 Missing Access (50001). One rule with the fake Discord's
    (``standins.discord_gateway.places``). SimCord still knows the bot as a member of every guild it creates: only
    what Discord sends and refuses is changed."""

    def __init__(self, env: Any, monkeypatch: pytest.MonkeyPatch):
        import simcord.actors
        import simcord.backend.ops.commands
        import simcord.interactions
        from simcord.backend.command_access import Access, command_access

        self.env = env
        self.installed: set[int] = set()
        self.outside_server: set[int] = set()
        self.without_bot: set[int] = set()
        build = simcord.interactions.base_payload

        def as_discord_sends(backend: Any, **fields: Any) -> tuple[Any, dict[str, Any]]:
            record, payload = build(backend, **fields)
            data = fields["data"]
            command = backend.find_command(data["name"], fields["guild_id"]) if "name" in data else None
            place = self.place(fields["guild_id"])
            payload["authorizing_integration_owners"] = self.owners(command, fields["user_id"], fields["guild_id"])
            if place == "server without the bot":
                payload["app_permissions"] = EXTERNAL_APP_PERMISSIONS
            return record, payload

        def reached(backend: Any, command: dict[str, Any], *, user_id: int, channel_id: int) -> Any:
            access = command_access(backend, command, user_id=user_id, channel_id=channel_id)
            if not access.allowed:
                return access
            try:
                self.owners(command, user_id, backend.get_channel(channel_id).guild_id)
            except NotOffered:
                return Access(allowed=False, reason="integration-types")
            return access

        monkeypatch.setattr(simcord.interactions, "base_payload", as_discord_sends)
        monkeypatch.setattr(simcord.actors, "command_access", reached)
        monkeypatch.setattr(simcord.backend.ops.commands, "command_access", reached)

    def install_for(self, user: Any, *, member_of_server: bool = True) -> None:
        """``user`` adds the bot to their account; ``member_of_server=False``: no guild they are in added it."""
        self.installed.add(user.id)
        if not member_of_server:
            self.outside_server.add(user.id)

    def never_added(self, guild: Any) -> None:
        """``guild`` never added the bot: its members reach it only through their own installs."""
        self.without_bot.add(guild.id)
        for channel in guild.channels.values():
            self.env.inject_error(
                "POST", f"/channels/{channel.id}/messages", status=403, code=50001, message="Missing Access", times=None
            )

    def place(self, guild_id: int | None) -> Place:
        if guild_id is None:
            return "dm"
        return "server without the bot" if guild_id in self.without_bot else "server"

    def owners(self, command: dict[str, Any] | None, user_id: int, guild_id: int | None) -> dict[str, str]:
        return authorizing_owners(
            command,
            command["name"] if command else "(component)",
            place=self.place(guild_id),
            user_id=str(user_id),
            guild_id=str(guild_id),
            installation_contexts={0, 1},
            user_installed=user_id in self.installed,
            in_server=user_id not in self.outside_server,
        )


@pytest.fixture
def user_installs(simcord_env: Any, monkeypatch: pytest.MonkeyPatch) -> SimcordInstalls:
    return SimcordInstalls(simcord_env, monkeypatch)
