"""Calls, chats, their turns and summaries (`ConversationStore`) on SQLite."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.store.columns import CALL_COLUMNS as _CALL_COLUMNS
from bot.store.columns import CHAT_COLUMNS as _CHAT_COLUMNS
from bot.store.columns import TURN_COLUMNS as _TURN_COLUMNS
from bot.store.columns import call_memory_state, fact_record, turn_record
from bot.store.columns import check_call_fields as _check_call_fields
from bot.store.models import (
    CallEnd,
    CallMemoryState,
    CallRecord,
    CallStartCheck,
    CallState,
    ChatRecord,
    Conversation,
    ConversationSummary,
    FactRecord,
    LivePlan,
    LiveWrite,
    NewTurn,
    RecentLines,
    TurnRecord,
    TurnUpdate,
)
from bot.store.specifics import stored_specifics
from bot.store.sqlite import trips
from bot.store.sqlite.base import _call, _chat, _guild, _to_db, _turn, _user
from bot.store.sqlite.fences import memory_write_allowed
from bot.store.sqlite.fulltext import SqliteFullText


class SqliteConversations(SqliteFullText):
    """Implements `bot.store.repository.ConversationStore`: calls (with their leases), chats, turns (with the
    ranking reads), the memory generation writers read, live-turn keys and conversation summaries."""

    # ---- calls -----------------------------------------------------------------------------------------

    async def create_call(self, call: CallRecord) -> None:
        values = [_to_db(getattr(call, name)) for name in _CALL_COLUMNS]
        await self._one_trip(trips.create_call, values, call.user_id)

    async def get_call(self, call_id: str) -> CallRecord | None:
        row = await self._one("SELECT * FROM calls WHERE call_id = ?", (call_id,))
        return None if row is None else _call(row)

    async def get_call_by_link_hash(self, link_hash: str) -> CallRecord | None:
        row = await self._one("SELECT * FROM calls WHERE link_hash = ?", (link_hash,))
        return None if row is None else _call(row)

    async def get_call_by_agent_id(self, agent_id: str) -> CallRecord | None:
        row = await self._one("SELECT * FROM calls WHERE agent_id = ?", (agent_id,))
        return None if row is None else _call(row)

    async def open_call_for_user(self, user_id: int) -> CallRecord | None:
        row = await self._one(
            "SELECT * FROM calls WHERE user_id = ? AND state IN ('starting', 'active', 'ending') "
            "ORDER BY started_at DESC LIMIT 1",
            (user_id,),
        )
        return None if row is None else _call(row)

    async def open_calls(self) -> list[CallRecord]:
        rows = await self._all(
            "SELECT * FROM calls WHERE state IN ('starting', 'active', 'ending') ORDER BY started_at"
        )
        return [_call(r) for r in rows]

    async def calls_with_agent_to_stop(self) -> list[CallRecord]:
        rows = await self._all("SELECT * FROM calls WHERE agent_stop_pending = 1 ORDER BY started_at")
        return [_call(r) for r in rows]

    async def count_open_calls(self) -> int:
        return int(await self._scalar("SELECT COUNT(*) FROM calls WHERE state IN ('starting', 'active', 'ending')"))

    async def count_guild_calls_since(self, guild_id: int, since: float) -> int:
        return int(
            await self._scalar(
                "SELECT COUNT(*) FROM calls WHERE guild_id = ? AND started_at >= ? AND state != 'failed'",
                (guild_id, since),
            )
        )

    async def transition_call(
        self, call_id: str, from_states: Sequence[CallState], to_state: CallState, **fields_: Any
    ) -> bool:
        _check_call_fields(fields_)
        assignments = ", ".join(["state = ?", *(f"{k} = ?" for k in fields_)])
        placeholders = ", ".join("?" * len(from_states))
        changed = await self._write(
            f"UPDATE calls SET {assignments} WHERE call_id = ? AND state IN ({placeholders})",
            (to_state, *(_to_db(v) for v in fields_.values()), call_id, *from_states),
        )
        return changed == 1

    # ---- the call lifecycle's combined steps (`CallStepStore`) ----------------------------------------

    async def call_start_check(self, user_id: int, guild_id: int | None, since: float) -> CallStartCheck:
        guild, user, counts = await self._trip(trips.call_start_check, user_id, guild_id, since)
        return CallStartCheck(
            guild=_guild(guild_id if guild_id is not None else 0, guild),
            user=None if user is None else _user(user),
            open_call_id=counts[0],
            calls_today=int(counts[1]),
            open_calls=int(counts[2]),
        )

    async def call_and_generation(self, call_id: str) -> tuple[CallRecord, int] | None:
        row = await self._one(
            "SELECT calls.*, (SELECT generation FROM memory_fences f WHERE f.user_id = calls.user_id) AS "
            "fence_generation FROM calls WHERE call_id = ?",
            (call_id,),
        )
        return None if row is None else (_call(row), int(row["fence_generation"] or 0))

    async def begin_call_ending(
        self, call_id: str, from_states: Sequence[CallState], **fields_: Any
    ) -> tuple[CallRecord, int] | None:
        _check_call_fields(fields_)
        assignments = ", ".join(["state = 'ending'", *(f"{k} = ?" for k in fields_)])
        placeholders = ", ".join("?" * len(from_states))
        began = await self._trip(
            trips.begin_call_ending,
            f"UPDATE calls SET {assignments} WHERE call_id = ? AND state IN ({placeholders}) RETURNING *",
            (*(_to_db(v) for v in fields_.values()), call_id, *from_states),
        )
        return None if began is None else (_call(began[0]), began[1])

    async def end_call(
        self,
        call_id: str,
        *,
        ended_at: float,
        agent_stop_pending: bool,
        post_call_job: str | None = None,
        not_before: float = 0.0,
    ) -> CallEnd:
        won, turns = await self._one_trip(
            trips.end_call, call_id, ended_at, agent_stop_pending, post_call_job, not_before
        )
        return CallEnd(won=won, turns=turns)

    async def bind_call_browser(self, call_id: str, browser_hash: str) -> bool:
        await self._write(
            "UPDATE calls SET browser_hash = ? WHERE call_id = ? AND browser_hash IS NULL", (browser_hash, call_id)
        )
        bound = await self._scalar("SELECT browser_hash FROM calls WHERE call_id = ?", (call_id,))
        return bool(bound == browser_hash)

    async def update_call(self, call_id: str, **fields_: Any) -> None:
        _check_call_fields(fields_)
        if not fields_:
            return
        assignments = ", ".join(f"{k} = ?" for k in fields_)
        await self._write(
            f"UPDATE calls SET {assignments} WHERE call_id = ?", (*(_to_db(v) for v in fields_.values()), call_id)
        )

    async def take_call_lease(self, call_id: str, owner: str, now: float, until: float) -> bool:
        changed = await self._write(
            "UPDATE calls SET owner = ?, lease_until = ? WHERE call_id = ? AND state IN ('starting', 'active', "
            "'ending') AND (owner IS ? OR lease_until IS NULL OR lease_until < ?)",
            (owner, until, call_id, owner, now),
        )
        return changed == 1

    async def release_call_leases(self, owner: str) -> None:
        await self._write(
            "UPDATE calls SET lease_until = NULL WHERE owner = ? AND state IN ('starting', 'active', 'ending')",
            (owner,),
        )

    # ---- chats -----------------------------------------------------------------------------------------

    async def create_chat(self, chat: ChatRecord) -> None:
        async with self._tx() as db:
            await db.execute(
                f"INSERT INTO chats ({', '.join(_CHAT_COLUMNS)}) VALUES ({', '.join('?' * len(_CHAT_COLUMNS))})",
                [_to_db(getattr(chat, c)) for c in _CHAT_COLUMNS],
            )

    async def get_chat(self, chat_id: str) -> ChatRecord | None:
        row = await self._one("SELECT * FROM chats WHERE chat_id = ?", (chat_id,))
        return None if row is None else _chat(row)

    async def open_chat_for_user(self, user_id: int) -> ChatRecord | None:
        row = await self._one(
            "SELECT * FROM chats WHERE user_id = ? AND ended_at IS NULL ORDER BY started_at DESC LIMIT 1",
            (user_id,),
        )
        return None if row is None else _chat(row)

    async def idle_chats(self, last_message_before: float) -> list[ChatRecord]:
        rows = await self._all(
            "SELECT * FROM chats WHERE ended_at IS NULL AND last_message_at < ? ORDER BY last_message_at",
            (last_message_before,),
        )
        return [_chat(r) for r in rows]

    async def end_chat(self, chat_id: str, at: float) -> bool:
        async with self._tx() as db:
            cur = await db.execute(
                "UPDATE chats SET ended_at = ? WHERE chat_id = ? AND ended_at IS NULL", (at, chat_id)
            )
            return cur.rowcount == 1

    # ---- turns -----------------------------------------------------------------------------------------

    async def call_turns(self, call_id: str) -> list[TurnRecord]:
        return await self._trip(trips.call_lines, call_id)

    async def chat_turns(self, chat_id: str) -> list[TurnRecord]:
        rows = await self._all(f"SELECT {_TURN_COLUMNS} FROM turns WHERE chat_id = ? ORDER BY seq", (chat_id,))
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
        return await self._one_trip(
            trips.apply_call_turns,
            call_id,
            user_id,
            inserts,
            updates,
            anchored=anchored,
            checkpoint_at=checkpoint_at,
            generation=generation,
            expected_version=expected_version,
            live_key=live_key,
        )

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
        async with self._tx() as db:
            if not await memory_write_allowed(db, user_id, generation, Conversation("chat", chat_id)):
                return None
            cur = await db.execute(
                "INSERT INTO turns (user_id, chat_id, seq, role, content, spoken_at, source, specifics) "
                "VALUES (?, ?, (SELECT COALESCE(MAX(seq), -1) + 1 FROM turns WHERE chat_id = ?), ?, ?, ?, 'text', ?)",
                (user_id, chat_id, chat_id, role, content, at, stored_specifics(specifics, content)),
            )
            await db.execute("UPDATE chats SET last_message_at = ? WHERE chat_id = ?", (at, chat_id))
            return int(cur.lastrowid or 0)

    async def search_turns(
        self, user_id: int, query: str, limit: int, *, exclude_call_id: str | None = None
    ) -> list[TurnRecord]:
        return [turn for turn, _ in await self.rank_turns(user_id, query, limit, exclude_call_id=exclude_call_id)]

    async def rank_turns(
        self, user_id: int, query: str, limit: int, *, exclude_call_id: str | None = None
    ) -> list[tuple[TurnRecord, float]]:
        """The member's lines matching any word of ``query`` (porter-stemmed), best BM25 first, with the score
        (higher is better); lines of ``exclude_call_id`` left out. See ``_bm25`` for how it is scored."""
        columns = ", ".join("t." + c.strip() for c in _TURN_COLUMNS.split(","))
        ranked = await self._bm25(
            "turns_fts",
            "content",
            user_id,
            query,
            limit,
            records=f"SELECT {columns}, d.sz FROM turns t JOIN turns_fts_docsize d ON d.id = t.turn_id "
            "WHERE t.turn_id IN (SELECT value FROM json_each(?))",
            excluded=None if exclude_call_id is None else ("turns WHERE call_id = ?", exclude_call_id),
        )
        return [(_turn(row), score) for row, score in ranked]

    async def recent_turns_of(
        self, user_id: int, limit: int, *, exclude_call_id: str | None = None
    ) -> list[TurnRecord]:
        """The member's latest ``limit`` lines with text, oldest first, leaving out the lines of ``exclude_call_id``."""
        rows = await self._all(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE user_id = ? AND (call_id IS NULL OR call_id IS NOT ?) "
            "AND content <> '' ORDER BY spoken_at DESC, seq DESC LIMIT ?",
            (user_id, exclude_call_id, limit),
        )
        return [_turn(r) for r in reversed(rows)]

    async def call_start_memory(self, user_id: int, *, facts: int, lines: int) -> tuple[list[FactRecord], RecentLines]:
        fact_rows, line_rows = await self._trip(trips.call_start_memory, user_id, facts, lines)
        line_rows.reverse()
        return [fact_record(r) for r in fact_rows], RecentLines(line_rows, turn_record)

    async def turns_at(self, positions: Sequence[tuple[str, int]]) -> list[TurnRecord]:
        """The lines at (conversation id, seq) positions, where the id is a call's or a chat's; missing ones are
        skipped. One indexed lookup per position."""
        if not positions:
            return []
        lookups = " UNION ALL ".join(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE call_id = ? AND seq = ? AND content <> '' UNION ALL "
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE chat_id = ? AND seq = ? AND content <> ''"
            for _ in positions
        )
        rows = await self._all(lookups, [v for ref, seq in positions for v in (ref, seq, ref, seq)])
        return [_turn(r) for r in rows]

    async def count_turns(self, user_id: int, *, outside_call_id: str | None = None) -> int:
        """The member's lines, not counting those of ``outside_call_id``."""
        return int(
            await self._scalar(
                "SELECT (SELECT COUNT(*) FROM turns WHERE user_id = ?) "
                "- (SELECT COUNT(*) FROM turns WHERE call_id = ?)",
                (user_id, outside_call_id),
            )
        )

    async def count_call_turns(self, call_id: str) -> int:
        return int(await self._scalar("SELECT COUNT(*) FROM turns WHERE call_id = ?", (call_id,)))

    async def call_tail(self, call_id: str, limit: int) -> list[TurnRecord]:
        return await self._trip(trips.call_lines, call_id, limit)

    async def memory_generation(self, user_id: int) -> int:
        value = await self._scalar("SELECT generation FROM memory_fences WHERE user_id = ?", (user_id,))
        return int(value or 0)

    async def call_memory_state(self, call_id: str) -> CallMemoryState | None:
        row = await self._read_one(
            "SELECT *, (SELECT generation FROM memory_fences f WHERE f.user_id = calls.user_id) AS memory_generation, "
            "(SELECT memory_enabled FROM users u WHERE u.user_id = calls.user_id) AS memory_enabled, "
            "(SELECT version FROM memory_versions v WHERE v.user_id = calls.user_id) AS memory_version "
            "FROM calls WHERE call_id = ?",
            (call_id,),
        )
        if row is None:
            return None
        return call_memory_state(_call(row), row)

    async def memory_stamp(self, user_id: int) -> tuple[int, int]:
        row = await self._one(
            "SELECT (SELECT version FROM memory_versions WHERE user_id = ?), "
            "(SELECT generation FROM memory_fences WHERE user_id = ?)",
            (user_id, user_id),
        )
        return (int(row[0] or 0), int(row[1] or 0)) if row is not None else (0, 0)

    async def write_live_turn(
        self,
        call_id: str,
        user_id: int,
        turn_key: str | None,
        *,
        tail: int,
        plan: LivePlan,
        checkpoint_at: float,
        generation: int,
    ) -> LiveWrite:
        """In ONE trip to the database thread: a voice turn waits for this write before its reply is relayed, and
        under many calls each trip also waits for the writes queued before it."""
        return await self._one_trip(
            trips.write_live_turn, call_id, user_id, turn_key, tail, plan, checkpoint_at, generation
        )

    # ---- summaries and listings ------------------------------------------------------------------------

    async def latest_summaries(self, user_id: int, limit: int) -> list[ConversationSummary]:
        rows = await self._all(
            "SELECT * FROM (SELECT 'call' AS kind, call_id AS ref_id, started_at, ended_at, summary, private "
            "FROM calls WHERE user_id = ? AND summary IS NOT NULL ORDER BY started_at DESC LIMIT ?) "
            "UNION ALL SELECT * FROM (SELECT 'chat', chat_id, started_at, ended_at, summary, private FROM chats "
            "WHERE user_id = ? AND summary IS NOT NULL ORDER BY started_at DESC LIMIT ?) "
            "ORDER BY started_at DESC LIMIT ?",
            (user_id, limit, user_id, limit, limit),
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
            "SELECT * FROM ("
            "  SELECT 'call' AS kind, c.call_id AS ref_id, c.started_at, c.ended_at, c.summary, c.private FROM calls c "
            "  WHERE c.user_id = ? AND c.state IN ('ended', 'failed') AND (c.summary IS NOT NULL OR "
            "    EXISTS (SELECT 1 FROM turns t WHERE t.call_id = c.call_id)) "
            "  UNION ALL "
            "  SELECT 'chat', h.chat_id, h.started_at, h.ended_at, h.summary, h.private FROM chats h "
            "  WHERE h.user_id = ? AND (h.summary IS NOT NULL OR "
            "    EXISTS (SELECT 1 FROM turns t WHERE t.chat_id = h.chat_id))"
            ") ORDER BY started_at DESC LIMIT ? OFFSET ?",
            (user_id, user_id, limit, offset),
        )
        result = []
        for r in rows:
            column = Conversation.named(r["kind"], r["ref_id"]).column
            count = await self._scalar(f"SELECT COUNT(*) FROM turns WHERE {column} = ?", (r["ref_id"],))
            first = await self._all(
                f"SELECT content FROM turns WHERE {column} = ? AND role = 'user' ORDER BY seq LIMIT 2",
                (r["ref_id"],),
            )
            result.append(
                ConversationSummary(
                    kind=r["kind"],
                    ref_id=r["ref_id"],
                    started_at=r["started_at"],
                    ended_at=r["ended_at"],
                    turn_count=int(count),
                    summary=r["summary"],
                    first_lines=[f["content"] for f in first],
                    private=bool(r["private"]),
                )
            )
        return result

    async def count_conversations(self, user_id: int) -> int:
        return int(
            await self._scalar(
                "SELECT (SELECT COUNT(*) FROM calls c WHERE c.user_id = ? AND c.state IN ('ended', 'failed') AND "
                "  (c.summary IS NOT NULL OR EXISTS (SELECT 1 FROM turns t WHERE t.call_id = c.call_id))) + "
                "(SELECT COUNT(*) FROM chats h WHERE h.user_id = ? AND "
                "  (h.summary IS NOT NULL OR EXISTS (SELECT 1 FROM turns t WHERE t.chat_id = h.chat_id)))",
                (user_id, user_id),
            )
        )
