"""/settings: what server admins control here (calls on/off, persona, greeting, limits, transcript retention).

Hidden from members by `default_permissions` (Manage Server) on the group, and checked again at run time,
because admins can grant the commands to anyone under Server Settings → Integrations. Registered for server
installs in servers only: a member's own install (`bot.places`) never offers them, and a server that never added
the bot has no settings. Every answer is ephemeral, and every command acknowledges first (an ephemeral "thinking…"
message) and reads or writes the store after: a write may wait `memory.lock_timeout_seconds` (5 s by default) for
another writer, longer than Discord's 3 seconds for a first answer.
Settings are stored per server, apply to the next call, and are deleted when the bot leaves."""

from __future__ import annotations

import discord
from discord import app_commands
from discord.ext import commands

from bot.calls.language import ENGLISH
from bot.calls.settings import (
    GREETING_MAX_CHARS,
    PERSONA_MAX_CHARS,
    GuildSettingsService,
    SettingsOverview,
)
from bot.client import MemoryBot, where_used
from bot.i18n import Words
from bot.places import ServerWithoutBot
from bot.translator import options, words_of
from cogs._language import LANGUAGE_CHOICES, in_text, label

PREVIEW_CHARS = 700


class NotAddedHere(app_commands.CheckFailure, ServerWithoutBot):
    """A check's refusal (so the command tree's error funnel answers it) that reads as ``ServerWithoutBot``."""


def quote(text: str, limit: int = PREVIEW_CHARS) -> str:
    """Admin-written text shown back as a block quote, escaped and shortened."""
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return "\n".join(f"> {discord.utils.escape_markdown(line)}" for line in text.splitlines() or [""])


def usage_text(overview: SettingsOverview, words: Words) -> str:
    usage = overview.usage
    if usage is None:
        return words("admin.usage.none")
    return words("admin.usage.today", calls=words.count("count.call", usage.calls_today), active=usage.active_now)


def retention_text(days: int | None, words: Words) -> str:
    if not days:
        return words("admin.retention.until_deleted" if days == 0 else "admin.retention.default")
    return words("admin.retention.after", days=words.count("count.day", days))


def current_text_answer(name: str, custom: str | None, default: str, words: Words) -> str:
    """`/settings persona` or `greeting` without text: what is in use, and how to change it (nothing changes)."""
    which = words(f"admin.current.custom_{name}" if custom else f"admin.current.default_{name}")
    how = words("admin.current.how_custom" if custom else "admin.current.how_default")
    return words("admin.current.answer", which=which, text=quote(custom or default), how=how)


def overview_text(overview: SettingsOverview, words: Words) -> str:
    s = overview.settings

    def own_or_default(own: object, default: object) -> str:
        return str(own) if own else words("admin.overview.default", value=default)

    def text_or_default(own: str | None, default: str) -> str:
        if own:
            return words("admin.overview.custom_text", text=quote(own))
        return words("admin.overview.default_text", text=quote(default))

    minutes = words("admin.overview.minutes", minutes=s.max_call_minutes) if s.max_call_minutes else None
    default_minutes = words("admin.overview.minutes", minutes=overview.default_max_minutes)
    return "\n".join(
        [
            words("admin.overview.title"),
            words(
                "admin.overview.calls", state=words("admin.overview.on" if s.calls_enabled else "admin.overview.off")
            ),
            words("admin.overview.longest", value=own_or_default(minutes, default_minutes)),
            words(
                "admin.overview.daily", value=own_or_default(s.calls_per_member_per_day, overview.default_daily_calls)
            ),
            words("admin.overview.transcripts", value=retention_text(s.retention_days, words)),
            words("admin.overview.persona", value=text_or_default(s.persona, overview.default_persona)),
            words("admin.overview.greeting", value=text_or_default(s.greeting, overview.default_greeting)),
            words("admin.overview.language", language=label(s.language or ENGLISH, words)),
            "",
            usage_text(overview, words),
            words("admin.overview.footer"),
        ]
    )


class Admin(commands.Cog):
    settings = app_commands.Group(
        name="settings",
        description="Change how the voice agent works in this server",
        guild_only=True,
        default_permissions=discord.Permissions(manage_guild=True),
        allowed_installs=app_commands.AppInstallationType(guild=True, user=False),
        allowed_contexts=app_commands.AppCommandContext(guild=True, dm_channel=False, private_channel=False),
    )

    def __init__(self, bot: MemoryBot):
        self.bot = bot

    def service(self) -> GuildSettingsService:
        return self.bot.services.guild_settings

    async def interaction_check(self, interaction: discord.Interaction, /) -> bool:
        """The run-time half of the permission rule: `default_permissions` only hides the commands."""
        if interaction.guild_id is None:
            raise app_commands.NoPrivateMessage()
        if where_used(interaction).settings_guild is None:
            raise NotAddedHere()
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
        await self.confirm(interaction, overview_text(overview, words_of(interaction)))

    @settings.command(name="calls", description="Turn voice calls on or off in this server")
    @options(enabled="Whether members may start calls here")
    async def calls(self, interaction: discord.Interaction, enabled: bool) -> None:
        assert interaction.guild_id is not None
        await self.acknowledge(interaction)
        await self.service().set_calls_enabled(interaction.guild_id, enabled)
        await self.confirm(interaction, words_of(interaction)("admin.calls.on" if enabled else "admin.calls.off"))

    @settings.command(name="persona", description="See or set the agent's persona for calls started in this server")
    @options(
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
        words = words_of(interaction)
        if text is None and not reset:
            overview = await self.service().overview(interaction.guild_id)
            await self.confirm(
                interaction, current_text_answer("persona", overview.settings.persona, overview.default_persona, words)
            )
            return
        saved = await self.service().set_persona(interaction.guild_id, None if reset else text)
        next_call = words("admin.next_call")
        if saved.persona is None:
            answer = words("admin.persona.default", next_call=next_call)
        else:
            answer = words("admin.persona.set", text=quote(saved.persona), next_call=next_call)
        await self.confirm(interaction, answer)

    @settings.command(name="greeting", description="See or set what the agent says first in calls started here")
    @options(
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
        words = words_of(interaction)
        if text is None and not reset:
            overview = await self.service().overview(interaction.guild_id)
            answer = current_text_answer("greeting", overview.settings.greeting, overview.default_greeting, words)
            await self.confirm(interaction, answer)
            return
        saved = await self.service().set_greeting(interaction.guild_id, None if reset else text)
        next_call = words("admin.next_call")
        if saved.greeting is None:
            answer = words("admin.greeting.default", next_call=next_call)
        else:
            answer = words("admin.greeting.set", text=quote(saved.greeting), next_call=next_call)
        await self.confirm(interaction, answer)

    @settings.command(name="language", description="Set the language of calls here for members who chose none")
    @options(language="Used when a member chose no language and calls cannot be held in their Discord language")
    @app_commands.choices(language=LANGUAGE_CHOICES)
    async def language(self, interaction: discord.Interaction, language: str) -> None:
        assert interaction.guild_id is not None
        await self.acknowledge(interaction)
        await self.service().set_language(interaction.guild_id, None if language == ENGLISH else language)
        words = words_of(interaction)
        await self.confirm(
            interaction,
            words("admin.language.set", language=in_text(language, words), next_call=words("admin.next_call")),
        )

    @settings.command(name="max-minutes", description="Set the longest a call started in this server may last")
    @options(minutes="Minutes, from 1 to 240")
    async def max_minutes(self, interaction: discord.Interaction, minutes: app_commands.Range[int, 1, 240]) -> None:
        assert interaction.guild_id is not None
        await self.acknowledge(interaction)
        await self.service().set_max_minutes(interaction.guild_id, minutes)
        words = words_of(interaction)
        minutes_text = words.count("count.minute", minutes)
        await self.confirm(
            interaction, words("admin.max_minutes.set", minutes=minutes_text, next_call=words("admin.next_call"))
        )

    @settings.command(name="daily-calls", description="Set how many calls each member may start here per day")
    @options(count="Calls per member per day, from 1 to 500")
    async def daily_calls(self, interaction: discord.Interaction, count: app_commands.Range[int, 1, 500]) -> None:
        assert interaction.guild_id is not None
        await self.acknowledge(interaction)
        await self.service().set_daily_calls(interaction.guild_id, count)
        words = words_of(interaction)
        await self.confirm(interaction, words("admin.daily_calls.set", calls=words.count("count.call", count)))

    @settings.command(name="retention", description="Set how long transcripts of conversations held here are kept")
    @options(days="Days to keep transcripts, from 1 to 3650; 0 keeps them until members delete them")
    async def retention(self, interaction: discord.Interaction, days: app_commands.Range[int, 0, 3650]) -> None:
        assert interaction.guild_id is not None
        await self.acknowledge(interaction)
        await self.service().set_retention(interaction.guild_id, days)
        words = words_of(interaction)
        if days == 0:
            kept = words("admin.retention.kept")
        else:
            kept = words("admin.retention.deleted", days=words.count("count.day", days))
        await self.confirm(interaction, words("admin.retention.set", kept=kept))


async def setup(bot: MemoryBot) -> None:
    await bot.add_cog(Admin(bot))
