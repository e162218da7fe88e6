"""/memory, /remember and /forget: see what the agent remembers, tell it something, edit it, export it, pause
it, and forget one thing or everything.

Thin by design: every command parses the interaction, calls a memory service, and renders the answer. Every reply
is ephemeral. Memory text goes to the member who owns it and nowhere else: log lines carry ids and counts only.

Commands:
    /memory                      the memory panel: facts with source and date, calls and chats, ◀ ▶ pages,
                                 **Export**, **Pause memory** / **Resume memory**, **Forget…**, **Edit a fact…**
    /remember text:<…>           one fact in the member's own words, marked as told by them
    /forget item item:<…>        one fact (autocomplete lists the caller's current facts)
    /forget call call:<…>        one call or text chat, its lines and the facts that came only from it,
                                 after a confirmation saying how many
    /forget everything           everything, after a confirmation
"""

from __future__ import annotations

import logging

import discord
from discord import app_commands
from discord.ext import commands

from bot.client import MemoryBot
from bot.memory.forget_requests import ForgetRequests
from bot.memory.own_words import MAX_FACT_CHARS, OwnWords
from bot.memory.service import MemoryService
from bot.translator import options, words_of
from cogs._forget_ui import ConfirmEverythingView, forget_conversation_asking, forget_fact_asking
from cogs._language import MEMBER_LANGUAGE_CHOICES, chosen, in_text
from cogs._memory_actions import MemoryActions
from cogs._memory_texts import SPACES, busy_choice, conversation_name, fact_choice, shorten, shown
from cogs._memory_ui import (
    AUTOCOMPLETE_CONVERSATION_SCAN,
    AUTOCOMPLETE_FACT_SCAN,
    AUTOCOMPLETE_LIMIT,
    PERSISTENT_CONTROLS,
    MemoryView,
)
from cogs._own_words import NO_MENTIONS, remember_text

log = logging.getLogger(__name__)


class Memory(commands.Cog):
    forget_group = app_commands.Group(name="forget", description="Delete what the agent remembers about you, for real")

    def __init__(self, bot: MemoryBot):
        self.bot = bot

    @property
    def memory(self) -> MemoryService:
        return self.bot.services.memory

    @property
    def forgetting(self) -> ForgetRequests:
        return self.bot.services.forget_requests

    async def cog_load(self) -> None:
        self.bot.add_dynamic_items(*PERSISTENT_CONTROLS)

    async def cog_unload(self) -> None:
        self.bot.remove_dynamic_items(*PERSISTENT_CONTROLS)

    # ---- /memory ---------------------------------------------------------------------------------------

    @app_commands.command(name="memory", description="See what the agent remembers about you; export, pause, forget")
    @options(language="The language of your calls, remembered (Automatic: your Discord language)")
    @app_commands.choices(language=MEMBER_LANGUAGE_CHOICES)
    async def memory_command(self, interaction: discord.Interaction, language: str | None = None) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)  # the store may wait for another writer
        said = None
        if language is not None:
            choice = chosen(language)
            await self.bot.services.choices.set_call_language(interaction.user.id, choice)
            words = words_of(interaction)
            said = (
                words("memory.language.set", language=in_text(choice, words))
                if choice
                else words("memory.language.automatic")
            )
        view = await MemoryView.open(MemoryActions.of(interaction), interaction.user.id, 0)
        await view.send(interaction, said, embed=view.embed())

    # ---- /remember -------------------------------------------------------------------------------------

    @app_commands.command(name="remember", description="Tell the agent something to remember about you, in your words")
    @options(text="What to remember, e.g. My daughter's birthday is 4 May")
    async def remember_command(
        self, interaction: discord.Interaction, text: app_commands.Range[str, 1, MAX_FACT_CHARS]
    ) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)  # first: the fact is written to the store
        result = await OwnWords(self.memory).tell(interaction.user.id, text)
        log.info("user %s told a fact to remember: %s", interaction.user.id, getattr(result, "outcome", result))
        answer = remember_text(result, words_of(interaction))
        await interaction.followup.send(answer, ephemeral=True, allowed_mentions=NO_MENTIONS)

    # ---- /forget ---------------------------------------------------------------------------------------

    @forget_group.command(name="item", description="Forget one thing the agent knows about you")
    @options(item="Start typing to find it")
    async def forget_item(self, interaction: discord.Interaction, item: str) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)
        await forget_fact_asking(MemoryActions.of(interaction), interaction, item, in_place=False)

    @forget_item.autocomplete("item")
    async def item_choices(self, interaction: discord.Interaction, current: str) -> list[app_commands.Choice[str]]:
        words = words_of(interaction)
        facts = await self.forgetting.facts(interaction.user.id, AUTOCOMPLETE_FACT_SCAN)
        if facts is None:
            return [busy_choice(words)]
        needle = shorten(current, 100).casefold()
        if needle:
            facts = [f for f in facts if any(needle in SPACES.sub(" ", t).casefold() for t in (shown(f), f.text))]
        return [fact_choice(f, words) for f in facts[:AUTOCOMPLETE_LIMIT]]

    @forget_group.command(name="call", description="Forget one call or text chat, and what came only from it")
    @options(call="Start typing a date or what it was about")
    async def forget_call(self, interaction: discord.Interaction, call: str) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)  # first: the question counts what goes
        await forget_conversation_asking(MemoryActions.of(interaction), interaction, call, in_place=False)

    @forget_call.autocomplete("call")
    async def call_choices(self, interaction: discord.Interaction, current: str) -> list[app_commands.Choice[str]]:
        words = words_of(interaction)
        conversations = await self.forgetting.conversations(interaction.user.id, AUTOCOMPLETE_CONVERSATION_SCAN)
        if conversations is None:
            return [busy_choice(words)]
        choices = [
            app_commands.Choice(name=conversation_name(c, words), value=f"{c.kind}:{c.ref_id}") for c in conversations
        ]
        needle = shorten(current, 100).casefold()
        if needle:
            choices = [c for c in choices if needle in c.name.casefold()]
        return choices[:AUTOCOMPLETE_LIMIT]

    @forget_group.command(name="everything", description="Forget everything the agent remembers about you")
    async def forget_everything_command(self, interaction: discord.Interaction) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)  # the confirmation counts what would go
        actions = MemoryActions.of(interaction)
        view = ConfirmEverythingView(actions, interaction.user.id)
        await view.send(interaction, await actions.confirm_text(interaction.user.id))


async def setup(bot: MemoryBot) -> None:
    await bot.add_cog(Memory(bot))
