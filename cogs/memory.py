"""/memory and /forget: see what the agent remembers, export it, pause it, and forget one thing or everything.

Thin by design: every command parses the interaction, calls the memory service (or a simple store read), and renders
the answer. Every reply is ephemeral. Memory text goes to the member who owns it and nowhere else: log lines carry
ids and counts only.

Commands:
    /memory                      the memory panel: facts with source and date, calls and chats, ◀ ▶ pages,
                                 **Export**, **Pause memory** / **Resume memory**, **Forget…**
    /forget item item:<…>        one fact (autocomplete lists the caller's current facts)
    /forget call call:<…>        one call or text chat, its lines and the facts that came only from it
    /forget everything           everything, after a confirmation
"""

from __future__ import annotations

import io
import json
import logging
import time

import discord
from discord import app_commands
from discord.ext import commands

from bot.client import MemoryBot
from bot.memory.service import MemoryPage, MemoryService
from bot.store.repository import Store
from cogs._memory_ui import (
    AUTOCOMPLETE_CONVERSATION_SCAN,
    AUTOCOMPLETE_FACT_SCAN,
    AUTOCOMPLETE_LIMIT,
    CALL_STILL_RUNNING,
    CLOSED_CALL_STATES,
    CONFIRM_EVERYTHING,
    CONVERSATIONS_PER_PAGE,
    EXPORT_READY,
    EXPORT_TOO_LARGE,
    FACT_ID,
    FACTS_PER_PAGE,
    NOT_FOUND,
    SPACES,
    ConfirmEverythingView,
    MemoryView,
    conversation_name,
    fact_choice,
    forgot_conversation_text,
    forgot_everything_text,
    forgot_fact_text,
    page_count,
    plural,
    shorten,
)

log = logging.getLogger(__name__)


class Memory(commands.Cog):
    forget_group = app_commands.Group(name="forget", description="Delete what the agent remembers about you, for real")

    def __init__(self, bot: MemoryBot):
        self.bot = bot

    @property
    def memory(self) -> MemoryService:
        return self.bot.services.memory

    @property
    def store(self) -> Store:
        return self.bot.services.store

    # ---- service calls, shared by the commands and the buttons -----------------------------------------

    async def load(self, user_id: int, index: int) -> tuple[MemoryPage, int, int]:
        """One page of the member's memory, the page index actually shown (clamped) and the page count."""
        page = await self.memory.page(
            user_id, page=index, facts_per_page=FACTS_PER_PAGE, calls_per_page=CONVERSATIONS_PER_PAGE
        )
        pages = page_count(page)
        if index >= pages:
            index = pages - 1
            page = await self.memory.page(
                user_id, page=index, facts_per_page=FACTS_PER_PAGE, calls_per_page=CONVERSATIONS_PER_PAGE
            )
        return page, index, pages

    async def set_memory_enabled(self, user_id: int, enabled: bool) -> None:
        """Pausing keeps the member's choice; resuming is choosing "Remember me" again (so calls remember too)."""
        if enabled:
            await self.store.set_consent(user_id, True, time.time())
        else:
            await self.store.set_memory_enabled(user_id, False, time.time())
        log.info("user %s %s their memory", user_id, "resumed" if enabled else "paused")

    async def send_export(self, interaction: discord.Interaction) -> None:
        """The member's memory as a JSON attachment, in a new ephemeral message (the interaction is acknowledged)."""
        user_id = interaction.user.id
        data = await self.memory.export(user_id)
        blob = json.dumps(data, indent=2, ensure_ascii=False).encode()
        if len(blob) > interaction.filesize_limit:
            await interaction.followup.send(EXPORT_TOO_LARGE.format(size=len(blob) / 1e6), ephemeral=True)
            log.info("export of user %s too large to attach (%d bytes)", user_id, len(blob))
            return
        file = discord.File(io.BytesIO(blob), filename=f"memory-{user_id}.json")
        await interaction.followup.send(EXPORT_READY, file=file, ephemeral=True)
        log.info("user %s exported their memory (%d bytes)", user_id, len(blob))

    async def forget_fact(self, user_id: int, value: str) -> str:
        fact_id = int(value.strip()) if FACT_ID.fullmatch(value.strip()) else None
        fact = None if fact_id is None else await self.memory.forget_fact(user_id, fact_id)
        if fact is None:
            log.info("user %s asked to forget a fact that is not theirs or does not exist", user_id)
            return NOT_FOUND
        log.info("user %s forgot fact %s", user_id, fact.fact_id)
        return forgot_fact_text(fact)

    async def forget_conversation(self, user_id: int, value: str) -> str:
        kind, _, ref_id = value.strip().partition(":")
        started_at: float | None = None
        if kind == "call" and ref_id:
            call = await self.store.get_call(ref_id)
            if call is not None and call.user_id == user_id:
                if call.state not in CLOSED_CALL_STATES:
                    return CALL_STILL_RUNNING
                started_at = call.started_at
        elif kind == "chat" and ref_id:
            chat = await self.store.get_chat(ref_id)
            if chat is not None and chat.user_id == user_id:
                started_at = chat.started_at
        result = None if started_at is None else await self.memory.forget_conversation(user_id, kind, ref_id)
        if started_at is None or result is None:
            log.info("user %s asked to forget a conversation that is not theirs or does not exist", user_id)
            return NOT_FOUND
        log.info("user %s forgot %s %s: %d turns, %d facts", user_id, kind, ref_id, result.turns, result.facts)
        return forgot_conversation_text(kind, started_at, result)

    async def forget_value(self, user_id: int, value: str) -> str:
        """A picker value: `fact:<id>`, `call:<id>` or `chat:<id>`."""
        if value.startswith("fact:"):
            return await self.forget_fact(user_id, value.removeprefix("fact:"))
        return await self.forget_conversation(user_id, value)

    async def forget_everything(self, user_id: int) -> str:
        result = await self.memory.forget_everything(user_id)
        log.info(
            "user %s forgot everything: %d calls, %d chats, %d turns, %d facts",
            user_id,
            result.calls,
            result.chats,
            result.turns,
            result.facts,
        )
        return forgot_everything_text(result)

    async def confirm_text(self, user_id: int) -> str:
        facts = await self.store.count_facts(user_id, include_superseded=True)
        conversations = await self.store.count_conversations(user_id)
        what = f" ({plural(facts, 'fact')}, {plural(conversations, 'call or chat', 'calls and chats')})"
        return CONFIRM_EVERYTHING.format(what=what if facts or conversations else ",")

    # ---- /memory ---------------------------------------------------------------------------------------

    @app_commands.command(name="memory", description="See what the agent remembers about you; export, pause, forget")
    async def memory_command(self, interaction: discord.Interaction) -> None:
        page, index, pages = await self.load(interaction.user.id, 0)
        view = MemoryView(self, interaction.user.id, page, index, pages)
        await interaction.response.send_message(embed=view.embed(), view=view, ephemeral=True)
        view.handle = interaction

    # ---- /forget ---------------------------------------------------------------------------------------

    @forget_group.command(name="item", description="Forget one thing the agent knows about you")
    @app_commands.describe(item="Start typing to find it")
    async def forget_item(self, interaction: discord.Interaction, item: str) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)
        text = await self.forget_fact(interaction.user.id, item)
        await interaction.followup.send(text, ephemeral=True, allowed_mentions=discord.AllowedMentions.none())

    @forget_item.autocomplete("item")
    async def item_choices(self, interaction: discord.Interaction, current: str) -> list[app_commands.Choice[str]]:
        facts = await self.store.list_facts(interaction.user.id, limit=AUTOCOMPLETE_FACT_SCAN)
        needle = shorten(current, 100).casefold()
        if needle:
            facts = [f for f in facts if needle in SPACES.sub(" ", f.text).casefold()]
        return [fact_choice(f) for f in facts[:AUTOCOMPLETE_LIMIT]]

    @forget_group.command(name="call", description="Forget one call or text chat, and what came only from it")
    @app_commands.describe(call="Start typing a date or what it was about")
    async def forget_call(self, interaction: discord.Interaction, call: str) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)  # a long call takes a moment to delete
        text = await self.forget_conversation(interaction.user.id, call)
        await interaction.followup.send(text, ephemeral=True)

    @forget_call.autocomplete("call")
    async def call_choices(self, interaction: discord.Interaction, current: str) -> list[app_commands.Choice[str]]:
        conversations = await self.store.list_conversations(interaction.user.id, limit=AUTOCOMPLETE_CONVERSATION_SCAN)
        choices = [app_commands.Choice(name=conversation_name(c), value=f"{c.kind}:{c.ref_id}") for c in conversations]
        needle = shorten(current, 100).casefold()
        if needle:
            choices = [c for c in choices if needle in c.name.casefold()]
        return choices[:AUTOCOMPLETE_LIMIT]

    @forget_group.command(name="everything", description="Forget everything the agent remembers about you")
    async def forget_everything_command(self, interaction: discord.Interaction) -> None:
        view = ConfirmEverythingView(self, interaction.user.id)
        await interaction.response.send_message(await self.confirm_text(interaction.user.id), view=view, ephemeral=True)
        view.handle = interaction


async def setup(bot: MemoryBot) -> None:
    await bot.add_cog(Memory(bot))
