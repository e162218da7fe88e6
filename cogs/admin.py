"""/settings: what server admins control here (calls on/off, persona, greeting, limits, transcript retention).

Hidden from members by `default_permissions` (Manage Server) on the group, and checked again at run time,
because admins can grant the commands to anyone under Server Settings → Integrations. Every answer is
ephemeral, and every command acknowledges first (an ephemeral "thinking…" message) and reads or writes the store
after: a write may wait `memory.lock_timeout_seconds` (5 s by default) for another writer, longer than Discord's
3 seconds for a first answer.
Settings are stored per server, apply to the next call, and are deleted when the bot leaves."""

from __future__ import annotations

import discord
from discord import app_commands
from discord.ext import commands

from bot.calls.settings import (
    GREETING_MAX_CHARS,
    PERSONA_MAX_CHARS,
    GuildSettingsService,
    SettingsOverview,
)
from bot.client import MemoryBot
from bot.messages import plural

PREVIEW_CHARS = 700
NEXT_CALL = "It applies from the next call started in this server; calls already running are not changed."


def quote(text: str, limit: int = PREVIEW_CHARS) -> str:
    """Admin-written text shown back as a block quote, escaped and shortened."""
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return "\n".join(f"> {discord.utils.escape_markdown(line)}" for line in text.splitlines() or [""])


def usage_text(overview: SettingsOverview) -> str:
    usage = overview.usage
    if usage is None:
        return "**Today:** voice calls are not set up on this bot, so there is no usage to show."
    return f"**Today** (UTC): {plural(usage.calls_today, 'call')} started here, {usage.active_now} active now."


def retention_text(days: int | None) -> str:
    if not days:
        return "kept until members delete them" if days == 0 else "default (kept until members delete them)"
    return f"deleted after {plural(days, 'day')}"


def current_text_answer(name: str, custom: str | None, default: str) -> str:
    """`/settings persona` or `greeting` without text: what is in use, and how to change it (nothing changes)."""
    which = f"a **custom {name}**" if custom else f"the bot's **default {name}**"
    how = "To change it, give `text`; `reset:True` restores the default." if custom else "To change it, give `text`."
    return f"This server uses {which}:\n{quote(custom or default)}\n{how}"


def overview_text(overview: SettingsOverview) -> str:
    s = overview.settings
    max_minutes = f"{s.max_call_minutes} min" if s.max_call_minutes else f"default ({overview.default_max_minutes} min)"
    daily = (
        f"{s.calls_per_member_per_day}" if s.calls_per_member_per_day else f"default ({overview.default_daily_calls})"
    )
    persona = f"custom:\n{quote(s.persona)}" if s.persona else f"default:\n{quote(overview.default_persona)}"
    greeting = f"custom:\n{quote(s.greeting)}" if s.greeting else f"default:\n{quote(overview.default_greeting)}"
    return "\n".join(
        [
            "**Bot settings for this server**",
            f"**Voice calls:** {'on' if s.calls_enabled else 'off'}",
            f"**Longest call:** {max_minutes}",
            f"**Calls per member per day:** {daily}",
            f"**Transcripts:** {retention_text(s.retention_days)}",
            f"**Persona:** {persona}",
            f"**Greeting:** {greeting}",
            "",
            usage_text(overview),
            "-# Change these with the other `/settings` commands; changes apply to the next call.",
        ]
    )


class Admin(commands.Cog):
    settings = app_commands.Group(
        name="settings",
        description="Change how the voice agent works in this server",
        guild_only=True,
        default_permissions=discord.Permissions(manage_guild=True),
    )

    def __init__(self, bot: MemoryBot):
        self.bot = bot

    def service(self) -> GuildSettingsService:
        return self.bot.services.guild_settings

    async def interaction_check(self, interaction: discord.Interaction, /) -> bool:
        """The run-time half of the permission rule: `default_permissions` only hides the commands."""
        if interaction.guild_id is None:
            raise app_commands.NoPrivateMessage()
        if not interaction.permissions.manage_guild:
            raise app_commands.MissingPermissions(["manage_guild"])
        return True

    @staticmethod
    async def acknowledge(interaction: discord.Interaction) -> None:
        """The first answer of every /settings command, before the store is touched."""
        await interaction.response.defer(ephemeral=True, thinking=True)

    @staticmethod
    async def confirm(interaction: discord.Interaction, text: str) -> None:
        """The answer itself: it replaces the "thinking…" message."""
        await interaction.followup.send(text, ephemeral=True)

    @settings.command(name="show", description="Show this server's settings and today's usage")
    async def show(self, interaction: discord.Interaction) -> None:
        assert interaction.guild_id is not None
        await self.acknowledge(interaction)
        overview = await self.service().overview(interaction.guild_id)
        await self.confirm(interaction, overview_text(overview))

    @settings.command(name="calls", description="Turn voice calls on or off in this server")
    @app_commands.describe(enabled="Whether members may start calls here")
    async def calls(self, interaction: discord.Interaction, enabled: bool) -> None:
        assert interaction.guild_id is not None
        await self.acknowledge(interaction)
        await self.service().set_calls_enabled(interaction.guild_id, enabled)
        if enabled:
            text = "Voice calls are now **on** in this server: members can start one with `/call`."
        else:
            text = (
                "Voice calls are now **off** in this server: `/call` tells members that calls are turned off here. "
                "Calls already running continue until they end."
            )
        await self.confirm(interaction, text)

    @settings.command(name="persona", description="See or set the agent's persona for calls started in this server")
    @app_commands.describe(
        text="Who the agent is and how it talks (leave empty to see the current one)",
        reset="Restore the bot's default persona",
    )
    async def persona(
        self,
        interaction: discord.Interaction,
        text: app_commands.Range[str, 1, PERSONA_MAX_CHARS] | None = None,
        reset: bool = False,
    ) -> None:
        assert interaction.guild_id is not None
        await self.acknowledge(interaction)
        if text is None and not reset:
            overview = await self.service().overview(interaction.guild_id)
            await self.confirm(
                interaction, current_text_answer("persona", overview.settings.persona, overview.default_persona)
            )
            return
        saved = await self.service().set_persona(interaction.guild_id, None if reset else text)
        if saved.persona is None:
            answer = f"The agent uses the bot's **default persona** again in this server. {NEXT_CALL}"
        else:
            answer = f"The agent's persona in this server is now:\n{quote(saved.persona)}\n{NEXT_CALL}"
        await self.confirm(interaction, answer)

    @settings.command(name="greeting", description="See or set what the agent says first in calls started here")
    @app_commands.describe(
        text="The agent's first words (leave empty to see the current ones)",
        reset="Restore the bot's default greeting",
    )
    async def greeting(
        self,
        interaction: discord.Interaction,
        text: app_commands.Range[str, 1, GREETING_MAX_CHARS] | None = None,
        reset: bool = False,
    ) -> None:
        assert interaction.guild_id is not None
        await self.acknowledge(interaction)
        if text is None and not reset:
            overview = await self.service().overview(interaction.guild_id)
            answer = current_text_answer("greeting", overview.settings.greeting, overview.default_greeting)
            await self.confirm(interaction, answer)
            return
        saved = await self.service().set_greeting(interaction.guild_id, None if reset else text)
        if saved.greeting is None:
            answer = f"The agent uses the bot's **default greeting** again in this server. {NEXT_CALL}"
        else:
            answer = f"The agent now opens calls in this server with:\n{quote(saved.greeting)}\n{NEXT_CALL}"
        await self.confirm(interaction, answer)

    @settings.command(name="max-minutes", description="Set the longest a call started in this server may last")
    @app_commands.describe(minutes="Minutes, from 1 to 240")
    async def max_minutes(self, interaction: discord.Interaction, minutes: app_commands.Range[int, 1, 240]) -> None:
        assert interaction.guild_id is not None
        await self.acknowledge(interaction)
        await self.service().set_max_minutes(interaction.guild_id, minutes)
        await self.confirm(
            interaction,
            f"Calls started in this server now end after at most **{plural(minutes, 'minute')}**. {NEXT_CALL}",
        )

    @settings.command(name="daily-calls", description="Set how many calls each member may start here per day")
    @app_commands.describe(count="Calls per member per day, from 1 to 500")
    async def daily_calls(self, interaction: discord.Interaction, count: app_commands.Range[int, 1, 500]) -> None:
        assert interaction.guild_id is not None
        await self.acknowledge(interaction)
        await self.service().set_daily_calls(interaction.guild_id, count)
        await self.confirm(
            interaction,
            f"Each member can now start **{plural(count, 'call')} per day** in this server "
            "(days reset at midnight UTC). Members who already reached it are told when they can call again.",
        )

    @settings.command(name="retention", description="Set how long transcripts of conversations held here are kept")
    @app_commands.describe(days="Days to keep transcripts, from 1 to 3650; 0 keeps them until members delete them")
    async def retention(self, interaction: discord.Interaction, days: app_commands.Range[int, 0, 3650]) -> None:
        assert interaction.guild_id is not None
        await self.acknowledge(interaction)
        await self.service().set_retention(interaction.guild_id, days)
        if days == 0:
            kept = "Transcripts of calls and chats started in this server are now **kept until members delete them**."
        else:
            kept = (
                f"Transcripts of calls and chats started in this server are now **deleted {plural(days, 'day')} "
                "after** the conversation."
            )
        await self.confirm(
            interaction,
            f"{kept}\nWhat the agent learned about a member (their facts and call summaries) is not a transcript: "
            "it stays until that member deletes it with `/forget`.",
        )


async def setup(bot: MemoryBot) -> None:
    await bot.add_cog(Admin(bot))
