"""What /memory and /forget show: texts, the memory embed, and the views (panel, picker, confirmation)."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import discord
from discord import app_commands

from bot.client import FunnelledView
from bot.memory.service import MemoryPage
from bot.store.models import ConversationSummary, FactRecord, ForgetResult

if TYPE_CHECKING:
    from cogs.memory import Memory

log = logging.getLogger(__name__)

FACTS_PER_PAGE = 8
CONVERSATIONS_PER_PAGE = 3
MEMORY_VIEW_SECONDS = 10 * 60
"""Inactivity timeout of the /memory panel; below the 15-minute life of an interaction token, so the buttons
can still be disabled when it expires."""
PICKER_SECONDS = 5 * 60
CONFIRM_SECONDS = 2 * 60
AUTOCOMPLETE_LIMIT = 25
AUTOCOMPLETE_FACT_SCAN = 1000
AUTOCOMPLETE_CONVERSATION_SCAN = 50
CLOSED_CALL_STATES = ("ended", "failed")
DESCRIPTION_BUDGET = 3500
"""Embeds allow 4096 characters of description and 6000 in all; two fields of at most 1024 come on top."""

TITLE = "What I remember about you"
MEMORY_ON = "🟢 Memory is **on**: what you say in calls and chats is remembered and used next time."
MEMORY_PAUSED = (
    "⏸️ Memory is **paused**: nothing new is remembered, and calls and chats start without what's below. "
    "Press **Resume memory** to turn it back on."
)
EMPTY = (
    "I don't remember anything about you yet.\n"
    "Start a `/call` or talk to me with `/chat` — what you tell me shows up here."
)
FOOTER = "/forget removes one thing, one call, or everything"
NOT_YOURS = "This panel belongs to someone else. Use `/memory` to see your own."
NOT_FOUND = "I couldn't find that in your memory. Pick one of the suggestions that appear as you type."
CALL_STILL_RUNNING = "That call is still going. End it with `/hangup` first, then you can forget it."
CONFIRM_EVERYTHING = (
    "**Forget everything?**\n"
    "This deletes everything I remember about you{what} and resets your memory choices. It can't be undone."
)
CANCELLED = "Cancelled: nothing was forgotten."
CONFIRM_EXPIRED = "This confirmation expired, so nothing was forgotten. Use `/forget everything` to try again."
PICK_PROMPT = "**What should I forget?** Choose one item from this page, or forget everything."
EXPORT_READY = "Here is everything I remember about you, as JSON."
EXPORT_TOO_LARGE = (
    "Your memory is too large to attach here ({size:.1f} MB). Ask the person who hosts the bot for an export "
    "(`export-user` on the command line), or forget old calls first."
)
RESET_NOTE = "Your memory choices were reset too: your next `/call` asks again whether I may remember you."

SPACES = re.compile(r"\s+")
FACT_ID = re.compile(r"[0-9]{1,18}")


# ---- pure rendering ------------------------------------------------------------------------------------


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"


def shorten(text: str, limit: int) -> str:
    """One line, at most `limit` characters, with an ellipsis when cut."""
    flat = SPACES.sub(" ", text).strip()
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def stamp(ts: float) -> str:
    """A Discord timestamp: every member sees the date in their own time zone."""
    return f"<t:{int(ts)}:d>"


def plain_date(ts: float) -> str:
    """A date for places where Discord does not render timestamps (choice names, select options)."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")


def _safe(text: str, limit: int) -> str:
    return discord.utils.escape_markdown(shorten(text, limit))


def fact_source(fact: FactRecord) -> str:
    if fact.source_call_id:
        where = "from a call"
    elif fact.source_chat_id:
        where = "from a chat"
    else:
        where = "noted"
    said = f", said {fact.mentions} times" if fact.mentions > 1 else ""
    return f"{where}, {stamp(fact.created_at)}{said}"


def fact_line(fact: FactRecord) -> str:
    return f"• {_safe(fact.text, 250)} — *{fact_source(fact)}*"


def superseded_line(fact: FactRecord) -> str:
    when = fact.invalidated_at or fact.updated_at
    change = "replaced" if fact.superseded_by is not None else "no longer true"
    return f"• ~~{_safe(fact.text, 120)}~~ → {change} on {stamp(when)}"


def gist(conversation: ConversationSummary) -> str:
    return conversation.summary or " / ".join(conversation.first_lines)


def kind_label(kind: str) -> str:
    return "Call" if kind == "call" else "Chat"


def conversation_line(conversation: ConversationSummary) -> str:
    icon = "📞" if conversation.kind == "call" else "💬"
    head = (
        f"{icon} **{kind_label(conversation.kind)}** · {stamp(conversation.started_at)} · "
        f"{plural(conversation.turn_count, 'line')}"
    )
    text = gist(conversation)
    return f"{head}\n> {_safe(text, 200)}" if text.strip() else head


def fit(lines: list[str], limit: int = 1024) -> str:
    """Join lines up to an embed field's limit, saying how many did not fit."""
    out: list[str] = []
    used = 0
    for n, line in enumerate(lines):
        rest = len(lines) - n
        more = f"…and {rest} more" if rest else ""
        if used + len(line) + 1 + len(more) + 1 > limit:
            out.append(more)
            break
        out.append(line)
        used += len(line) + 1
    return "\n".join(out)


def page_count(page: MemoryPage) -> int:
    return max(
        1,
        math.ceil(page.fact_count / FACTS_PER_PAGE),
        math.ceil(page.conversation_count / CONVERSATIONS_PER_PAGE),
    )


def is_empty(page: MemoryPage) -> bool:
    return page.fact_count == 0 and page.conversation_count == 0 and not page.superseded


def render_page(page: MemoryPage, index: int, pages: int) -> discord.Embed:
    status = MEMORY_ON if page.memory_enabled else MEMORY_PAUSED
    colour = discord.Colour.green() if page.memory_enabled else discord.Colour.light_grey()
    embed = discord.Embed(title=TITLE, colour=colour)
    if is_empty(page):
        embed.description = f"{status}\n\n{EMPTY}"
        embed.set_footer(text=f"Page 1 of 1 · {FOOTER}")
        return embed
    parts = [status, ""]
    if page.facts:
        parts.append(f"**What I know about you** ({page.fact_count})")
        parts.append(fit([fact_line(f) for f in page.facts], DESCRIPTION_BUDGET - len(status) - 40))
    elif page.fact_count == 0:
        parts.append("**What I know about you**\nNothing yet: facts appear here shortly after a call or chat.")
    embed.description = "\n".join(parts).strip()
    if page.superseded:
        embed.add_field(name="Earlier versions", value=fit([superseded_line(f) for f in page.superseded]), inline=False)
    if page.conversations:
        embed.add_field(
            name=f"Your calls and chats ({page.conversation_count})",
            value=fit([conversation_line(c) for c in page.conversations]),
            inline=False,
        )
    embed.set_footer(text=f"Page {index + 1} of {pages} · {FOOTER}")
    return embed


def forgot_fact_text(fact: FactRecord) -> str:
    return f"Forgot 1 fact: “{shorten(fact.text, 1500)}”"


def forgot_conversation_text(kind: str, started_at: float, result: ForgetResult) -> str:
    what = plural(result.turns, "line")
    if result.facts:
        what += f" and {plural(result.facts, 'fact')} that came only from it"
    return f"Forgot your {kind_label(kind).lower()} of {stamp(started_at)}: {what}."


def forgot_everything_text(result: ForgetResult) -> str:
    if not (result.calls or result.chats or result.turns or result.facts):
        return f"There was nothing to forget: your memory was already empty.\n{RESET_NOTE}"
    counts = ", ".join(
        [
            plural(result.calls, "call"),
            plural(result.chats, "chat"),
            plural(result.turns, "line"),
            plural(result.facts, "fact"),
        ]
    )
    return f"Forgot everything: {counts}.\n{RESET_NOTE}"


def fact_choice(fact: FactRecord) -> app_commands.Choice[str]:
    return app_commands.Choice(name=shorten(fact.text, 100) or f"Fact {fact.fact_id}", value=str(fact.fact_id))


def conversation_name(conversation: ConversationSummary) -> str:
    head = (
        f"{kind_label(conversation.kind)} {plain_date(conversation.started_at)} · "
        f"{plural(conversation.turn_count, 'line')}"
    )
    text = gist(conversation)
    return shorten(f"{head} · {text}" if text.strip() else head, 100)


def picker_options(page: MemoryPage) -> list[discord.SelectOption]:
    options = [
        discord.SelectOption(
            label=shorten(f.text, 100) or f"Fact {f.fact_id}",
            value=f"fact:{f.fact_id}",
            description=f"Fact · learned {plain_date(f.created_at)}",
            emoji="🧠",
        )
        for f in page.facts
    ]
    options += [
        discord.SelectOption(
            label=shorten(f.text, 100) or f"Fact {f.fact_id}",
            value=f"fact:{f.fact_id}",
            description="Earlier version (no longer current)",
            emoji="🕘",
        )
        for f in page.superseded
    ]
    options += [
        discord.SelectOption(
            label=shorten(f"{kind_label(c.kind)} of {plain_date(c.started_at)} · {plural(c.turn_count, 'line')}", 100),
            value=f"{c.kind}:{c.ref_id}",
            description=shorten(gist(c), 100) or None,
            emoji="📞" if c.kind == "call" else "💬",
        )
        for c in page.conversations
    ]
    return options[:25]


# ---- views ---------------------------------------------------------------------------------------------


class OwnedView(FunnelledView):
    """A view only its owner may use. `handle` edits its message outside a click on it (timeouts, refreshes):
    an interaction whose original response is that message, or the followup message itself."""

    def __init__(self, owner_id: int, *, timeout: float):
        super().__init__(timeout=timeout)
        self.owner_id = owner_id
        self.handle: discord.Interaction | discord.WebhookMessage | None = None

    async def interaction_check(self, interaction: discord.Interaction) -> bool:
        if interaction.user.id == self.owner_id:
            return True
        await interaction.response.send_message(NOT_YOURS, ephemeral=True)
        return False

    def disable_all(self) -> None:
        for item in self.children:
            if isinstance(item, discord.ui.Button | discord.ui.Select):
                item.disabled = True

    async def edit(self, **changes: Any) -> None:
        """Edit this view's message, if Discord still allows it (ephemeral messages: 15 minutes)."""
        handle = self.handle
        try:
            if isinstance(handle, discord.Interaction):
                if not handle.is_expired():
                    await handle.edit_original_response(**changes)
            elif handle is not None:
                await handle.edit(**changes)
        except discord.HTTPException as exc:
            log.info("could not edit a memory message of user %s (HTTP %s)", self.owner_id, exc.status)


class MemoryView(OwnedView):
    """The /memory panel. Every click on it is answered by editing it (or deferring an update of it), so the latest
    click can still disable the buttons when the panel times out."""

    def __init__(self, cog: Memory, owner_id: int, page: MemoryPage, index: int, pages: int):
        super().__init__(owner_id, timeout=MEMORY_VIEW_SECONDS)
        self.cog = cog
        self.sync(page, index, pages)

    def sync(self, page: MemoryPage, index: int, pages: int) -> None:
        self.page, self.index, self.pages = page, index, pages
        self.previous.disabled = index <= 0
        self.next.disabled = index >= pages - 1
        self.toggle.label = "Pause memory" if page.memory_enabled else "Resume memory"
        self.toggle.emoji = "⏸️" if page.memory_enabled else "▶️"
        self.toggle.style = discord.ButtonStyle.secondary if page.memory_enabled else discord.ButtonStyle.success
        self.forget.disabled = not (page.facts or page.superseded or page.conversations)

    def embed(self) -> discord.Embed:
        return render_page(self.page, self.index, self.pages)

    async def show(self, interaction: discord.Interaction, index: int) -> None:
        """Answer a click on this panel with the given page."""
        self.sync(*await self.cog.load(self.owner_id, index))
        await interaction.response.edit_message(embed=self.embed(), view=self)
        self.handle = interaction

    async def refresh(self) -> None:
        """Re-read the current page after something was forgotten from another message."""
        if self.is_finished():
            return
        self.sync(*await self.cog.load(self.owner_id, self.index))
        await self.edit(embed=self.embed(), view=self)

    async def on_timeout(self) -> None:
        self.disable_all()
        await self.edit(view=self)

    @discord.ui.button(label="◀", style=discord.ButtonStyle.secondary, row=0)
    async def previous(self, interaction: discord.Interaction, button: discord.ui.Button[MemoryView]) -> None:
        await self.show(interaction, max(0, self.index - 1))

    @discord.ui.button(label="▶", style=discord.ButtonStyle.secondary, row=0)
    async def next(self, interaction: discord.Interaction, button: discord.ui.Button[MemoryView]) -> None:
        await self.show(interaction, self.index + 1)

    @discord.ui.button(label="Export", emoji="📦", style=discord.ButtonStyle.primary, row=1)
    async def export(self, interaction: discord.Interaction, button: discord.ui.Button[MemoryView]) -> None:
        await interaction.response.defer()
        self.handle = interaction
        await self.cog.send_export(interaction)

    @discord.ui.button(label="Pause memory", style=discord.ButtonStyle.secondary, row=1)
    async def toggle(self, interaction: discord.Interaction, button: discord.ui.Button[MemoryView]) -> None:
        await self.cog.set_memory_enabled(self.owner_id, not self.page.memory_enabled)
        await self.show(interaction, self.index)

    @discord.ui.button(label="Forget…", emoji="🗑️", style=discord.ButtonStyle.danger, row=1)
    async def forget(self, interaction: discord.Interaction, button: discord.ui.Button[MemoryView]) -> None:
        await interaction.response.defer()
        self.handle = interaction
        picker = ForgetPickerView(self.cog, self.owner_id, self.page, after=self.refresh)
        picker.handle = await interaction.followup.send(PICK_PROMPT, view=picker, ephemeral=True, wait=True)


class ForgetPickerView(OwnedView):
    """What **Forget…** opens: one item of the panel's current page, or everything (after a confirmation)."""

    def __init__(self, cog: Memory, owner_id: int, page: MemoryPage, *, after: Callable[[], Awaitable[None]]):
        super().__init__(owner_id, timeout=PICKER_SECONDS)
        self.cog = cog
        self.after = after
        options = picker_options(page)
        if options:
            choose: discord.ui.Select[ForgetPickerView] = self.choose
            choose.options = options
        else:
            self.remove_item(self.choose)

    async def on_timeout(self) -> None:
        self.disable_all()
        await self.edit(view=self)

    @discord.ui.select(placeholder="Choose one thing to forget", min_values=1, max_values=1, row=0)
    async def choose(self, interaction: discord.Interaction, select: discord.ui.Select[ForgetPickerView]) -> None:
        self.stop()
        await interaction.response.defer()
        text = await self.cog.forget_value(interaction.user.id, select.values[0])
        await interaction.edit_original_response(
            content=text, view=None, allowed_mentions=discord.AllowedMentions.none()
        )
        await self.after()

    @discord.ui.button(label="Forget everything…", style=discord.ButtonStyle.danger, row=1)
    async def everything(self, interaction: discord.Interaction, button: discord.ui.Button[ForgetPickerView]) -> None:
        self.stop()
        confirm = ConfirmEverythingView(self.cog, self.owner_id, after=self.after)
        await interaction.response.edit_message(content=await self.cog.confirm_text(self.owner_id), view=confirm)
        confirm.handle = interaction

    @discord.ui.button(label="Cancel", style=discord.ButtonStyle.secondary, row=1)
    async def cancel(self, interaction: discord.Interaction, button: discord.ui.Button[ForgetPickerView]) -> None:
        self.stop()
        await interaction.response.edit_message(content=CANCELLED, view=None)


class ConfirmEverythingView(OwnedView):
    def __init__(self, cog: Memory, owner_id: int, *, after: Callable[[], Awaitable[None]] | None = None):
        super().__init__(owner_id, timeout=CONFIRM_SECONDS)
        self.cog = cog
        self.after = after

    @discord.ui.button(label="Forget everything", style=discord.ButtonStyle.danger)
    async def confirm(self, interaction: discord.Interaction, button: discord.ui.Button[ConfirmEverythingView]) -> None:
        self.stop()
        await interaction.response.defer()
        text = await self.cog.forget_everything(interaction.user.id)
        await interaction.edit_original_response(content=text, view=None)
        if self.after is not None:
            await self.after()

    @discord.ui.button(label="Cancel", style=discord.ButtonStyle.secondary)
    async def cancel(self, interaction: discord.Interaction, button: discord.ui.Button[ConfirmEverythingView]) -> None:
        self.stop()
        await interaction.response.edit_message(content=CANCELLED, view=None)

    async def on_timeout(self) -> None:
        self.disable_all()
        await self.edit(content=CONFIRM_EXPIRED, view=self)


# ---- the cog -------------------------------------------------------------------------------------------
