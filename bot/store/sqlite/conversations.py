"""Calls, chats, their turns and summaries (`ConversationStore`) on SQLite."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from bot.store.columns import CALL_COLUMNS as _CALL_COLUMNS
from bot.store.columns import TURN_COLUMNS as _TURN_COLUMNS
from bot.store.columns import call_memory_state, fact_record, turn_record
from bot.store.columns import check_call_fields as _check_call_fields
from bot.store.live_plan import LivePlan, LiveWrite
from bot.store.models import (
    CallEnd,
    CallMemoryState,
    CallRecord,
    CallStartCheck,
    CallState,
    Conversation,
    ConversationSummary,
    FactRecord,
    NewTurn,
    RecentLines,
    TurnRecord,
    TurnUpdate,
)
from bot.store.shared import (
    CALL_MEMORY_STATE,
    LISTED_CONVERSATIONS,
    SharedConversations,
    call_record,
    greeting_record,
    sqlite_sql,
    summary_of,
    user_record,
)
from bot.store.sqlite import trips
from bot.store.sqlite.base import _guild, _to_db, _turn
from bot.store.sqlite.fulltext import SqliteFullText


class SqliteConversations(SqliteFullText, SharedConversations):
    """Implements `bot.store.repository.ConversationStore`: calls (with their leases), chats, turns (with the
    ranking reads), the memory generation writers read, live-turn keys and conversation summaries."""

    # ---- calls -----------------------------------------------------------------------------------------

    async def create_call(self, call: CallRecord) -> None:
        values = [_to_db(getattr(call, name)) for name in _CALL_COLUMNS]
        await self._atomic(trips.create_call, values, call.user_id)

    async def calls_with_agent_to_stop(self) -> list[CallRecord]:
        rows = await self._all("SELECT * FROM calls WHERE agent_stop_pending = 1 ORDER BY started_at")
        return [call_record(r) for r in rows]

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
        guild, user, counts, greeting = await self._alone(trips.call_start_check, user_id, guild_id, since)
        return CallStartCheck(
            guild=_guild(guild_id if guild_id is not None else 0, guild),
            user=None if user is None else user_record(user),
            open_call_id=counts[0],
            calls_today=int(counts[1]),
            open_calls=int(counts[2]),
            greeting=None if greeting is None else greeting_record(greeting),
            returning=bool(counts[3]),
        )

    async def begin_call_ending(
        self, call_id: str, from_states: Sequence[CallState], **fields_: Any
    ) -> tuple[CallRecord, int] | None:
        _check_call_fields(fields_)
        assignments = ", ".join(["state = 'ending'", *(f"{k} = ?" for k in fields_)])
        placeholders = ", ".join("?" * len(from_states))
        began = await self._alone(
            trips.begin_call_ending,
            f"UPDATE calls SET {assignments} WHERE call_id = ? AND state IN ({placeholders}) RETURNING *",
            (*(_to_db(v) for v in fields_.values()), call_id, *from_states),
        )
        return None if began is None else (call_record(began[0]), began[1])

    async def end_call(
        self,
        call_id: str,
        *,
        ended_at: float,
        agent_stop_pending: bool,
        post_call_job: str | None = None,
        not_before: float = 0.0,
    ) -> CallEnd:
        won, turns = await self._atomic(
            trips.end_call, call_id, ended_at, agent_stop_pending, post_call_job, not_before
        )
        return CallEnd(won=won, turns=turns)

    async def take_call_lease(self, call_id: str, owner: str, now: float, until: float) -> bool:
        changed = await self._write(
            "UPDATE calls SET owner = ?, lease_until = ? WHERE call_id = ? AND state IN ('starting', 'active', "
            "'ending') AND (owner IS ? OR lease_until IS NULL OR lease_until < ?)",
            (owner, until, call_id, owner, now),
        )
        return changed == 1

    # ---- chats -----------------------------------------------------------------------------------------

    # ---- turns -----------------------------------------------------------------------------------------

    async def call_turns(self, call_id: str) -> list[TurnRecord]:
        return await self._alone(trips.call_lines, call_id)

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
        return await self._atomic(
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
            language_table="turns_language_fts",
        )
        return [(_turn(row), score) for row, score in ranked]

    async def recent_turns_of(
        self, user_id: int, limit: int, *, exclude_call_id: str | None = None, before: float | None = None
    ) -> list[TurnRecord]:
        """The member's latest ``limit`` lines with text (said before ``before``, when given), oldest first, leaving
        out the lines of ``exclude_call_id``."""
        until = "" if before is None else "AND spoken_at < ? "  # a range the (user_id, spoken_at) index seeks to
        rows = await self._all(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE user_id = ? AND (call_id IS NULL OR call_id IS NOT ?) "
            f"AND content <> '' {until}ORDER BY spoken_at DESC, seq DESC LIMIT ?",
            (user_id, exclude_call_id, *(() if before is None else (before,)), limit),
        )
        return [_turn(r) for r in reversed(rows)]

    async def call_start_memory(self, user_id: int, *, facts: int, lines: int) -> tuple[list[FactRecord], RecentLines]:
        fact_rows, line_rows = await self._alone(trips.call_start_memory, user_id, facts, lines)
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

    async def conversation_lengths(self, refs: Sequence[str]) -> dict[str, int]:
        """How many positions each conversation of ``refs`` (a call's or a chat's id) has: its last line's seq
        plus one (lines with content, as ``turns_at`` reads them); conversations with no line are left out. Two
        indexed lookups per conversation."""
        if not refs:
            return {}
        rows = await self._all(
            "SELECT r.value, COALESCE((SELECT MAX(seq) FROM turns WHERE call_id = r.value AND content <> ''), "
            "(SELECT MAX(seq) FROM turns WHERE chat_id = r.value AND content <> '')) FROM json_each(?) AS r",
            [json.dumps(list(refs))],
        )
        return {ref: seq + 1 for ref, seq in rows if seq is not None}

    async def call_tail(self, call_id: str, limit: int) -> list[TurnRecord]:
        return await self._alone(trips.call_lines, call_id, limit)

    async def call_memory_state(self, call_id: str) -> CallMemoryState | None:
        row = await self._read_one(sqlite_sql(CALL_MEMORY_STATE), (call_id,))
        if row is None:
            return None
        return call_memory_state(call_record(row), row)

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
        """One transaction (``trips.write_live_turn``): a voice turn waits for this write before its reply is
        relayed."""
        return await self._atomic(
            trips.write_live_turn, call_id, user_id, turn_key, tail, plan, checkpoint_at, generation
        )

    # ---- summaries and listings ------------------------------------------------------------------------

    async def list_conversations(self, user_id: int, *, offset: int = 0, limit: int = 10) -> list[ConversationSummary]:
        rows = await self._rows(
            f"SELECT * FROM {LISTED_CONVERSATIONS} ORDER BY started_at DESC LIMIT $2 OFFSET $3", user_id, limit, offset
        )
        result = []
        for r in rows:
            column = Conversation.named(r["kind"], r["ref_id"]).column
            count = await self._scalar(f"SELECT COUNT(*) FROM turns WHERE {column} = ?", (r["ref_id"],))
            first = await self._all(
                f"SELECT content FROM turns WHERE {column} = ? AND role = 'user' ORDER BY seq LIMIT 2",
                (r["ref_id"],),
            )
            result.append(summary_of(r, turn_count=int(count), first_lines=[f["content"] for f in first]))
        return result
