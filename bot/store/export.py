"""The member's export document, built the same way from either backend's rows (so a copy can be proven equal)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from bot.store.models import PreparedGreeting, UserRecord


class Row(Protocol):
    """A result row of either driver (sqlite3.Row, asyncpg.Record), read by column name."""

    def __getitem__(self, key: str, /) -> Any: ...


def iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()


def build_export(
    user_id: int,
    user: UserRecord | None,
    *,
    facts: Sequence[Row],
    calls: Sequence[Row],
    chats: Sequence[Row],
    turns: Sequence[Row],
    greeting: PreparedGreeting | None = None,
) -> dict[str, Any]:
    """`turns` in export order (spoken_at, seq); rows are mappings with the tables' column names. ``greeting``: the
    one prepared for the member's next call (``bot.memory.greeting``)."""
    by_conversation: dict[str, list[dict[str, Any]]] = {}
    for t in turns:
        if not t["content"]:
            continue  # a line forgotten while its call was open: no text, only its place was kept
        key = t["call_id"] or t["chat_id"]
        line = {"role": t["role"], "content": t["content"], "at": iso(t["spoken_at"]), "source": t["source"]}
        if t["interrupted"]:
            line["interrupted"] = True  # the member spoke over this reply: the text is what they heard
        by_conversation.setdefault(key, []).append(line)
    return {
        "user_id": str(user_id),
        "exported_at": iso(time.time()),
        "settings": None
        if user is None
        else {
            "memory_enabled": user.memory_enabled,
            "consent": user.consent,
            "consent_at": iso(user.consent_at),
            "language": user.language,
            "discord_locale": user.locale,
            "personal_greetings": user.personal_greetings,
        },
        "next_greeting": None
        if greeting is None
        else {
            "name": greeting.name,
            "follow_up": greeting.follow_up,
            "language": greeting.language,
            "prepared_at": iso(greeting.prepared_at),
        },
        "facts": [
            {
                "id": f["fact_id"],
                "text": f["text"],
                "source": {"call_id": f["source_call_id"], "chat_id": f["source_chat_id"]},
                "created_at": iso(f["created_at"]),
                "confirmed_at": iso(f["confirmed_at"]),
                "mentions": f["mentions"],
                "superseded_by": f["superseded_by"],
                "invalidated_at": iso(f["invalidated_at"]),
            }
            for f in facts
        ],
        "calls": [
            {
                "id": c["call_id"],
                "guild_id": None if c["guild_id"] is None else str(c["guild_id"]),
                "started_at": iso(c["started_at"]),
                "ended_at": iso(c["ended_at"]),
                "end_reason": c["end_reason"],
                "language": c["language"],
                "private": bool(c["private"]),
                "summary": c["summary"],
                "turns": by_conversation.get(c["call_id"], []),
            }
            for c in calls
        ],
        "chats": [
            {
                "id": h["chat_id"],
                "guild_id": None if h["guild_id"] is None else str(h["guild_id"]),
                "started_at": iso(h["started_at"]),
                "ended_at": iso(h["ended_at"]),
                "summary": h["summary"],
                "turns": by_conversation.get(h["chat_id"], []),
            }
            for h in chats
        ],
    }
