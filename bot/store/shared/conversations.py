"""The calls', chats' and lines' reads and writes that are the same query on both backends."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bot.store.columns import CHAT_COLUMNS, TURN_COLUMNS, check_call_fields
from bot.store.columns import turn_record as _turn
from bot.store.models import (
    CallRecord,
    ChatRecord,
    Conversation,
    ConversationSummary,
    TurnRecord,
)
from bot.store.shared.base import (
    OPEN_STATES,
    SqlBase,
    call_record,
    chat_record,
    db_value,
)
from bot.store.specifics import stored_specifics


class SharedConversations(SqlBase):
    """The calls', chats' and lines' reads and writes that are the same query on both backends."""

    if TYPE_CHECKING:  # each backend ranks with its own full-text index

        async def rank_turns(
            self, user_id: int, query: str, limit: int, *, exclude_call_id: str | None = None
        ) -> list[tuple[TurnRecord, float]]: ...

    async def get_call(self, call_id: str) -> CallRecord | None:
        row = await self._row("SELECT * FROM calls WHERE call_id = $1", call_id)
        return None if row is None else call_record(row)

    async def get_call_by_link_hash(self, link_hash: str) -> CallRecord | None:
        row = await self._row("SELECT * FROM calls WHERE link_hash = $1", link_hash)
        return None if row is None else call_record(row)

    async def get_call_by_agent_id(self, agent_id: str) -> CallRecord | None:
        row = await self._row("SELECT * FROM calls WHERE agent_id = $1", agent_id)
        return None if row is None else call_record(row)

    async def open_call_for_user(self, user_id: int) -> CallRecord | None:
        row = await self._row(
            f"SELECT * FROM calls WHERE user_id = $1 AND state IN {OPEN_STATES} ORDER BY started_at DESC LIMIT 1",
            user_id,
        )
        return None if row is None else call_record(row)

    async def open_calls(self) -> list[CallRecord]:
        rows = await self._rows(f"SELECT * FROM calls WHERE state IN {OPEN_STATES} ORDER BY started_at")
        return [call_record(r) for r in rows]

    async def count_open_calls(self) -> int:
        return int(await self._value(f"SELECT COUNT(*) FROM calls WHERE state IN {OPEN_STATES}"))

    async def count_guild_calls_since(self, guild_id: int, since: float) -> int:
        return int(
            await self._value(
                "SELECT COUNT(*) FROM calls WHERE guild_id = $1 AND started_at >= $2 AND state != 'failed'",
                guild_id,
                since,
            )
        )

    async def call_and_generation(self, call_id: str) -> tuple[CallRecord, int] | None:
        row = await self._row(
            "SELECT calls.*, (SELECT generation FROM memory_fences f WHERE f.user_id = calls.user_id) AS "
            "fence_generation FROM calls WHERE call_id = $1",
            call_id,
        )
        return None if row is None else (call_record(row), int(row["fence_generation"] or 0))

    async def bind_call_browser(self, call_id: str, browser_hash: str) -> bool:
        await self._changed(
            "UPDATE calls SET browser_hash = $2 WHERE call_id = $1 AND browser_hash IS NULL", call_id, browser_hash
        )
        bound = await self._value("SELECT browser_hash FROM calls WHERE call_id = $1", call_id)
        return bool(bound == browser_hash)

    async def update_call(self, call_id: str, **fields: Any) -> None:
        check_call_fields(fields)
        if not fields:
            return
        assignments = ", ".join(f"{name} = ${i}" for i, name in enumerate(fields, start=2))
        await self._changed(
            f"UPDATE calls SET {assignments} WHERE call_id = $1", call_id, *(db_value(v) for v in fields.values())
        )

    async def release_call_leases(self, owner: str) -> None:
        await self._changed(f"UPDATE calls SET lease_until = NULL WHERE owner = $1 AND state IN {OPEN_STATES}", owner)

    async def create_chat(self, chat: ChatRecord) -> None:
        placeholders = ", ".join(f"${i}" for i in range(1, len(CHAT_COLUMNS) + 1))
        await self._changed(
            f"INSERT INTO chats ({', '.join(CHAT_COLUMNS)}) VALUES ({placeholders})",
            *(db_value(getattr(chat, name)) for name in CHAT_COLUMNS),
        )

    async def end_chat(self, chat_id: str, at: float) -> bool:
        ended = await self._changed(
            "UPDATE chats SET ended_at = $2 WHERE chat_id = $1 AND ended_at IS NULL", chat_id, at
        )
        return ended == 1

    async def get_chat(self, chat_id: str) -> ChatRecord | None:
        row = await self._row("SELECT * FROM chats WHERE chat_id = $1", chat_id)
        return None if row is None else chat_record(row)

    async def open_chat_for_user(self, user_id: int) -> ChatRecord | None:
        row = await self._row(
            "SELECT * FROM chats WHERE user_id = $1 AND ended_at IS NULL ORDER BY started_at DESC LIMIT 1", user_id
        )
        return None if row is None else chat_record(row)

    async def idle_chats(self, last_message_before: float) -> list[ChatRecord]:
        rows = await self._rows(
            "SELECT * FROM chats WHERE ended_at IS NULL AND last_message_at < $1 ORDER BY last_message_at",
            last_message_before,
        )
        return [chat_record(r) for r in rows]

    async def append_chat_turn(
        self,
        chat_id: str,
        user_id: int,
        role: str,
        content: str,
        at: float,
        *,
        generation: int | None = None,
        specifics: int | None = None,
    ) -> int | None:
        async with self._shared_transaction() as tx:
            if not await tx.write_allowed(user_id, generation, Conversation("chat", chat_id)):
                return None
            # Locking the chat row (PostgreSQL) serialises appends to one chat, so two never take the same seq.
            await tx.changed("UPDATE chats SET last_message_at = $2 WHERE chat_id = $1", chat_id, at)
            turn_id = await tx.value(
                "INSERT INTO turns (user_id, chat_id, seq, role, content, spoken_at, source, specifics) "
                "VALUES ($1, $2, (SELECT COALESCE(MAX(seq), -1) + 1 FROM turns WHERE chat_id = $2), $3, $4, $5, "
                "'text', $6) RETURNING turn_id",
                user_id,
                chat_id,
                role,
                content,
                at,
                stored_specifics(specifics, content),
            )
            return int(turn_id)

    async def search_turns(
        self, user_id: int, query: str, limit: int, *, exclude_call_id: str | None = None
    ) -> list[TurnRecord]:
        return [turn for turn, _ in await self.rank_turns(user_id, query, limit, exclude_call_id=exclude_call_id)]

    async def chat_turns(self, chat_id: str) -> list[TurnRecord]:
        rows = await self._rows(f"SELECT {TURN_COLUMNS} FROM turns WHERE chat_id = $1 ORDER BY seq", chat_id)
        return [_turn(r) for r in rows]

    async def count_turns(self, user_id: int, *, outside_call_id: str | None = None) -> int:
        """The member's lines, not counting those of ``outside_call_id``."""
        return int(
            await self._value(
                "SELECT (SELECT COUNT(*) FROM turns WHERE user_id = $1) "
                "- (SELECT COUNT(*) FROM turns WHERE call_id = $2)",
                user_id,
                outside_call_id,
            )
        )

    async def count_call_turns(self, call_id: str) -> int:
        return int(await self._value("SELECT COUNT(*) FROM turns WHERE call_id = $1", call_id))

    async def memory_generation(self, user_id: int) -> int:
        value = await self._value("SELECT generation FROM memory_fences WHERE user_id = $1", user_id)
        return int(value or 0)

    async def memory_stamp(self, user_id: int) -> tuple[int, int]:
        row = await self._row(
            "SELECT (SELECT version FROM memory_versions WHERE user_id = $1), "
            "(SELECT generation FROM memory_fences WHERE user_id = $1)",
            user_id,
        )
        return (int(row[0] or 0), int(row[1] or 0)) if row is not None else (0, 0)

    async def latest_summaries(self, user_id: int, limit: int) -> list[ConversationSummary]:
        rows = await self._rows(
            "SELECT * FROM (SELECT * FROM (SELECT 'call' AS kind, call_id AS ref_id, started_at, ended_at, summary, "
            "private FROM calls WHERE user_id = $1 AND summary IS NOT NULL ORDER BY started_at DESC LIMIT $2) a "
            "UNION ALL SELECT * FROM (SELECT 'chat', chat_id, started_at, ended_at, summary, private FROM chats "
            "WHERE user_id = $1 AND summary IS NOT NULL ORDER BY started_at DESC LIMIT $2) b) u "
            "ORDER BY started_at DESC LIMIT $2",
            user_id,
            limit,
        )
        return [summary_of(r, turn_count=0, first_lines=[]) for r in rows]

    async def count_conversations(self, user_id: int) -> int:
        return int(
            await self._value(
                "SELECT (SELECT COUNT(*) FROM calls c WHERE c.user_id = $1 AND c.state IN ('ended', 'failed') AND "
                "  (c.summary IS NOT NULL OR EXISTS (SELECT 1 FROM turns t WHERE t.call_id = c.call_id))) + "
                "(SELECT COUNT(*) FROM chats h WHERE h.user_id = $1 AND "
                "  (h.summary IS NOT NULL OR EXISTS (SELECT 1 FROM turns t WHERE t.chat_id = h.chat_id)))",
                user_id,
            )
        )


CALL_MEMORY_STATE = (
    "SELECT *, (SELECT generation FROM memory_fences f WHERE f.user_id = calls.user_id) AS memory_generation, "
    "(SELECT memory_enabled FROM users u WHERE u.user_id = calls.user_id) AS memory_enabled, "
    "(SELECT version FROM memory_versions v WHERE v.user_id = calls.user_id) AS memory_version "
    "FROM calls WHERE call_id = $1"
)
"""``call_memory_state``'s read (``bot.store.columns.call_memory_state`` makes the record); SQLite runs it on its
reader connection."""

LISTED_CONVERSATIONS = (
    "("
    "  SELECT 'call' AS kind, c.call_id AS ref_id, c.started_at, c.ended_at, c.summary, c.private FROM calls c "
    "  WHERE c.user_id = $1 AND c.state IN ('ended', 'failed') AND (c.summary IS NOT NULL OR "
    "    EXISTS (SELECT 1 FROM turns t WHERE t.call_id = c.call_id)) "
    "  UNION ALL "
    "  SELECT 'chat', h.chat_id, h.started_at, h.ended_at, h.summary, h.private FROM chats h "
    "  WHERE h.user_id = $1 AND (h.summary IS NOT NULL OR "
    "    EXISTS (SELECT 1 FROM turns t WHERE t.chat_id = h.chat_id))"
    ") u"
)
"""A member's finished calls and their chats that hold anything (``list_conversations``, ``count_conversations``)."""


def summary_of(row: Any, *, turn_count: int, first_lines: Sequence[str]) -> ConversationSummary:
    return ConversationSummary(
        kind=row["kind"],
        ref_id=row["ref_id"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        turn_count=turn_count,
        summary=row["summary"],
        first_lines=list(first_lines),
        private=bool(row["private"]),
    )
