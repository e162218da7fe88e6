"""The queries SQLite and PostgreSQL run alike, written once.

Each is written in PostgreSQL's placeholders (``$1``, ``$2``, ...; a number may stand more than once), which is the
one difference between the two dialects in these queries: SQLite reads them as ``?1``, ``?2``, ... (``sqlite_sql``).
A backend's foundation (``bot.store.sqlite.base.SqliteBase``, ``bot.store.postgres.base.PostgresBase``) runs them
through the four primitives of ``SqlBase``; each aggregate's mixin of a backend builds on the mixin here of the
same aggregate and writes only what differs (a statement of its own dialect, or a round trip it saves there).
Rows are read by column name, which both drivers' rows allow, and booleans as ``bool`` (SQLite stores 0 and 1).
"""

from __future__ import annotations

import functools
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bot.store.columns import CALL_COLUMNS, CHAT_COLUMNS, FACT_COLUMNS, TURN_COLUMNS, check_call_fields, fact_record
from bot.store.columns import turn_record as _turn
from bot.store.models import CallRecord, ChatRecord, ConversationSummary, FactRecord, TurnRecord, UserRecord
from bot.store.vectors import StoredVector, stored_vector

OPEN_STATES = "('starting', 'active', 'ending')"
"""The states of a call that is not over, as SQL."""
_PLACEHOLDER = re.compile(r"\$(\d+)")


@functools.cache
def sqlite_sql(sql: str) -> str:
    """``sql`` with PostgreSQL's placeholders as SQLite's numbered ones (``$2`` -> ``?2``: the same parameter)."""
    return _PLACEHOLDER.sub(r"?\1", sql)


def user_record(row: Any) -> UserRecord:
    return UserRecord(
        user_id=row["user_id"],
        memory_enabled=bool(row["memory_enabled"]),
        consent=row["consent"],
        consent_at=row["consent_at"],
        created_at=row["created_at"],
        language=row["language"],
    )


def call_record(row: Any) -> CallRecord:
    data = {name: row[name] for name in CALL_COLUMNS}
    data["private"] = bool(data["private"])
    data["history_anchored"] = bool(data["history_anchored"])
    data["agent_stop_pending"] = bool(data["agent_stop_pending"])
    return CallRecord(**data)


def chat_record(row: Any) -> ChatRecord:
    data = {name: row[name] for name in CHAT_COLUMNS}
    data["private"] = bool(data["private"])
    return ChatRecord(**data)


def db_value(value: Any) -> Any:
    """A call field as both databases take it (booleans as themselves: SQLite binds them as 0 and 1)."""
    if isinstance(value, dict | list):
        return json.dumps(value)
    return value


class SqlBase(ABC):
    """What the queries written once need of a backend: four primitives, each one round trip. ``sql`` is in
    PostgreSQL's placeholders."""

    @abstractmethod
    async def _rows(self, sql: str, *params: Any) -> list[Any]:
        """Every row ``sql`` returns."""

    @abstractmethod
    async def _row(self, sql: str, *params: Any) -> Any | None:
        """The first row ``sql`` returns, or None."""

    @abstractmethod
    async def _changed(self, sql: str, *params: Any) -> int:
        """A write of one statement (atomic on its own): the rows it changed."""

    async def _value(self, sql: str, *params: Any) -> Any:
        row = await self._row(sql, *params)
        return None if row is None else row[0]


class SharedConversations(SqlBase):
    """The calls', chats' and lines' reads and writes that are the same query on both backends."""

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


class SharedFacts(SqlBase):
    """The facts' reads that are the same query on both backends (the ranking is each backend's own)."""

    if TYPE_CHECKING:  # each backend ranks with its own full-text index

        async def rank_facts(self, user_id: int, query: str, limit: int) -> list[tuple[FactRecord, float]]: ...

    async def get_fact(self, fact_id: int) -> FactRecord | None:
        row = await self._row(f"SELECT {FACT_COLUMNS} FROM facts WHERE fact_id = $1", fact_id)
        return None if row is None else fact_record(row)

    async def list_facts(
        self,
        user_id: int,
        *,
        include_superseded: bool = False,
        superseded_only: bool = False,
        offset: int = 0,
        limit: int = 100,
    ) -> list[FactRecord]:
        order = "confirmed_at DESC, mentions DESC, fact_id DESC"
        if superseded_only:
            where = "AND (superseded_by IS NOT NULL OR invalidated_at IS NOT NULL)"
        elif include_superseded:
            where = ""
            order = "(superseded_by IS NOT NULL OR invalidated_at IS NOT NULL), " + order  # current ones first
        else:  # a walk of the `facts_current` index, in its order
            where = "AND superseded_by IS NULL AND invalidated_at IS NULL"
        rows = await self._rows(
            f"SELECT {FACT_COLUMNS} FROM facts WHERE user_id = $1 {where} ORDER BY {order} LIMIT $2 OFFSET $3",
            user_id,
            limit,
            offset,
        )
        return [fact_record(r) for r in rows]

    async def count_facts(self, user_id: int, *, include_superseded: bool = False) -> int:
        where = "" if include_superseded else "AND superseded_by IS NULL AND invalidated_at IS NULL"
        return int(await self._value(f"SELECT COUNT(*) FROM facts WHERE user_id = $1 {where}", user_id))

    async def search_facts(self, user_id: int, query: str, limit: int) -> list[FactRecord]:
        return [fact for fact, _ in await self.rank_facts(user_id, query, limit)]


class SharedJobs(SqlBase):
    """The job queue, webhook notices and meta where both backends ask the same: each one statement, atomic on
    its own (a claim, and remembering a notice, are each backend's own)."""

    async def enqueue_job(self, kind: str, ref_id: str, at: float, *, not_before: float = 0.0) -> bool:
        added = await self._changed(
            "INSERT INTO jobs (kind, ref_id, created_at, updated_at, not_before) VALUES ($1, $2, $3, $3, $4) "
            "ON CONFLICT (kind, ref_id) DO NOTHING",
            kind,
            ref_id,
            at,
            not_before,
        )
        return added == 1

    async def expedite_job(self, kind: str, ref_id: str, at: float) -> bool:
        changed = await self._changed(
            "UPDATE jobs SET not_before = $3, updated_at = $3 WHERE kind = $1 AND ref_id = $2 AND state = 'pending' "
            "AND not_before > $3",
            kind,
            ref_id,
            at,
        )
        return changed == 1

    async def finish_job(self, job_id: int, at: float) -> None:
        await self._changed("UPDATE jobs SET state = 'done', updated_at = $2 WHERE job_id = $1", job_id, at)

    async def fail_job(self, job_id: int, at: float, error: str, *, retry_at: float | None) -> None:
        if retry_at is None:
            await self._changed(
                "UPDATE jobs SET state = 'failed', last_error = $2, updated_at = $3 WHERE job_id = $1",
                job_id,
                error[:500],
                at,
            )
        else:
            await self._changed(
                "UPDATE jobs SET state = 'pending', last_error = $2, not_before = $4, updated_at = $3 "
                "WHERE job_id = $1",
                job_id,
                error[:500],
                at,
                retry_at,
            )

    async def notice_seen(self, notice_id: str) -> bool:
        return await self._row("SELECT 1 FROM notices WHERE notice_id = $1", notice_id) is not None

    async def get_meta(self, key: str) -> str | None:
        value = await self._value("SELECT value FROM meta WHERE key = $1", key)
        return None if value is None else str(value)

    async def set_meta(self, key: str, value: str) -> None:
        await self._changed(
            "INSERT INTO meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            key,
            value,
        )

    async def job_queue(self) -> tuple[int, float | None]:
        """Jobs waiting or running, and the creation time of the oldest of them (None when there are none)."""
        row = await self._row("SELECT COUNT(*), MIN(created_at) FROM jobs WHERE state IN ('pending', 'running')")
        if row is None:
            return 0, None
        return int(row[0]), None if row[1] is None else float(row[1])

    async def job_state(self, kind: str, ref_id: str) -> str | None:
        state = await self._value("SELECT state FROM jobs WHERE kind = $1 AND ref_id = $2", kind, ref_id)
        return None if state is None else str(state)


class SharedGuildSettings(SqlBase):
    """The servers' retention read, the same query on both backends."""

    async def retention_policies(self) -> list[tuple[int, int]]:
        rows = await self._rows(
            "SELECT guild_id, retention_days FROM guild_settings WHERE retention_days IS NOT NULL "
            "AND retention_days > 0"
        )
        return [(r[0], r[1]) for r in rows]


class SharedVectors(SqlBase):
    """Dense retrieval's reads of a member's vectors, the same query on both backends."""

    async def member_vectors(self, user_id: int, model: str, *, after_id: int = 0) -> list[StoredVector]:
        rows = await self._rows(
            "SELECT vector_id, turn_id, fact_id, vector FROM memory_vectors WHERE user_id = $1 AND model = $2 "
            "AND vector_id > $3 ORDER BY vector_id",
            user_id,
            model,
            after_id,
        )
        return [stored_vector(user_id, *row) for row in rows]

    async def vectors_stamp(self, user_id: int, model: str) -> tuple[int, int]:
        row = await self._row(
            "SELECT COUNT(*), COALESCE(SUM(vector_id), 0) FROM memory_vectors WHERE user_id = $1 AND model = $2",
            user_id,
            model,
        )
        assert row is not None  # an aggregate always yields a row
        return int(row[0]), int(row[1])
