"""The column lists both backends read and write, derived from the records where they can be."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from bot.store.models import CallRecord, ChatRecord, GuildSettings

CALL_COLUMNS = [f.name for f in fields(CallRecord)]
CHAT_COLUMNS = [f.name for f in fields(ChatRecord)]
TURN_COLUMNS = "turn_id, user_id, call_id, chat_id, seq, role, content, spoken_at, source, segment, partial, captured"
FACT_COLUMNS = (
    "fact_id, user_id, text, source_call_id, source_chat_id, created_at, updated_at, confirmed_at, mentions, "
    "superseded_by, invalidated_at"
)
GUILD_SETTING_NAMES = {f.name for f in fields(GuildSettings)} - {"guild_id"}
UPDATABLE_CALL_FIELDS = set(CALL_COLUMNS) - {"call_id", "user_id"}


def check_call_fields(values: dict[str, Any]) -> None:
    unknown = set(values) - UPDATABLE_CALL_FIELDS
    if unknown:
        raise ValueError(f"unknown call fields: {sorted(unknown)}")
