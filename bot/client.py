"""The discord.py side of the process: the Bot subclass, the one error funnel, command sync, start and stop."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import signal
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import discord
from discord import app_commands
from discord.ext import commands

from bot import __version__, messages
from bot.app import Services, database_use, open_services
from bot.config import Settings
from bot.doctor import UNUSABLE_DATABASE_EXIT, StartupProblem
from bot.i18n import Words, english, words_for
from bot.invite import invite_url, user_install_url
from bot.monitor import Gateway
from bot.places import Place, place_of, refused_place
from bot.store.inuse import DatabaseInUse, DatabaseUse
from bot.store.repository import SchemaTooNew
from bot.translator import CatalogueTranslator, words_of
from bot.web.server import PortInUse

log = logging.getLogger(__name__)

# The bot joins no Discord voice channel (calls run through Agora): discord.py's start-up warnings that voice
# libraries (PyNaCl, davey) are missing read like a failure and are not one.
discord.VoiceClient.warn_nacl = False
discord.VoiceClient.warn_dave = False

EXTENSIONS = ("cogs.calls", "cogs.memory", "cogs.admin", "cogs.chat", "cogs.owner")
COMMANDS_HASH_KEY = "discord.commands_hash"


async def reply_privately(interaction: discord.Interaction, content: str) -> None:
    """Answer ephemerally whether or not the interaction was already acknowledged."""
    if interaction.response.is_done():
        await interaction.followup.send(content, ephemeral=True)
    else:
        await interaction.response.send_message(content, ephemeral=True)


class NotBotOwner(app_commands.CheckFailure):
    """A command only the bot's owner (the application's owner or its team) may use was used by someone else."""


def explain_error(
    client: discord.Client, error: BaseException, words: Words, *, source: str, user_id: int, guild_id: int | None
) -> str:
    """The one place an error becomes what the member reads, whatever they used (a command, a button, a direct
    message): a refusal they caused is logged as one; anything else is counted by kind for /metrics and logged
    with ids only. ``source`` names what failed in the log ("command memory", "direct message")."""
    original = error.original if isinstance(error, app_commands.CommandInvokeError) else error
    if isinstance(error, app_commands.CommandOnCooldown):
        return messages.cooldown(discord.utils.utcnow().timestamp() + error.retry_after, words)
    if isinstance(error, app_commands.MissingPermissions):
        return words("errors.needs_manage_server")
    if isinstance(error, app_commands.NoPrivateMessage):
        return words("errors.server_only")
    if isinstance(error, NotBotOwner):
        return words("errors.bot_owner_only")
    known = messages.for_error(original, words)
    if known is not None:
        log.info("%s by user %s in guild %s refused: %s", source, user_id, guild_id, type(original).__name__)
        return known
    if isinstance(client, MemoryBot):
        client.services.counters.error(type(original).__name__)
    log.error(
        "%s by user %s in guild %s failed",
        source,
        user_id,
        guild_id,
        exc_info=(type(original), original, original.__traceback__),
    )
    return words("errors.something_went_wrong")


async def report_error(interaction: discord.Interaction, error: BaseException) -> None:
    """Errors of commands and views (the command tree's ``on_error`` and every view's): answered ephemerally."""
    source = f"command {_command_name(interaction)}"
    words = words_of(interaction)
    text = explain_error(
        interaction.client, error, words, source=source, user_id=interaction.user.id, guild_id=interaction.guild_id
    )
    try:
        await reply_privately(interaction, text)
    except discord.HTTPException:
        log.warning("could not tell user %s about an error (interaction expired)", interaction.user.id)


async def report_message_error(client: discord.Client, message: discord.Message, error: BaseException) -> None:
    """Errors of direct messages: answered in the same conversation, which only the member sees, in their last
    known language (a message carries no locale)."""
    user_id = message.author.id
    words = await client.words_for_member(user_id) if isinstance(client, MemoryBot) else english()
    text = explain_error(client, error, words, source="direct message", user_id=user_id, guild_id=None)
    try:
        await message.channel.send(text)
    except discord.HTTPException:
        log.warning("could not tell user %s about an error in their direct messages", user_id)


def _command_name(interaction: discord.Interaction) -> str:
    command = interaction.command
    if command is not None:
        return command.qualified_name
    data: Mapping[str, Any] = interaction.data or {}
    return str(data.get("custom_id") or data.get("name") or "?")


def where_used(interaction: discord.Interaction) -> Place:
    """Where the member used a command or a button (``bot.places``), from what Discord sends with it."""
    return place_of(
        guild_id=interaction.guild_id,
        private_channel=interaction.context.private_channel,
        server_installed=interaction.is_guild_integration(),
        user_installed=interaction.is_user_integration(),
    )


def installs_offered(user_installs: bool) -> tuple[app_commands.AppInstallationType, app_commands.AppCommandContext]:
    """What every command is registered for unless it says otherwise (``/settings`` does: server installs, in
    servers): server installs in servers and the bot's DMs, and with user installs offered (`discord.user_installs`)
    also the member's own install, and group DMs, which only a user install reaches."""
    return (
        app_commands.AppInstallationType(guild=True, user=user_installs),
        app_commands.AppCommandContext(guild=True, dm_channel=True, private_channel=user_installs),
    )


class ErrorFunnelTree(app_commands.CommandTree):
    async def on_error(self, interaction: discord.Interaction, error: app_commands.AppCommandError) -> None:
        await report_error(interaction, error)

    async def interaction_check(self, interaction: discord.Interaction, /) -> bool:
        """User installs switched off: a command still registered for them (synced before the switch) is refused
        where only a user install reaches, before it is acknowledged."""
        client = interaction.client
        if not isinstance(client, MemoryBot) or not refused_place(
            where_used(interaction), user_installs_offered=client.settings.discord.user_installs
        ):
            return True
        log.info("command by user %s refused: user installs are off (discord.user_installs)", interaction.user.id)
        if interaction.type is discord.InteractionType.autocomplete:
            await interaction.response.autocomplete([])
        else:
            await reply_privately(interaction, words_of(interaction)("errors.user_installs_off"))
        return False


class FunnelledView(discord.ui.View):
    """Views whose errors go through the same funnel as commands."""

    async def on_error(self, interaction: discord.Interaction, error: Exception, item: discord.ui.Item[Any]) -> None:
        await report_error(interaction, error)


async def commands_hash(tree: app_commands.CommandTree) -> str:
    """What a sync sends, translations included: a changed catalogue syncs again as a changed command does."""
    translator = tree.translator
    payload = [
        await command.get_translated_payload(tree, translator) if translator is not None else command.to_dict(tree)
        for command in tree.get_commands()
    ]
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


class MemoryBot(commands.Bot):
    def __init__(self, services: Services, *, sync_on_start: bool = True, start_services: bool = True, **options: Any):
        options.setdefault("intents", discord.Intents(guilds=True, dm_messages=True))
        options["allowed_installs"], options["allowed_contexts"] = installs_offered(
            services.settings.discord.user_installs
        )
        super().__init__(
            command_prefix=commands.when_mentioned,
            tree_cls=ErrorFunnelTree,
            chunk_guilds_at_startup=False,
            member_cache_flags=discord.MemberCacheFlags.none(),
            help_command=None,
            **options,
        )
        self.services = services
        self.settings: Settings = services.settings
        if services.monitor is not None:
            services.monitor.gateway = self.gateway_state
        self.sync_on_start = sync_on_start
        self.start_services = start_services

    def gateway_state(self) -> Gateway:
        connected = self.is_ready() and not self.is_closed()
        latency = self.latency if connected and math.isfinite(self.latency) else None
        return Gateway(connected=connected, latency_seconds=latency)

    async def translate_commands(self) -> None:
        """Command names, descriptions and options in every language with a catalogue (``bot.translator``)."""
        await self.tree.set_translator(CatalogueTranslator())

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        await self.services.locales.remember(interaction.user.id, interaction.locale.value)

    async def words_for_member(self, user_id: int) -> Words:
        """The words for a member outside an interaction: their last known Discord language
        (``bot.memory.locales``), else English."""
        return words_for(await self.services.locales.locale_of(user_id))

    async def setup_hook(self) -> None:
        if self.application_id is not None:
            log.info("add the bot to a server with %s", invite_url(self.application_id))
            if self.settings.discord.user_installs:
                log.info("members add it to their own account with %s", user_install_url(self.application_id))
        await self.translate_commands()
        for extension in EXTENSIONS:
            await self.load_extension(extension)
        if self.sync_on_start:
            await self.sync_if_changed()
        if self.start_services:
            await self.services.start_background()

    async def sync_if_changed(self) -> bool:
        """Sync slash commands only when their definitions changed since the last sync (hash in the store)."""
        current = await commands_hash(self.tree)
        if await self.services.store.get_meta(COMMANDS_HASH_KEY) == current:
            return False
        synced = await self.tree.sync()
        await self.services.store.set_meta(COMMANDS_HASH_KEY, current)
        log.info("synced %d slash commands (definitions changed)", len(synced))
        return True

    async def on_guild_remove(self, guild: discord.Guild) -> None:
        await self.services.store.delete_guild_settings(guild.id)
        log.info("left guild %s: its settings were deleted", guild.id)

    async def close(self) -> None:
        await self.services.stop_background()
        await super().close()


class ShardedMemoryBot(MemoryBot, commands.AutoShardedBot):
    """The bot running some of the gateway shards (`discord.shard_count`, `discord.shard_ids`); Discord sends each
    process the events and interactions of its own shards only."""


def build_bot(services: Services, **options: Any) -> MemoryBot:
    """One process runs all shards (as a plain Bot) unless `discord.shard_count` or `discord.shard_ids` is set."""
    discord_settings = services.settings.discord
    if discord_settings.shard_count is None and discord_settings.shard_ids is None:
        return MemoryBot(services, **options)
    return ShardedMemoryBot(
        services, shard_count=discord_settings.shard_count, shard_ids=discord_settings.shard_ids, **options
    )


TOKEN_REFUSED = (
    "discord.token (DISCORD_TOKEN) was refused by Discord: "
    "copy a fresh one from the Developer Portal (Bot, Reset Token)"
)


async def run_bot(settings: Settings) -> int:
    """Run until closed. Known start-up problems (database, web address) raise StartupProblem: one line."""
    try:
        return await _run_bot(settings)
    except (SchemaTooNew, DatabaseInUse) as exc:
        raise StartupProblem(str(exc)) from None
    except sqlite3.DatabaseError as exc:
        locked = isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)
        raise StartupProblem(
            f"memory.database_path {settings.memory.database_path}: {exc}",
            exit_status=1 if locked else UNUSABLE_DATABASE_EXIT,
        ) from None


async def _run_bot(settings: Settings) -> int:
    log.info("memory-call-bot %s starting", __version__)
    token = settings.discord.token.get_secret_value() if settings.discord.token else ""
    in_use = database_use(settings)
    await in_use.hold()  # for as long as it runs: restore and the other rewriting commands refuse meanwhile
    try:
        return await _run_with_services(settings, token, in_use)
    finally:
        await in_use.release()


async def _run_with_services(settings: Settings, token: str, in_use: DatabaseUse) -> int:
    async with open_services(settings, full=True, in_use=in_use) as services:
        bot = build_bot(services)
        loop = asyncio.get_running_loop()

        closing: list[asyncio.Future[None]] = []

        def stop(sig: signal.Signals) -> None:
            log.info("%s received: stopping (active calls are saved first)", sig.name)
            closing.append(asyncio.ensure_future(bot.close()))

        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop, sig)
        try:
            async with bot:
                await bot.start(token)
        except discord.LoginFailure:
            raise StartupProblem(TOKEN_REFUSED) from None
        except discord.PrivilegedIntentsRequired:
            raise StartupProblem("Discord refused the intents; this bot needs no privileged intents") from None
        except PortInUse as exc:
            raise StartupProblem(str(exc)) from None
        except (aiohttp.ClientError, OSError) as exc:  # logging in over HTTP: DNS, refused, reset
            raise StartupProblem(
                f"Discord cannot be reached ({type(exc).__name__}: {exc}): check this machine's internet connection "
                "and DNS; the bot exits with status 1 so systemd or Docker starts it again"
            ) from None
    log.info("memory-call-bot %s stopped", __version__)
    return 0


async def sync_commands(settings: Settings, *, guild_id: int | None = None) -> int:
    token = settings.discord.token.get_secret_value() if settings.discord.token else ""
    async with open_services(settings) as services:
        bot = MemoryBot(services, sync_on_start=False, start_services=False)
        async with bot:
            await bot.login(token)  # runs setup_hook, which loads the extensions
            target = guild_id or settings.discord.dev_guild_id
            if target:
                guild = discord.Object(id=target)
                bot.tree.copy_global_to(guild=guild)
                synced = await bot.tree.sync(guild=guild)
            else:
                synced = await bot.tree.sync()
                await services.store.set_meta(COMMANDS_HASH_KEY, await commands_hash(bot.tree))
        return len(synced)


@dataclass(frozen=True)
class DiscordIdentity:
    user: str
    application_id: int
    interactions_endpoint_url: str | None


async def discord_identity(token: str) -> DiscordIdentity:
    """Log in over HTTP only (no gateway), as `run` does first; raises discord.LoginFailure for a refused token."""
    client = discord.Client(intents=discord.Intents(guilds=True))  # without guilds discord.py warns; none are read
    discord_log = logging.getLogger("discord")
    level = discord_log.level
    discord_log.setLevel(max(level, logging.WARNING))  # "logging in using static token" amid `check`'s report
    try:
        await client.login(token)
        application = client.application
        assert client.user is not None and application is not None
        return DiscordIdentity(str(client.user), application.id, application.interactions_endpoint_url)
    finally:
        discord_log.setLevel(level)
        await client.close()
