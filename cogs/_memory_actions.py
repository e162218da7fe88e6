"""What /memory and /forget do to a member's memory, with the texts the member reads back: the one small
interface the panel and the forgetting steps talk to (never to the cog). The rules themselves are the services'."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Callable
from typing import Self

import discord

from bot.i18n import Words
from bot.memory.choices import MemberChoices
from bot.memory.forget_requests import ForgetRequests, Refusal
from bot.memory.forgetting import FactTraces
from bot.memory.service import MemoryPage, MemoryService
from bot.store.models import Conversation
from bot.translator import words_of
from cogs._memory_texts import (
    CONVERSATIONS_PER_PAGE,
    FACTS_PER_PAGE,
    confirm_conversation_text,
    forgot_conversation_text,
    forgot_everything_text,
    forgot_fact_text,
    page_count,
)
from cogs._owned import bot_of

log = logging.getLogger(__name__)

REFUSED: dict[Refusal, str] = {"not_found": "memory.not_found", "still_running": "memory.call_still_running"}
FACT_ID = re.compile(r"[0-9]{1,18}")


def parse_conversation(value: str) -> Conversation | None:
    """The call or chat a picker or autocomplete value names ("call:<id>" or "chat:<id>"), if it names one."""
    kind, _, ref_id = value.strip().partition(":")
    return Conversation.named(kind, ref_id) if kind in ("call", "chat") and ref_id else None


class MemoryActions:
    """Everything /memory and /forget do to a member's memory, with the texts the member reads back. Who may
    forget what is ``ForgetRequests``' rule, pausing is ``MemberChoices``'. ``words``: the member's language."""

    def __init__(self, memory: MemoryService, choices: MemberChoices, forgetting: ForgetRequests, words: Words):
        self.memory = memory
        self.choices = choices
        self.forgetting = forgetting
        self.words = words

    @classmethod
    def of(cls, interaction: discord.Interaction) -> Self:
        services = bot_of(interaction).services
        return cls(services.memory, services.choices, services.forget_requests, words_of(interaction))

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
        await self.choices.set_remembering(user_id, enabled)

    async def send_export(self, interaction: discord.Interaction) -> None:
        """The member's memory as a JSON attachment, in a new ephemeral message (the interaction is acknowledged)."""
        user_id = interaction.user.id
        size = await send_export(
            interaction,
            self.memory,
            user_id,
            self.words("memory.export_ready"),
            lambda size: self.words("memory.export_too_large", size=size / 1e6),
        )
        log.info("user %s exported their memory (%d bytes)", user_id, size)

    async def fact_traces(self, user_id: int, value: str) -> FactTraces | None:
        """The member's fact ``value`` (its id as text) and what forgetting it also removes; None if not theirs."""
        fact_id = int(value.strip()) if FACT_ID.fullmatch(value.strip()) else None
        if fact_id is None:
            log.info("user %s asked to forget a fact that is not theirs or does not exist", user_id)
            return None
        return await self.forgetting.fact(user_id, fact_id)

    async def forget_fact(self, user_id: int, fact_id: int) -> str:
        traces = await self.forgetting.forget_fact(user_id, fact_id)
        return self.words("memory.not_found") if traces is None else forgot_fact_text(traces, self.words)

    async def confirm_conversation_text(self, user_id: int, value: str) -> tuple[Conversation | None, str]:
        """The question before forgetting the member's call or chat ``value``, saying what goes (the
        conversation, or None with what to say instead)."""
        convo = parse_conversation(value)
        found = "not_found" if convo is None else await self.forgetting.preview_conversation(user_id, convo)
        if isinstance(found, str):
            return None, self.words(REFUSED[found])
        forgettable, preview = found
        return forgettable.conversation, confirm_conversation_text(
            forgettable.conversation.kind, forgettable.started_at, preview, self.words
        )

    async def forget_conversation(self, user_id: int, value: str) -> str:
        convo = parse_conversation(value)
        done = "not_found" if convo is None else await self.forgetting.forget_conversation(user_id, convo)
        if isinstance(done, str):
            return self.words(REFUSED[done])
        forgotten, result = done
        return forgot_conversation_text(forgotten.conversation.kind, forgotten.started_at, result, self.words)

    async def forget_everything(self, user_id: int) -> str:
        return forgot_everything_text(await self.forgetting.forget_everything(user_id), self.words)

    async def confirm_text(self, user_id: int) -> str:
        everything = await self.forgetting.everything(user_id)
        facts, conversations, words = everything.facts, everything.conversations, self.words
        what = ","
        if facts or conversations:
            what = words(
                "memory.confirm_everything.what",
                facts=words.count("count.fact", facts),
                conversations=words.count("count.call_or_chat", conversations),
            )
        return words("memory.confirm_everything", what=what)


async def send_export(
    interaction: discord.Interaction,
    memory: MemoryService,
    user_id: int,
    ready: str,
    too_large: Callable[[int], str],
) -> int:
    """Everything stored about ``user_id`` as ``memory-<id>.json`` in a new ephemeral message under ``ready``, or
    ``too_large(size)`` when Discord would not take the file; returns its size in bytes."""
    blob = json.dumps(await memory.export(user_id), indent=2, ensure_ascii=False).encode()
    if len(blob) > interaction.filesize_limit:
        await interaction.followup.send(too_large(len(blob)), ephemeral=True)
        return len(blob)
    file = discord.File(io.BytesIO(blob), filename=f"memory-{user_id}.json")
    await interaction.followup.send(ready, file=file, ephemeral=True)
    return len(blob)
