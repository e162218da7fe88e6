"""What /memory and /forget show: texts, the memory embed, the memory actions, and the views (panel, picker,
confirmations) whose controls keep working after a restart (see ``cogs._owned``).

The views talk to :class:`MemoryActions` (the memory service and the store), never to the cog."""

from __future__ import annotations

import io
import json
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Literal, Self

import discord
from discord import app_commands

from bot.memory.forgetting import FactTraces
from bot.memory.service import MemoryPage, MemoryService
from bot.memory.wording import for_member
from bot.messages import plural
from bot.store.models import ConversationSummary, FactRecord, ForgetResult
from bot.store.repository import Store
from cogs._own_words import EDIT_CONTROLS, edit_menu
from cogs._owned import OwnedControl, OwnedView, bot_of, owner_of

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
CONFIRM_FACT_EXPIRED = "This confirmation expired, so nothing was forgotten. Use `/forget item` to try again."
CONFIRM_FACT = (
    "**Forget “{fact}”?**\n"
    "So that the agent no longer knows it in any form, this also deletes {what} where it came up. "
    "It can't be undone."
)
PICK_PROMPT = "**What should I forget?** Choose one item from this page, or forget everything."
EXPORT_READY = "Here is everything I remember about you, as JSON."
EXPORT_TOO_LARGE = (
    "Your memory is too large to attach here ({size:.1f} MB). Ask the person who hosts the bot for an export "
    "(`export-user` on the command line), or forget old calls first."
)
RESET_NOTE = "Your memory choices were reset too: your next `/call` asks again whether I may remember you."

NO_MENTIONS = discord.AllowedMentions.none()
SPACES = re.compile(r"\s+")
FACT_ID = re.compile(r"[0-9]{1,18}")


# ---- pure rendering ------------------------------------------------------------------------------------


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


def shown(fact: FactRecord) -> str:
    """A fact's text as its member reads it (``bot.memory.wording.for_member``): "Your name is Noor"."""
    return for_member(fact.text, told=fact.told)


def fact_source(fact: FactRecord) -> str:
    if fact.told:
        where = "told by you"
    elif fact.source_call_id:
        where = "from a call"
    elif fact.source_chat_id:
        where = "from a chat"
    else:
        where = "noted"
    said = f", said {plural(fact.mentions, 'time')}" if fact.mentions > 1 else ""
    return f"{where}, {stamp(fact.created_at)}{said}"


def fact_line(fact: FactRecord) -> str:
    return f"• {_safe(shown(fact), 250)} — *{fact_source(fact)}*"


def superseded_line(fact: FactRecord) -> str:
    when = fact.invalidated_at or fact.updated_at
    change = "replaced" if fact.superseded_by is not None else "no longer true"
    return f"• ~~{_safe(shown(fact), 120)}~~ → {change} on {stamp(when)}"


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


def traces_text(traces: FactTraces) -> str:
    """What forgetting the fact also removes, e.g. "2 lines of your conversations and 1 summary"."""
    parts = []
    if traces.turn_ids:
        parts.append(f"{plural(len(traces.turn_ids), 'line')} of your conversations")
    if traces.summaries:
        parts.append(f"{plural(len(traces.summaries), 'conversation summary', 'conversation summaries')}")
    return " and ".join(parts)


def forgot_fact_text(traces: FactTraces) -> str:
    text = f"Forgot 1 fact: “{shorten(shown(traces.fact), 1500)}”"
    if traces.removes_more:
        text += f", with {traces_text(traces)} that repeated it."
    return text


def confirm_fact_text(traces: FactTraces) -> str:
    return CONFIRM_FACT.format(fact=shorten(shown(traces.fact), 1500), what=traces_text(traces))


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
    return app_commands.Choice(name=shorten(shown(fact), 100) or f"Fact {fact.fact_id}", value=str(fact.fact_id))


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
            label=shorten(shown(f), 100) or f"Fact {f.fact_id}",
            value=f"fact:{f.fact_id}",
            description=f"Fact · {'told by you' if f.told else 'learned'} {plain_date(f.created_at)}",
            emoji="🧠",
        )
        for f in page.facts
    ]
    options += [
        discord.SelectOption(
            label=shorten(shown(f), 100) or f"Fact {f.fact_id}",
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


# ---- what the views do: the memory service and the store, behind one small interface -------------------


class MemoryActions:
    """Everything /memory and /forget do to a member's memory, with the texts the member reads back."""

    def __init__(self, memory: MemoryService, store: Store):
        self.memory = memory
        self.store = store

    @classmethod
    def of(cls, interaction: discord.Interaction) -> Self:
        services = bot_of(interaction).services
        return cls(services.memory, services.store)

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

    async def fact_traces(self, user_id: int, value: str) -> FactTraces | None:
        """The member's fact ``value`` (its id as text) and what forgetting it also removes; None if not theirs."""
        fact_id = int(value.strip()) if FACT_ID.fullmatch(value.strip()) else None
        traces = None if fact_id is None else await self.memory.fact_traces(user_id, fact_id)
        if traces is None:
            log.info("user %s asked to forget a fact that is not theirs or does not exist", user_id)
        return traces

    async def forget_fact(self, user_id: int, fact_id: int) -> str:
        traces = await self.memory.forget_fact(user_id, fact_id)
        if traces is None:
            log.info("user %s asked to forget a fact that is not theirs or does not exist", user_id)
            return NOT_FOUND
        log.info(
            "user %s forgot fact %s with %d lines and %d summaries",
            user_id,
            fact_id,
            len(traces.turn_ids),
            len(traces.summaries),
        )
        return forgot_fact_text(traces)

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


After = Callable[[], Awaitable[None]] | None


async def forget_fact_or_ask(
    actions: MemoryActions,
    interaction: discord.Interaction,
    value: str,
    *,
    after: After = None,
    in_place: bool,
) -> None:
    """Forget a fact at once when it is all that goes; otherwise ask first, saying what else goes with it.
    ``interaction`` is already acknowledged (deferred). ``in_place``: answer by editing the clicked message (the
    picker) rather than with a new message."""
    owner = interaction.user.id
    traces = await actions.fact_traces(owner, value)
    if traces is not None and traces.removes_more:
        confirm = ConfirmFactView(actions, owner, traces.fact.fact_id, after=after)
        if in_place:
            await confirm.replace(interaction, content=confirm_fact_text(traces))
        else:
            await confirm.send_followup(interaction, confirm_fact_text(traces), allowed_mentions=NO_MENTIONS)
        return
    text = NOT_FOUND if traces is None else await actions.forget_fact(owner, traces.fact.fact_id)
    if in_place:
        await interaction.edit_original_response(content=text, view=None, allowed_mentions=NO_MENTIONS)
    else:
        await interaction.followup.send(text, ephemeral=True, allowed_mentions=NO_MENTIONS)
    if after is not None:
        await after()


# ---- views ---------------------------------------------------------------------------------------------


class _ForgetStep(OwnedView):
    """A step of forgetting (picker, confirmation): what it works with, and what to refresh afterwards."""

    def __init__(self, actions: MemoryActions, owner_id: int, *, timeout: float, after: After):
        super().__init__(owner_id, timeout=timeout)
        self.actions = actions
        self.after = after

    @classmethod
    def take(cls, interaction: discord.Interaction) -> tuple[MemoryActions, After]:
        """A click on this step's message ends the step: its actions and follow-up when it is live here; after a
        restart, fresh actions and nothing to refresh."""
        step = cls.live(interaction)
        if step is None:
            return MemoryActions.of(interaction), None
        step.stop()
        return step.actions, step.after


PanelAction = Literal["prev", "next", "export", "toggle", "forget"]


class MemoryView(OwnedView):
    """The /memory panel. Every click on it is acknowledged at once with a deferred update of it (the store may be
    waiting for another writer, and Discord gives an interaction 3 seconds), then answered by editing it, so the
    latest click can still disable the buttons when the panel times out."""

    not_yours = NOT_YOURS

    def __init__(self, actions: MemoryActions, owner_id: int, page: MemoryPage, index: int, pages: int):
        super().__init__(owner_id, timeout=MEMORY_VIEW_SECONDS)
        self.actions = actions
        self.sync(page, index, pages)

    @classmethod
    async def open(cls, actions: MemoryActions, owner_id: int, index: int) -> MemoryView:
        return cls(actions, owner_id, *await actions.load(owner_id, index))

    def sync(self, page: MemoryPage, index: int, pages: int) -> None:
        self.page, self.index, self.pages = page, index, pages
        self.clear_items()
        on = page.memory_enabled
        for action, label, emoji, style, row, disabled in (
            ("prev", "◀", None, discord.ButtonStyle.secondary, 0, index <= 0),
            ("next", "▶", None, discord.ButtonStyle.secondary, 0, index >= pages - 1),
            ("export", "Export", "📦", discord.ButtonStyle.primary, 1, False),
            (
                "toggle",
                "Pause memory" if on else "Resume memory",
                "⏸️" if on else "▶️",
                discord.ButtonStyle.secondary if on else discord.ButtonStyle.success,
                1,
                False,
            ),
            (
                "forget",
                "Forget…",
                "🗑️",
                discord.ButtonStyle.danger,
                1,
                not (page.facts or page.superseded or page.conversations),
            ),
        ):
            button: discord.ui.Button[MemoryView] = discord.ui.Button(
                label=label,
                emoji=emoji,
                style=style,
                row=row,
                disabled=disabled,
                custom_id=f"memory:{action}:{self.owner_id}:{index}",
            )
            self.add_item(PanelButton(button, self.owner_id, action, index))  # type: ignore[arg-type]
        menu = edit_menu(self.owner_id, page.facts)
        if menu is not None:
            self.add_item(menu)

    def current_fact(self, fact_id: int) -> FactRecord | None:
        """The current fact ``fact_id`` as this panel shows it, if it does."""
        return next((f for f in self.page.facts if f.fact_id == fact_id), None)

    def embed(self) -> discord.Embed:
        return render_page(self.page, self.index, self.pages)

    async def show(self, interaction: discord.Interaction, index: int) -> None:
        """Answer a (deferred) click on this panel with the given page."""
        self.sync(*await self.actions.load(self.owner_id, index))
        await self.replace(interaction, embed=self.embed())

    async def refresh(self) -> None:
        """Re-read the current page after something was forgotten from another message."""
        if self.is_finished():
            return
        self.sync(*await self.actions.load(self.owner_id, self.index))
        await self.edit(embed=self.embed(), view=self)

    async def on_timeout(self) -> None:
        self.disable_all()
        await self.edit(view=self)

    async def act(self, action: str, interaction: discord.Interaction) -> None:
        """Carry out a click on this panel, already acknowledged with ``interaction.response.defer()``."""
        self.timeout = self.timeout  # a click restarts the inactivity timeout
        if action == "prev":
            await self.show(interaction, max(0, self.index - 1))
        elif action == "next":
            await self.show(interaction, self.index + 1)
        elif action == "toggle":
            await self.actions.set_memory_enabled(self.owner_id, not self.page.memory_enabled)
            await self.show(interaction, self.index)
        elif action == "export":
            self.handle = interaction
            await self.actions.send_export(interaction)
        elif action == "forget":
            self.handle = interaction
            picker = ForgetPickerView(self.actions, self.owner_id, self.page, after=self.refresh)
            await picker.send_followup(interaction, PICK_PROMPT)


class PanelButton(
    OwnedControl,
    discord.ui.DynamicItem[discord.ui.Button[MemoryView]],
    template=r"memory:(?P<action>prev|next|export|toggle|forget):(?P<owner>[0-9]+):(?P<index>[0-9]+)",
):
    not_yours = NOT_YOURS

    def __init__(self, button: discord.ui.Button[MemoryView], owner_id: int, action: PanelAction, index: int):
        super().__init__(button, owner_id)
        self.action, self.index = action, index

    @classmethod
    def state_from(cls, match: re.Match[str]) -> dict[str, Any]:
        return {"owner_id": owner_of(match), "action": match["action"], "index": int(match["index"])}

    async def run(self, interaction: discord.Interaction) -> None:
        await interaction.response.defer()  # first: every action reads or writes the store
        panel = MemoryView.live(interaction)
        if panel is None:  # sent by an earlier process: rebuild it from the custom_id
            panel = await MemoryView.open(MemoryActions.of(interaction), self.owner_id, self.index)
        await panel.act(self.action, interaction)


class ForgetPickerView(_ForgetStep):
    """What **Forget…** opens: one item of the panel's current page, or everything (after a confirmation)."""

    def __init__(self, actions: MemoryActions, owner_id: int, page: MemoryPage, *, after: After):
        super().__init__(actions, owner_id, timeout=PICKER_SECONDS, after=after)
        options = picker_options(page)
        if options:
            select: discord.ui.Select[ForgetPickerView] = discord.ui.Select(
                placeholder="Choose one thing to forget",
                min_values=1,
                max_values=1,
                row=0,
                options=options,
                custom_id=f"forget:pick:{owner_id}",
            )
            self.add_item(PickSelect(select, owner_id))
        self.add_item(EverythingButton.make(owner_id))
        self.add_item(CancelButton.make(owner_id))

    async def on_timeout(self) -> None:
        self.disable_all()
        await self.edit(view=self)


class PickSelect(
    OwnedControl,
    discord.ui.DynamicItem[discord.ui.Select[ForgetPickerView]],
    template=r"forget:pick:(?P<owner>[0-9]+)",
):
    async def run(self, interaction: discord.Interaction) -> None:
        await interaction.response.defer()  # first: both kinds of item are looked up in the store
        actions, after = ForgetPickerView.take(interaction)
        value = self.item.values[0]
        if value.startswith("fact:"):
            await forget_fact_or_ask(actions, interaction, value.removeprefix("fact:"), after=after, in_place=True)
            return
        text = await actions.forget_conversation(self.owner_id, value)
        await interaction.edit_original_response(content=text, view=None, allowed_mentions=NO_MENTIONS)
        if after is not None:
            await after()


class EverythingButton(
    OwnedControl,
    discord.ui.DynamicItem[discord.ui.Button[ForgetPickerView]],
    template=r"forget:everything:(?P<owner>[0-9]+)",
):
    """The picker's **Forget everything…**: asks for a confirmation."""

    @classmethod
    def make(cls, owner_id: int) -> Self:
        return cls(
            discord.ui.Button(
                label="Forget everything…",
                style=discord.ButtonStyle.danger,
                row=1,
                custom_id=f"forget:everything:{owner_id}",
            ),
            owner_id,
        )

    async def run(self, interaction: discord.Interaction) -> None:
        await interaction.response.defer()  # first: the confirmation counts what would go
        actions, after = ForgetPickerView.take(interaction)
        confirm = ConfirmEverythingView(actions, self.owner_id, after=after)
        await confirm.replace(interaction, content=await actions.confirm_text(self.owner_id))


class CancelButton(
    OwnedControl,
    discord.ui.DynamicItem[discord.ui.Button[OwnedView]],
    template=r"forget:cancel:(?P<owner>[0-9]+)",
):
    """**Cancel** on the picker and on every confirmation."""

    @classmethod
    def make(cls, owner_id: int, row: int | None = 1) -> Self:
        return cls(
            discord.ui.Button(
                label="Cancel", style=discord.ButtonStyle.secondary, row=row, custom_id=f"forget:cancel:{owner_id}"
            ),
            owner_id,
        )

    async def run(self, interaction: discord.Interaction) -> None:
        view = OwnedView.live(interaction)
        if view is not None:
            view.stop()
        await interaction.response.edit_message(content=CANCELLED, view=None)


class ConfirmEverythingView(_ForgetStep):
    def __init__(self, actions: MemoryActions, owner_id: int, *, after: After = None):
        super().__init__(actions, owner_id, timeout=CONFIRM_SECONDS, after=after)
        self.add_item(ConfirmEverythingButton.make(owner_id))
        self.add_item(CancelButton.make(owner_id, row=None))

    async def on_timeout(self) -> None:
        self.disable_all()
        await self.edit(content=CONFIRM_EXPIRED, view=self)


class ConfirmEverythingButton(
    OwnedControl,
    discord.ui.DynamicItem[discord.ui.Button[ConfirmEverythingView]],
    template=r"forget:confirm:(?P<owner>[0-9]+)",
):
    @classmethod
    def make(cls, owner_id: int) -> Self:
        return cls(
            discord.ui.Button(
                label="Forget everything", style=discord.ButtonStyle.danger, custom_id=f"forget:confirm:{owner_id}"
            ),
            owner_id,
        )

    async def run(self, interaction: discord.Interaction) -> None:
        actions, after = ConfirmEverythingView.take(interaction)
        await interaction.response.defer()
        text = await actions.forget_everything(self.owner_id)
        await interaction.edit_original_response(content=text, view=None)
        if after is not None:
            await after()


class ConfirmFactView(_ForgetStep):
    """Forgetting one fact that also removes lines or summaries: asked first."""

    def __init__(self, actions: MemoryActions, owner_id: int, fact_id: int, *, after: After = None):
        super().__init__(actions, owner_id, timeout=CONFIRM_SECONDS, after=after)
        self.add_item(ConfirmFactButton.make(owner_id, fact_id))
        self.add_item(CancelButton.make(owner_id, row=None))

    async def on_timeout(self) -> None:
        self.disable_all()
        await self.edit(content=CONFIRM_FACT_EXPIRED, view=self)


class ConfirmFactButton(
    OwnedControl,
    discord.ui.DynamicItem[discord.ui.Button[ConfirmFactView]],
    template=r"forget:fact:(?P<owner>[0-9]+):(?P<fact>[0-9]+)",
):
    def __init__(self, button: discord.ui.Button[ConfirmFactView], owner_id: int, fact_id: int):
        super().__init__(button, owner_id)
        self.fact_id = fact_id

    @classmethod
    def make(cls, owner_id: int, fact_id: int) -> Self:
        return cls(
            discord.ui.Button(
                label="Forget it", style=discord.ButtonStyle.danger, custom_id=f"forget:fact:{owner_id}:{fact_id}"
            ),
            owner_id,
            fact_id,
        )

    @classmethod
    def state_from(cls, match: re.Match[str]) -> dict[str, Any]:
        return {"owner_id": owner_of(match), "fact_id": int(match["fact"])}

    async def run(self, interaction: discord.Interaction) -> None:
        actions, after = ConfirmFactView.take(interaction)
        await interaction.response.defer()
        text = await actions.forget_fact(self.owner_id, self.fact_id)
        await interaction.edit_original_response(content=text, view=None, allowed_mentions=NO_MENTIONS)
        if after is not None:
            await after()


PERSISTENT_CONTROLS: tuple[type[discord.ui.DynamicItem[Any]], ...] = (
    PanelButton,
    PickSelect,
    EverythingButton,
    CancelButton,
    ConfirmEverythingButton,
    ConfirmFactButton,
    *EDIT_CONTROLS,
)
"""Registered by the memory cog, so a click on any of them is handled whatever process sent the message."""
