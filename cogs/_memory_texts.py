"""What /memory and /forget say: the member-facing texts, the memory embed, choices and picker options. Pure
rendering of the memory service's records; the views that send them are in ``cogs._memory_ui``."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

import discord
from discord import app_commands

from bot.memory.forgetting import FactTraces
from bot.memory.service import MemoryPage
from bot.memory.wording import for_member
from bot.messages import plural
from bot.store.models import ConversationSummary, FactRecord, ForgetResult

FACTS_PER_PAGE = 8
CONVERSATIONS_PER_PAGE = 3
DESCRIPTION_BUDGET = 3500
"""Embeds allow 4096 characters of description and 6000 in all; two fields of at most 1024 come on top."""

TITLE = "What I remember about you"
MEMORY_ON = (
    "🟢 Memory is **on**: what you say in calls and chats is remembered and used next time. "
    "**Pause memory** stops that until you resume it."
)
MEMORY_NOT_CHOSEN = (
    "⚪ Memory is **not on yet**: your next `/call` or `/chat` asks whether I may remember you. "
    "Press **Remember me** to turn it on now."
)
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
CONFIRM_CONVERSATION_EXPIRED = "This confirmation expired, so nothing was forgotten. Use `/forget call` to try again."
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

SPACES = re.compile(r"\s+")


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


def remembering(page: MemoryPage) -> bool:
    """Whether what the member says is remembered now: they chose **Remember me** and have not paused it."""
    return page.chosen and page.memory_enabled


def render_page(page: MemoryPage, index: int, pages: int) -> discord.Embed:
    status = MEMORY_ON if remembering(page) else MEMORY_PAUSED if page.chosen else MEMORY_NOT_CHOSEN
    colour = discord.Colour.green() if remembering(page) else discord.Colour.light_grey()
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


def conversation_what(result: ForgetResult) -> str:
    """What forgetting a call or chat removes: "7 lines and 4 facts that came only from it"."""
    what = plural(result.turns, "line")
    if result.facts:
        what += f" and {plural(result.facts, 'fact')} that came only from it"
    return what


def forgot_conversation_text(kind: str, started_at: float, result: ForgetResult) -> str:
    return f"Forgot your {kind_label(kind).lower()} of {stamp(started_at)}: {conversation_what(result)}."


def confirm_conversation_text(kind: str, started_at: float, preview: ForgetResult) -> str:
    return (
        f"**Forget your {kind_label(kind).lower()} of {stamp(started_at)}?**\n"
        f"This deletes {conversation_what(preview)}. It can't be undone."
    )


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
