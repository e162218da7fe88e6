"""The column lists both backends read and write, derived from the records where they can be."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields
from itertools import islice
from typing import Any

from bot.store.models import CallMemoryState, CallRecord, ChatRecord, FactRecord, GuildSettings, TurnRecord

CALL_COLUMNS = [f.name for f in fields(CallRecord)]
CHAT_COLUMNS = [f.name for f in fields(ChatRecord)]
TURN_COLUMNS = (
    "turn_id, user_id, call_id, chat_id, seq, role, content, spoken_at, source, segment, partial, captured, specifics, "
    "interrupted, language"
)
FACT_COLUMNS = (
    "fact_id, user_id, text, source_call_id, source_chat_id, created_at, updated_at, confirmed_at, mentions, "
    "superseded_by, invalidated_at, told"
)
RESEALED_TERMS = ", language_terms = NULL"
"""What resealing a line also sets: its language terms (plain stems) go with its plain text; its sealed text holds
its keyed English term hashes only (the hashes of its language terms are written by the encrypting layer for new
lines alone)."""

TURN_NAMES = tuple(name.strip() for name in TURN_COLUMNS.split(","))
FACT_NAMES = tuple(name.strip() for name in FACT_COLUMNS.split(","))
assert tuple(f.name for f in fields(TurnRecord)) == TURN_NAMES
assert tuple(f.name for f in fields(FactRecord)) == FACT_NAMES


_PARTIAL, _INTERRUPTED = TURN_NAMES.index("partial"), TURN_NAMES.index("interrupted")
_TOLD = FACT_NAMES.index("told")


def turn_record(row: Iterable[Any]) -> TurnRecord:
    """The record of a row whose first columns are ``TURN_COLUMNS`` (either backend's row type)."""
    values = list(islice(row, len(TURN_NAMES)))
    values[_PARTIAL] = bool(values[_PARTIAL])
    values[_INTERRUPTED] = bool(values[_INTERRUPTED])
    return TurnRecord(*values)


def fact_record(row: Iterable[Any]) -> FactRecord:
    """The record of a row whose first columns are ``FACT_COLUMNS`` (a row without ``told``, a call start's, is of a
    fact learned from conversation)."""
    values = list(islice(row, len(FACT_NAMES)))
    if len(values) > _TOLD:
        values[_TOLD] = bool(values[_TOLD])
    return FactRecord(*values)


GUILD_SETTING_NAMES = {f.name for f in fields(GuildSettings)} - {"guild_id"}
UPDATABLE_CALL_FIELDS = set(CALL_COLUMNS) - {"call_id", "user_id"}


def check_call_fields(values: dict[str, Any]) -> None:
    unknown = set(values) - UPDATABLE_CALL_FIELDS
    if unknown:
        raise ValueError(f"unknown call fields: {sorted(unknown)}")


def call_memory_state(call: CallRecord, row: Any) -> CallMemoryState:
    """The call with its member's memory state, from the columns both backends' ``call_memory_state`` read
    beside the call's own (``memory_generation``, ``memory_enabled``, ``memory_version``; NULL when the member
    has none yet) and the call's ``forgotten``."""
    enabled = row["memory_enabled"]
    return CallMemoryState(
        call,
        int(row["memory_generation"] or 0),
        enabled is None or bool(enabled),
        int(row["memory_version"] or 0),
        bool(row["forgotten"]),
    )
