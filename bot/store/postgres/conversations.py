"""Calls, chats, their turns and summaries (`ConversationStore`) on PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from bot.store.columns import CALL_COLUMNS as _CALL_COLUMNS
from bot.store.columns import CHAT_COLUMNS as _CHAT_COLUMNS
from bot.store.columns import TURN_COLUMNS as _TURN_COLUMNS
from bot.store.columns import check_call_fields as _check_call_fields
from bot.store.models import (
    CallRecord,
    CallState,
    ChatRecord,
    Conversation,
    ConversationSummary,
    NewTurn,
    TurnRecord,
    TurnUpdate,
)
from bot.store.postgres.base import _OPEN, _call, _chat, _count, _prefixed, _to_db, _turn
from bot.store.postgres.fences import memory_write_allowed
from bot.store.postgres.fulltext import PostgresFullText
from bot.store.ranking import WORD, rerank
from bot.store.repository import OpenCallExists, TurnsChanged


class PostgresConversations(PostgresFullText):
    """Implements `bot.store.repository.ConversationStore`: calls (with their leases), chats, turns (with the
    ranking reads), the memory generation writers read, live-turn keys and conversation summaries."""

    # ---- calls -----------------------------------------------------------------------------------------

    async def create_call(self, call: CallRecord) -> None:
        values = [_to_db(getattr(call, name)) for name in _CALL_COLUMNS]
        placeholders = ", ".join(f"${i}" for i in range(1, len(values) + 1))
        try:
            await self._write(f"INSERT INTO calls ({', '.join(_CALL_COLUMNS)}) VALUES ({placeholders})", *values)
        except asyncpg.UniqueViolationError as exc:
            if exc.constraint_name == "calls_one_open_per_user":
                raise OpenCallExists(call.user_id) from exc
            raise

    async def get_call(self, call_id: str) -> CallRecord | None:
        row = await self._one("SELECT * FROM calls WHERE call_id = $1", call_id)
        return None if row is None else _call(row)

    async def get_call_by_link_hash(self, link_hash: str) -> CallRecord | None:
        row = await self._one("SELECT * FROM calls WHERE link_hash = $1", link_hash)
        return None if row is None else _call(row)

    async def get_call_by_agent_id(self, agent_id: str) -> CallRecord | None:
        row = await self._one("SELECT * FROM calls WHERE agent_id = $1", agent_id)
        return None if row is None else _call(row)

    async def open_call_for_user(self, user_id: int) -> CallRecord | None:
        row = await self._one(
            f"SELECT * FROM calls WHERE user_id = $1 AND state IN {_OPEN} ORDER BY started_at DESC LIMIT 1", user_id
        )
        return None if row is None else _call(row)

    async def open_calls(self) -> list[CallRecord]:
        return [_call(r) for r in await self._all(f"SELECT * FROM calls WHERE state IN {_OPEN} ORDER BY started_at")]

    async def count_open_calls(self) -> int:
        return int(await self.pool.fetchval(f"SELECT COUNT(*) FROM calls WHERE state IN {_OPEN}"))

    async def calls_with_agent_to_stop(self) -> list[CallRecord]:
        rows = await self._all("SELECT * FROM calls WHERE agent_stop_pending ORDER BY started_at")
        return [_call(r) for r in rows]

    async def bind_call_browser(self, call_id: str, browser_hash: str) -> bool:
        await self._write(
            "UPDATE calls SET browser_hash = $2 WHERE call_id = $1 AND browser_hash IS NULL", call_id, browser_hash
        )
        bound = await self.pool.fetchval("SELECT browser_hash FROM calls WHERE call_id = $1", call_id)
        return bool(bound == browser_hash)

    async def count_calls_since(self, user_id: int, guild_id: int | None, since: float) -> int:
        return int(
            await self.pool.fetchval(
                "SELECT COUNT(*) FROM calls WHERE user_id = $1 AND guild_id IS NOT DISTINCT FROM $2 "
                "AND started_at >= $3 AND state != 'failed'",
                user_id,
                guild_id,
                since,
            )
        )

    async def count_guild_calls_since(self, guild_id: int, since: float) -> int:
        return int(
            await self.pool.fetchval(
                "SELECT COUNT(*) FROM calls WHERE guild_id = $1 AND started_at >= $2 AND state != 'failed'",
                guild_id,
                since,
            )
        )

    async def transition_call(
        self, call_id: str, from_states: Sequence[CallState], to_state: CallState, **fields: Any
    ) -> bool:
        _check_call_fields(fields)
        assignments = ", ".join(["state = $3", *(f"{k} = ${i}" for i, k in enumerate(fields, start=4))])
        changed = await self._write(
            f"UPDATE calls SET {assignments} WHERE call_id = $1 AND state = ANY($2::text[])",
            call_id,
            list(from_states),
            to_state,
            *(_to_db(v) for v in fields.values()),
        )
        return changed == 1

    async def update_call(self, call_id: str, **fields: Any) -> None:
        _check_call_fields(fields)
        if not fields:
            return
        assignments = ", ".join(f"{k} = ${i}" for i, k in enumerate(fields, start=2))
        await self._write(
            f"UPDATE calls SET {assignments} WHERE call_id = $1", call_id, *(_to_db(v) for v in fields.values())
        )

    async def take_call_lease(self, call_id: str, owner: str, now: float, until: float) -> bool:
        changed = await self._write(
            f"UPDATE calls SET owner = $2, lease_until = $3 WHERE call_id = $1 AND state IN {_OPEN} "
            "AND (owner IS NOT DISTINCT FROM $2 OR lease_until IS NULL OR lease_until < $4)",
            call_id,
            owner,
            until,
            now,
        )
        return changed == 1

    async def release_call_leases(self, owner: str) -> None:
        await self._write(f"UPDATE calls SET lease_until = NULL WHERE owner = $1 AND state IN {_OPEN}", owner)

    # ---- chats -----------------------------------------------------------------------------------------

    async def create_chat(self, chat: ChatRecord) -> None:
        placeholders = ", ".join(f"${i}" for i in range(1, len(_CHAT_COLUMNS) + 1))
        await self._write(
            f"INSERT INTO chats ({', '.join(_CHAT_COLUMNS)}) VALUES ({placeholders})",
            *(getattr(chat, c) for c in _CHAT_COLUMNS),
        )

    async def get_chat(self, chat_id: str) -> ChatRecord | None:
        row = await self._one("SELECT * FROM chats WHERE chat_id = $1", chat_id)
        return None if row is None else _chat(row)

    async def open_chat_for_user(self, user_id: int) -> ChatRecord | None:
        row = await self._one(
            "SELECT * FROM chats WHERE user_id = $1 AND ended_at IS NULL ORDER BY started_at DESC LIMIT 1", user_id
        )
        return None if row is None else _chat(row)

    async def idle_chats(self, last_message_before: float) -> list[ChatRecord]:
        rows = await self._all(
            "SELECT * FROM chats WHERE ended_at IS NULL AND last_message_at < $1 ORDER BY last_message_at",
            last_message_before,
        )
        return [_chat(r) for r in rows]

    async def end_chat(self, chat_id: str, at: float) -> bool:
        return (
            await self._write("UPDATE chats SET ended_at = $2 WHERE chat_id = $1 AND ended_at IS NULL", chat_id, at)
            == 1
        )

    # ---- turns -----------------------------------------------------------------------------------------

    async def call_turns(self, call_id: str) -> list[TurnRecord]:
        rows = await self._all(f"SELECT {_TURN_COLUMNS} FROM turns WHERE call_id = $1 ORDER BY seq", call_id)
        return [_turn(r) for r in rows]

    async def chat_turns(self, chat_id: str) -> list[TurnRecord]:
        rows = await self._all(f"SELECT {_TURN_COLUMNS} FROM turns WHERE chat_id = $1 ORDER BY seq", chat_id)
        return [_turn(r) for r in rows]

    async def apply_call_turns(
        self,
        call_id: str,
        user_id: int,
        inserts: Sequence[NewTurn],
        updates: Sequence[TurnUpdate],
        *,
        anchored: bool,
        checkpoint_at: float,
        generation: int | None = None,
        expected_version: int | None = None,
        live_key: str | None = None,
    ) -> bool:
        async with self._tx() as db:
            if not await memory_write_allowed(db, user_id, generation, Conversation("call", call_id)):
                return False
            # The call row is locked until commit, so concurrent merges of one call apply one after the other.
            status = await db.execute(
                "UPDATE calls SET history_anchored = history_anchored OR $2, last_checkpoint_at = $3, "
                "turns_version = turns_version + 1 WHERE call_id = $1 AND ($4::integer IS NULL OR turns_version = $4)",
                call_id,
                anchored,
                checkpoint_at,
                expected_version,
            )
            if _count(status) != 1 and expected_version is not None:
                raise TurnsChanged(call_id)
            if updates:
                await db.executemany(
                    "UPDATE turns SET seq = $1, content = $2, segment = $3, partial = $4, captured = $5 "
                    "WHERE turn_id = $6 AND call_id = $7",
                    [(u.seq, u.content, u.segment, u.partial, u.captured, u.turn_id, call_id) for u in updates],
                )
            if inserts:
                await db.executemany(
                    "INSERT INTO turns (user_id, call_id, seq, segment, partial, captured, role, content, spoken_at, "
                    "source) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'voice')",
                    [
                        (user_id, call_id, t.seq, t.segment, t.partial, t.captured, t.role, t.content, t.spoken_at)
                        for t in inserts
                    ],
                )
            if live_key is not None:
                await db.execute(
                    "INSERT INTO live_turns (call_id, turn_key) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                    call_id,
                    live_key,
                )
            return True

    async def append_chat_turn(
        self, chat_id: str, user_id: int, role: str, content: str, at: float, *, generation: int | None = None
    ) -> int | None:
        async with self._tx() as db:
            if not await memory_write_allowed(db, user_id, generation, Conversation("chat", chat_id)):
                return None
            # Locking the chat row serialises appends to one chat, so two never take the same seq.
            await db.execute("UPDATE chats SET last_message_at = $2 WHERE chat_id = $1", chat_id, at)
            turn_id = await db.fetchval(
                "INSERT INTO turns (user_id, chat_id, seq, role, content, spoken_at, source) "
                "VALUES ($1, $2, (SELECT COALESCE(MAX(seq), -1) + 1 FROM turns WHERE chat_id = $2), $3, $4, $5, "
                "'text') RETURNING turn_id",
                user_id,
                chat_id,
                role,
                content,
                at,
            )
            return int(turn_id)

    async def recent_turns(self, user_id: int, limit: int) -> list[TurnRecord]:
        rows = await self._all(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE user_id = $1 ORDER BY spoken_at DESC, seq DESC LIMIT $2",
            user_id,
            limit,
        )
        return [_turn(r) for r in reversed(rows)]

    async def turns_around(self, turn: TurnRecord, *, before: int, after: int) -> list[TurnRecord]:
        convo = Conversation.of_turn(turn)
        column, ref = convo.column, convo.ref_id
        rows = await self._all(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE {column} = $1 AND seq BETWEEN $2 AND $3 ORDER BY seq",
            ref,
            turn.seq - before,
            turn.seq + after,
        )
        return [_turn(r) for r in rows]

    async def search_turns(
        self, user_id: int, query: str, limit: int, *, exclude_call_id: str | None = None
    ) -> list[TurnRecord]:
        return [turn for turn, _ in await self.rank_turns(user_id, query, limit, exclude_call_id=exclude_call_id)]

    async def rank_turns(
        self, user_id: int, query: str, limit: int, *, exclude_call_id: str | None = None
    ) -> list[tuple[TurnRecord, float]]:
        """The member's lines matching any word of ``query`` (stemmed), best BM25 first, with the score; lines of
        ``exclude_call_id`` left out. Scored as on SQLite (bot.store.ranking)."""
        excluded: list[int] = []
        if exclude_call_id is not None:
            excluded = [
                int(r[0]) for r in await self._all("SELECT turn_id FROM turns WHERE call_id = $1", exclude_call_id)
            ]
        first = await self._first_stage("turns", "turn_id", user_id, query, limit, excluded)
        if not first:
            return []
        rows = await self._all(f"SELECT {_TURN_COLUMNS} FROM turns WHERE turn_id = ANY($1::bigint[])", list(first))
        found = [(int(r["turn_id"]), len(WORD.findall(r["content"])), _turn(r)) for r in rows]
        return rerank(first, found, limit)

    async def live_turn_seen(self, call_id: str, turn_key: str) -> bool:
        row = await self._one("SELECT 1 FROM live_turns WHERE call_id = $1 AND turn_key = $2", call_id, turn_key)
        return row is not None

    async def remember_live_turn(self, call_id: str, turn_key: str) -> None:
        await self._write(
            "INSERT INTO live_turns (call_id, turn_key) VALUES ($1, $2) ON CONFLICT DO NOTHING", call_id, turn_key
        )

    async def recent_turns_of(
        self, user_id: int, limit: int, *, exclude_call_id: str | None = None
    ) -> list[TurnRecord]:
        rows = await self._all(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE user_id = $1 "
            "AND (call_id IS NULL OR call_id IS DISTINCT FROM $2) ORDER BY spoken_at DESC, seq DESC LIMIT $3",
            user_id,
            exclude_call_id,
            limit,
        )
        return [_turn(r) for r in reversed(rows)]

    async def turns_at(self, positions: Sequence[tuple[str, int]]) -> list[TurnRecord]:
        if not positions:
            return []
        rows = await self._all(
            f"SELECT {_prefixed(_TURN_COLUMNS, 't')} FROM unnest($1::text[], $2::integer[]) WITH ORDINALITY "
            "AS p(ref, seq, i) JOIN turns t ON (t.call_id = p.ref OR t.chat_id = p.ref) AND t.seq = p.seq ORDER BY p.i",
            [ref for ref, _ in positions],
            [seq for _, seq in positions],
        )
        return [_turn(r) for r in rows]

    async def count_turns(self, user_id: int, *, outside_call_id: str | None = None) -> int:
        return int(
            await self.pool.fetchval(
                "SELECT (SELECT COUNT(*) FROM turns WHERE user_id = $1) "
                "- (SELECT COUNT(*) FROM turns WHERE call_id = $2)",
                user_id,
                outside_call_id,
            )
        )

    async def count_call_turns(self, call_id: str) -> int:
        return int(await self.pool.fetchval("SELECT COUNT(*) FROM turns WHERE call_id = $1", call_id))

    async def call_tail(self, call_id: str, limit: int) -> list[TurnRecord]:
        rows = await self._all(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE call_id = $1 ORDER BY seq DESC LIMIT $2", call_id, limit
        )
        return [_turn(r) for r in reversed(rows)]

    async def memory_generation(self, user_id: int) -> int:
        value = await self.pool.fetchval("SELECT generation FROM memory_fences WHERE user_id = $1", user_id)
        return int(value or 0)

    async def memory_state(self, user_id: int) -> tuple[int, bool]:
        row = await self.pool.fetchrow(
            "SELECT (SELECT generation FROM memory_fences WHERE user_id = $1), "
            "(SELECT memory_enabled FROM users WHERE user_id = $1)",
            user_id,
        )
        return (int(row[0] or 0), row[1] is None or bool(row[1])) if row is not None else (0, True)

    async def memory_stamp(self, user_id: int) -> tuple[int, int]:
        row = await self.pool.fetchrow(
            "SELECT (SELECT version FROM memory_versions WHERE user_id = $1), "
            "(SELECT generation FROM memory_fences WHERE user_id = $1)",
            user_id,
        )
        return (int(row[0] or 0), int(row[1] or 0)) if row is not None else (0, 0)

    # ---- summaries and listings ------------------------------------------------------------------------

    async def latest_summaries(self, user_id: int, limit: int) -> list[ConversationSummary]:
        rows = await self._all(
            "SELECT * FROM (SELECT * FROM (SELECT 'call' AS kind, call_id AS ref_id, started_at, ended_at, summary, "
            "private FROM calls WHERE user_id = $1 AND summary IS NOT NULL ORDER BY started_at DESC LIMIT $2) a "
            "UNION ALL SELECT * FROM (SELECT 'chat', chat_id, started_at, ended_at, summary, private FROM chats "
            "WHERE user_id = $1 AND summary IS NOT NULL ORDER BY started_at DESC LIMIT $2) b) u "
            "ORDER BY started_at DESC LIMIT $2",
            user_id,
            limit,
        )
        return [
            ConversationSummary(
                kind=r["kind"],
                ref_id=r["ref_id"],
                started_at=r["started_at"],
                ended_at=r["ended_at"],
                turn_count=0,
                summary=r["summary"],
                private=bool(r["private"]),
            )
            for r in rows
        ]

    async def list_conversations(self, user_id: int, *, offset: int = 0, limit: int = 10) -> list[ConversationSummary]:
        rows = await self._all(
            "SELECT u.*, "
            "  (SELECT COUNT(*) FROM turns t WHERE (u.kind = 'call' AND t.call_id = u.ref_id) "
            "     OR (u.kind = 'chat' AND t.chat_id = u.ref_id)) AS turn_count, "
            "  ARRAY(SELECT t.content FROM turns t WHERE ((u.kind = 'call' AND t.call_id = u.ref_id) "
            "     OR (u.kind = 'chat' AND t.chat_id = u.ref_id)) AND t.role = 'user' ORDER BY t.seq LIMIT 2) "
            "     AS first_lines "
            "FROM ("
            "  SELECT 'call' AS kind, c.call_id AS ref_id, c.started_at, c.ended_at, c.summary, c.private FROM calls c "
            "  WHERE c.user_id = $1 AND c.state IN ('ended', 'failed') AND (c.summary IS NOT NULL OR "
            "    EXISTS (SELECT 1 FROM turns t WHERE t.call_id = c.call_id)) "
            "  UNION ALL "
            "  SELECT 'chat', h.chat_id, h.started_at, h.ended_at, h.summary, h.private FROM chats h "
            "  WHERE h.user_id = $1 AND (h.summary IS NOT NULL OR "
            "    EXISTS (SELECT 1 FROM turns t WHERE t.chat_id = h.chat_id))"
            ") u ORDER BY started_at DESC LIMIT $2 OFFSET $3",
            user_id,
            limit,
            offset,
        )
        return [
            ConversationSummary(
                kind=r["kind"],
                ref_id=r["ref_id"],
                started_at=r["started_at"],
                ended_at=r["ended_at"],
                turn_count=int(r["turn_count"]),
                summary=r["summary"],
                first_lines=list(r["first_lines"]),
                private=bool(r["private"]),
            )
            for r in rows
        ]

    async def count_conversations(self, user_id: int) -> int:
        return int(
            await self.pool.fetchval(
                "SELECT (SELECT COUNT(*) FROM calls c WHERE c.user_id = $1 AND c.state IN ('ended', 'failed') AND "
                "  (c.summary IS NOT NULL OR EXISTS (SELECT 1 FROM turns t WHERE t.call_id = c.call_id))) + "
                "(SELECT COUNT(*) FROM chats h WHERE h.user_id = $1 AND "
                "  (h.summary IS NOT NULL OR EXISTS (SELECT 1 FROM turns t WHERE t.chat_id = h.chat_id)))",
                user_id,
            )
        )
