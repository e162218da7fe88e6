"""What /memory and /forget say: the member-facing texts, the memory embed, choices and picker options, in the
member's language (``memory.*`` keys of ``bot.i18n``). Pure rendering of the memory service's records; the views
that send them are in ``cogs._memory_ui`` (the panel) and ``cogs._forget_ui``."""

from __future__ import annotations

import math
import re

import discord
from discord import app_commands

from bot.i18n import Words
from bot.memory.forgetting import FactTraces
from bot.memory.service import MemoryPage
from bot.memory.wording import for_member
from bot.store.models import ConversationSummary, FactRecord, ForgetResult
from cogs._language import label

FACTS_PER_PAGE = 8
CONVERSATIONS_PER_PAGE = 3
DESCRIPTION_BUDGET = 3500
"""Embeds allow 4096 characters of description and 6000 in all; two fields of at most 1024 come on top."""

SPACES = re.compile(r"\s+")


# ---- pure rendering ------------------------------------------------------------------------------------


def shorten(text: str, limit: int) -> str:
    """One line, at most `limit` characters, with an ellipsis when cut."""
    flat = SPACES.sub(" ", text).strip()
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def stamp(ts: float) -> str:
    """A Discord timestamp: every member sees the date in their own time zone."""
    return f"<t:{int(ts)}:d>"


def _safe(text: str, limit: int) -> str:
    return discord.utils.escape_markdown(shorten(text, limit))


def shown(fact: FactRecord) -> str:
    """A fact's text as its member reads it (``bot.memory.wording.for_member``): "Your name is Noor"."""
    return for_member(fact.text, told=fact.told)


def fact_source(fact: FactRecord, words: Words) -> str:
    if fact.told:
        where = words("memory.source.told")
    elif fact.source_call_id:
        where = words("memory.source.call")
    elif fact.source_chat_id:
        where = words("memory.source.chat")
    else:
        where = words("memory.source.noted")
    said = words("memory.source.said", times=words.count("count.time", fact.mentions)) if fact.mentions > 1 else ""
    return words("memory.source.line", where=where, date=stamp(fact.created_at), said=said)


def fact_line(fact: FactRecord, words: Words) -> str:
    return f"• {_safe(shown(fact), 250)} — *{fact_source(fact, words)}*"


def superseded_line(fact: FactRecord, words: Words) -> str:
    when = fact.invalidated_at or fact.updated_at
    change = words("memory.superseded.replaced" if fact.superseded_by is not None else "memory.superseded.gone")
    return words("memory.superseded.line", fact=_safe(shown(fact), 120), change=change, date=stamp(when))


def gist(conversation: ConversationSummary) -> str:
    return conversation.summary or " / ".join(conversation.first_lines)


def kind_label(kind: str, words: Words) -> str:
    return words("memory.kind.call" if kind == "call" else "memory.kind.chat")


def conversation_line(conversation: ConversationSummary, words: Words) -> str:
    icon = "📞" if conversation.kind == "call" else "💬"
    head = (
        f"{icon} **{kind_label(conversation.kind, words)}** · {stamp(conversation.started_at)} · "
        f"{words.count('count.line', conversation.turn_count)}"
    )
    text = gist(conversation)
    return f"{head}\n> {_safe(text, 200)}" if text.strip() else head


def fit(lines: list[str], words: Words, limit: int = 1024) -> str:
    """Join lines up to an embed field's limit, saying how many did not fit."""
    out: list[str] = []
    used = 0
    for n, line in enumerate(lines):
        rest = len(lines) - n
        more = words("memory.and_more", count=rest) if rest else ""
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


def status_text(page: MemoryPage, words: Words) -> str:
    if remembering(page):
        return words("memory.on")
    return words("memory.paused" if page.chosen else "memory.not_chosen")


def call_language_text(page: MemoryPage, words: Words) -> str:
    """The member's call language setting: their choice, or **Automatic** (their Discord language)."""
    chosen = words("choice.auto") if page.call_language is None else label(page.call_language, words)
    return words("memory.call_language", language=chosen)


def greetings_text(page: MemoryPage, words: Words) -> str:
    """Whether the member's calls open with a greeting of their own, and how to change that."""
    return words("memory.greetings.on" if page.personal_greetings else "memory.greetings.off")


def render_page(page: MemoryPage, index: int, pages: int, words: Words) -> discord.Embed:
    status = f"{status_text(page, words)}\n{call_language_text(page, words)}\n{greetings_text(page, words)}"
    colour = discord.Colour.green() if remembering(page) else discord.Colour.light_grey()
    embed = discord.Embed(title=words("memory.title"), colour=colour)
    footer = words("memory.footer")
    if is_empty(page):
        embed.description = f"{status}\n\n{words('memory.empty')}"
        embed.set_footer(text=words("memory.page", page=1, pages=1, footer=footer))
        return embed
    parts = [status, ""]
    if page.facts:
        parts.append(words("memory.known", count=page.fact_count))
        parts.append(fit([fact_line(f, words) for f in page.facts], words, DESCRIPTION_BUDGET - len(status) - 40))
    elif page.fact_count == 0:
        parts.append(words("memory.known_nothing"))
    embed.description = "\n".join(parts).strip()
    if page.superseded:
        lines = [superseded_line(f, words) for f in page.superseded]
        embed.add_field(name=words("memory.earlier_versions"), value=fit(lines, words), inline=False)
    if page.conversations:
        embed.add_field(
            name=words("memory.conversations", count=page.conversation_count),
            value=fit([conversation_line(c, words) for c in page.conversations], words),
            inline=False,
        )
    embed.set_footer(text=words("memory.page", page=index + 1, pages=pages, footer=footer))
    return embed


def traces_text(traces: FactTraces, words: Words) -> str:
    """What forgetting the fact also removes, e.g. "2 lines of your conversations and 1 summary"."""
    parts = []
    if traces.turn_ids:
        parts.append(words("memory.traces.lines", lines=words.count("count.line", len(traces.turn_ids))))
    if traces.summaries:
        parts.append(words.count("count.conversation_summary", len(traces.summaries)))
    return words("memory.and", first=parts[0], second=parts[1]) if len(parts) == 2 else "".join(parts)


def forgot_fact_text(traces: FactTraces, words: Words) -> str:
    fact = shorten(shown(traces.fact), 1500)
    if traces.removes_more:
        return words("memory.forgot_fact_with", fact=fact, what=traces_text(traces, words))
    return words("memory.forgot_fact", fact=fact)


def confirm_fact_text(traces: FactTraces, words: Words) -> str:
    fact = shorten(shown(traces.fact), 1500)
    if traces.removes_more:
        return words("memory.confirm_fact", fact=fact, what=traces_text(traces, words))
    return words("memory.confirm_fact_alone", fact=fact)


def conversation_what(result: ForgetResult, words: Words) -> str:
    """What forgetting a call or chat removes: "7 lines and 4 facts that came only from it"."""
    lines = words.count("count.line", result.turns)
    if result.facts:
        return words("memory.conversation_with_facts", lines=lines, facts=words.count("count.fact", result.facts))
    return lines


def forgot_conversation_text(kind: str, started_at: float, result: ForgetResult, words: Words) -> str:
    return words(f"memory.forgot.{kind}", date=stamp(started_at), what=conversation_what(result, words))


def confirm_conversation_text(kind: str, started_at: float, preview: ForgetResult, words: Words) -> str:
    return words(f"memory.confirm.{kind}", date=stamp(started_at), what=conversation_what(preview, words))


def forgot_everything_text(result: ForgetResult, words: Words) -> str:
    reset = words("memory.reset_note")
    if not (result.calls or result.chats or result.turns or result.facts):
        return words("memory.nothing_to_forget", reset=reset)
    return words("memory.forgot_everything", counts=forget_counts(result, words), reset=reset)


def forget_counts(result: ForgetResult, words: Words) -> str:
    """ "3 calls, 1 chat, 122 lines, 9 facts": what a forget of everything deleted."""
    return ", ".join(
        [
            words.count("count.call", result.calls),
            words.count("count.chat", result.chats),
            words.count("count.line", result.turns),
            words.count("count.fact", result.facts),
        ]
    )


def fact_choice(fact: FactRecord, words: Words) -> app_commands.Choice[str]:
    name = shorten(shown(fact), 100) or words("memory.fact_fallback", id=fact.fact_id)
    return app_commands.Choice(name=name, value=str(fact.fact_id))


BUSY_VALUE = "busy"
"""What the busy suggestion submits when picked: no fact or conversation, so the member reads "not found"."""


def busy_choice(words: Words) -> app_commands.Choice[str]:
    """The one suggestion when the store could not answer in time (an autocomplete cannot be deferred, and an
    empty list would read as "nothing to forget")."""
    return app_commands.Choice(name=shorten(words("memory.autocomplete_busy"), 100), value=BUSY_VALUE)


def conversation_name(conversation: ConversationSummary, words: Words) -> str:
    head = (
        f"{kind_label(conversation.kind, words)} {words.date(conversation.started_at)} · "
        f"{words.count('count.line', conversation.turn_count)}"
    )
    text = gist(conversation)
    return shorten(f"{head} · {text}" if text.strip() else head, 100)


def picker_options(page: MemoryPage, words: Words) -> list[discord.SelectOption]:
    def fact_label(fact: FactRecord) -> str:
        return shorten(shown(fact), 100) or words("memory.fact_fallback", id=fact.fact_id)

    options = [
        discord.SelectOption(
            label=fact_label(f),
            value=f"fact:{f.fact_id}",
            description=words(
                "memory.option.fact",
                source=words("memory.option.told" if f.told else "memory.option.learned"),
                date=words.date(f.created_at),
            ),
            emoji="🧠",
        )
        for f in page.facts
    ]
    options += [
        discord.SelectOption(
            label=fact_label(f),
            value=f"fact:{f.fact_id}",
            description=words("memory.option.earlier"),
            emoji="🕘",
        )
        for f in page.superseded
    ]
    options += [
        discord.SelectOption(
            label=shorten(
                words(
                    f"memory.option.{c.kind}",
                    date=words.date(c.started_at),
                    lines=words.count("count.line", c.turn_count),
                ),
                100,
            ),
            value=f"{c.kind}:{c.ref_id}",
            description=shorten(gist(c), 100) or None,
            emoji="📞" if c.kind == "call" else "💬",
        )
        for c in page.conversations
    ]
    return options[:25]
