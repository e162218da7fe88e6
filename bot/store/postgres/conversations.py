"""Calls, chats, their turns and summaries (`ConversationStore`) on PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from bot.store.columns import CALL_COLUMNS as _CALL_COLUMNS
from bot.store.columns import GUILD_SETTING_NAMES as _GUILD_SETTING_NAMES
from bot.store.columns import TURN_COLUMNS as _TURN_COLUMNS
from bot.store.columns import call_memory_state, fact_record, turn_record
from bot.store.columns import check_call_fields as _check_call_fields
from bot.store.live_plan import LivePlan, LivePlanNeeds, LiveWrite
from bot.store.models import (
    CallEnd,
    CallMemoryState,
    CallRecord,
    CallStartCheck,
    CallState,
    Conversation,
    ConversationSummary,
    FactRecord,
    GuildSettings,
    NewTurn,
    RecentLines,
    TurnRecord,
    TurnsWrite,
    TurnUpdate,
)
from bot.store.postgres.base import _OPEN, _prefixed, _storage_errors, _to_db, _turn
from bot.store.postgres.fences import memory_write_allowed
from bot.store.postgres.fulltext import PostgresFullText
from bot.store.ranking import rerank
from bot.store.repository import OpenCallExists, TurnsChanged
from bot.store.shared import (
    CALL_MEMORY_STATE,
    LISTED_CONVERSATIONS,
    SharedConversations,
    call_record,
    greeting_record,
    summary_of,
    user_record,
)
from bot.store.shared.greetings import GREETING_COLUMNS
from bot.store.specifics import stored_specifics
from bot.store.terms import stored_language_terms, token_count

_GUILD_NAMES = sorted(_GUILD_SETTING_NAMES)
_CALL_START_MEMORY = (
    f"(SELECT {_TURN_COLUMNS}, NULL::double precision, NULL::double precision, true FROM turns WHERE user_id = $1 "
    "AND content <> '' ORDER BY spoken_at DESC, seq DESC, turn_id DESC LIMIT $2) UNION ALL "
    "(SELECT fact_id, user_id, source_call_id, source_chat_id, mentions, NULL, text, confirmed_at, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, created_at, updated_at, false FROM facts WHERE user_id = $1 AND superseded_by IS NULL "
    "AND invalidated_at IS NULL ORDER BY confirmed_at DESC, mentions DESC, fact_id DESC LIMIT $3) "
    "ORDER BY 18 DESC, 8 DESC, 5 DESC, 1 DESC"
)
"""A call start's reads in one statement (`call_start_memory`): the latest lines (``TURN_COLUMNS``), then the
current facts in the same columns by type (id, member, source call and chat, mentions as ``seq``, text as
``content``, confirmed as ``spoken_at``; created and updated after them), the last column telling which. The outer
order is each part's own (newest first; facts by ``list_facts``'s order)."""
_FACT_AT = (0, 1, 6, 2, 3, 15, 16, 7, 4, 8, 8)
"""Where each of ``FactRecord``'s fields is in a fact's row of `_CALL_START_MEMORY` (superseded and invalidated
are those of a current fact: NULL)."""
_START_CHECK = (
    "SELECT "
    f"(SELECT call_id FROM calls WHERE user_id = $1 AND state IN {_OPEN} ORDER BY started_at DESC LIMIT 1) "
    "AS open_call_id, "
    "(SELECT COUNT(*) FROM calls WHERE user_id = $1 AND guild_id IS NOT DISTINCT FROM $2 AND started_at >= $3 "
    "AND state != 'failed') AS calls_today, "
    f"(SELECT COUNT(*) FROM calls WHERE state IN {_OPEN}) AS open_calls, "
    "u.user_id, u.memory_enabled, u.consent, u.consent_at, u.created_at, u.language, u.locale, "
    "u.personal_greetings, "
    "(u.consent = 'remember' AND (EXISTS (SELECT 1 FROM turns WHERE user_id = $1) OR EXISTS (SELECT 1 FROM facts "
    "WHERE user_id = $1 AND superseded_by IS NULL AND invalidated_at IS NULL))) AS returning, "
    + ", ".join(f"gr.{name} AS gr_{name}" for name in GREETING_COLUMNS)
    + ", g.guild_id AS g_guild_id, "
    + ", ".join(f"g.{name} AS g_{name}" for name in _GUILD_NAMES)
    + " FROM (SELECT 1) AS one LEFT JOIN users u ON u.user_id = $1 LEFT JOIN guild_settings g ON g.guild_id = $2"
    " LEFT JOIN greetings gr ON gr.user_id = u.user_id AND u.consent = 'remember'"
)
_END_CALL = (
    "WITH ended AS (UPDATE calls SET state = 'ended', ended_at = $2, agent_stop_pending = $3 "
    "WHERE call_id = $1 AND state = 'ending' RETURNING call_id), "
    "counted AS (SELECT COUNT(*) AS turns FROM turns WHERE call_id = $1 AND EXISTS (SELECT 1 FROM ended)), "
    "queued AS (INSERT INTO jobs (kind, ref_id, created_at, updated_at, not_before) "
    "SELECT $4::text, $1, $2, $2, $5 FROM counted WHERE $4::text IS NOT NULL AND counted.turns > 0 "
    "ON CONFLICT (kind, ref_id) DO NOTHING RETURNING 1) "
    "SELECT EXISTS (SELECT 1 FROM ended) AS won, (SELECT turns FROM counted) AS turns"
)


_APPLY_CALL_TURNS = """
WITH fence AS (
    SELECT generation, forget_begun FROM memory_fences WHERE user_id = $2 FOR SHARE
),
allowed AS (
    SELECT ($3::bigint IS NULL OR COALESCE((SELECT generation FROM fence), 0) = $3)
        AND NOT EXISTS (SELECT 1 FROM fence WHERE forget_begun IS NOT NULL)
        AND NOT EXISTS (SELECT 1 FROM users WHERE user_id = $2 AND NOT memory_enabled)
        AND EXISTS (SELECT 1 FROM calls WHERE call_id = $1 AND user_id = $2 AND NOT private
                    AND transcript_purged_at IS NULL) AS ok
),
bumped AS (
    UPDATE calls SET history_anchored = history_anchored OR $4, last_checkpoint_at = $5,
        turns_version = turns_version + 1
    WHERE call_id = $1 AND ($6::integer IS NULL OR turns_version = $6) AND (SELECT ok FROM allowed)
    RETURNING call_id
),
updated AS (
    UPDATE turns t SET seq = u.seq, content = u.content, segment = u.segment, partial = u.partial,
        captured = u.captured, specifics = u.specifics, interrupted = u.interrupted, language = u.language,
        language_terms = u.language_terms
    FROM unnest($7::bigint[], $8::integer[], $9::text[], $10::integer[], $11::boolean[], $12::bigint[],
                $20::integer[], $23::boolean[], $25::text[], $26::text[])
        AS u (turn_id, seq, content, segment, partial, captured, specifics, interrupted, language, language_terms)
    WHERE t.turn_id = u.turn_id AND t.call_id = $1 AND (SELECT ok FROM allowed)
        AND ($6::integer IS NULL OR EXISTS (SELECT 1 FROM bumped))
    RETURNING t.turn_id
),
inserted AS (
    INSERT INTO turns (user_id, call_id, seq, segment, partial, captured, role, content, spoken_at, source,
                       specifics, interrupted, language, language_terms)
    SELECT $2, $1, i.seq, i.segment, i.partial, i.captured, i.role, i.content, i.spoken_at, 'voice', i.specifics,
        i.interrupted, i.language, i.language_terms
    FROM unnest($13::integer[], $14::integer[], $15::boolean[], $16::bigint[], $17::text[], $18::text[],
                $19::double precision[], $21::integer[], $24::boolean[], $27::text[], $28::text[])
        AS i (seq, segment, partial, captured, role, content, spoken_at, specifics, interrupted, language,
              language_terms)
    WHERE (SELECT ok FROM allowed) AND ($6::integer IS NULL OR EXISTS (SELECT 1 FROM bumped))
    RETURNING turn_id
),
keyed AS (
    INSERT INTO live_turns (call_id, turn_key)
    SELECT $1, $22::text
    WHERE $22::text IS NOT NULL AND (SELECT ok FROM allowed) AND ($6::integer IS NULL OR EXISTS (SELECT 1 FROM bumped))
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT (SELECT ok FROM allowed) AS allowed, EXISTS (SELECT 1 FROM bumped) AS bumped,
    (SELECT COUNT(*) FROM updated) + (SELECT COUNT(*) FROM inserted) AS written
"""
"""`apply_call_turns` in ONE statement (one round trip, one implicit transaction): the memory fence (the member's
fence row read FOR SHARE first, so a forget or pause that bumps it waits for this write or is seen by it, and a
forget of everything under way refuses it, as in `bot.store.postgres.fences.memory_write_allowed`), then the
versioned bump of the call row (a concurrent merge of the same call waits for this one's row lock and then finds
the version moved), then the turns' updates and inserts (and a live turn's key, ``live_key``), which happen only
when the fence allows and, with an expected version, only when the bump applied."""


def _apply_params(
    call_id: str,
    user_id: int,
    inserts: Sequence[NewTurn],
    updates: Sequence[TurnUpdate],
    anchored: bool,
    checkpoint_at: float,
    generation: int | None,
    expected_version: int | None,
    live_key: str | None,
) -> list[Any]:
    """The parameters of `_APPLY_CALL_TURNS`, in order."""
    return [
        call_id,
        user_id,
        generation,
        anchored,
        checkpoint_at,
        expected_version,
        [u.turn_id for u in updates],
        [u.seq for u in updates],
        [u.content for u in updates],
        [u.segment for u in updates],
        [u.partial for u in updates],
        [u.captured for u in updates],
        [t.seq for t in inserts],
        [t.segment for t in inserts],
        [t.partial for t in inserts],
        [t.captured for t in inserts],
        [t.role for t in inserts],
        [t.content for t in inserts],
        [t.spoken_at for t in inserts],
        [stored_specifics(u.specifics, u.content) for u in updates],
        [stored_specifics(t.specifics, t.content) for t in inserts],
        live_key,
        [u.interrupted for u in updates],
        [t.interrupted for t in inserts],
        [u.language for u in updates],
        [stored_language_terms(u.language_terms, u.content, u.language) for u in updates],
        [t.language for t in inserts],
        [stored_language_terms(t.language_terms, t.content, t.language) for t in inserts],
    ]


class PostgresConversations(PostgresFullText, SharedConversations):
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

    async def calls_with_agent_to_stop(self) -> list[CallRecord]:
        rows = await self._all("SELECT * FROM calls WHERE agent_stop_pending ORDER BY started_at")
        return [call_record(r) for r in rows]

    # ---- the call lifecycle's combined steps (`CallStepStore`): one statement each -------------------

    async def call_start_check(self, user_id: int, guild_id: int | None, since: float) -> CallStartCheck:
        row = await self._one(_START_CHECK, user_id, guild_id, since)
        assert row is not None  # the FROM clause always yields one row
        guild = (
            GuildSettings(guild_id=guild_id if guild_id is not None else 0)
            if row["g_guild_id"] is None
            else GuildSettings(guild_id=row["g_guild_id"], **{name: row[f"g_{name}"] for name in _GUILD_NAMES})
        )
        return CallStartCheck(
            guild=guild,
            user=None if row["user_id"] is None else user_record(row),
            open_call_id=row["open_call_id"],
            calls_today=int(row["calls_today"]),
            open_calls=int(row["open_calls"]),
            greeting=greeting_record(row, "gr_"),
            returning=bool(row["returning"]),
        )

    async def begin_call_ending(
        self, call_id: str, from_states: Sequence[CallState], **fields: Any
    ) -> tuple[CallRecord, int] | None:
        _check_call_fields(fields)
        assignments = ", ".join(["state = 'ending'", *(f"{k} = ${i}" for i, k in enumerate(fields, start=3))])
        with self.write_health.write(), _storage_errors():
            row = await self._one(
                f"WITH began AS (UPDATE calls SET {assignments} WHERE call_id = $1 AND state = ANY($2::text[]) "
                "RETURNING *) SELECT began.*, (SELECT generation FROM memory_fences f WHERE f.user_id = began.user_id) "
                "AS fence_generation FROM began",
                call_id,
                list(from_states),
                *(_to_db(v) for v in fields.values()),
            )
        return None if row is None else (call_record(row), int(row["fence_generation"] or 0))

    async def end_call(
        self,
        call_id: str,
        *,
        ended_at: float,
        agent_stop_pending: bool,
        post_call_job: str | None = None,
        not_before: float = 0.0,
    ) -> CallEnd:
        with self.write_health.write(), _storage_errors():
            row = await self._one(_END_CALL, call_id, ended_at, agent_stop_pending, post_call_job, not_before)
        assert row is not None
        return CallEnd(won=bool(row["won"]), turns=int(row["turns"] or 0) if row["won"] else 0)

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

    # ---- chats -----------------------------------------------------------------------------------------

    # ---- turns -----------------------------------------------------------------------------------------

    async def call_turns(self, call_id: str) -> list[TurnRecord]:
        rows = await self._all(f"SELECT {_TURN_COLUMNS} FROM turns WHERE call_id = $1 ORDER BY seq", call_id)
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
        with self.write_health.write(), _storage_errors():
            row = await self._one(
                _APPLY_CALL_TURNS,
                *_apply_params(
                    call_id, user_id, inserts, updates, anchored, checkpoint_at, generation, expected_version, live_key
                ),
            )
        assert row is not None
        if not row["allowed"]:
            return False
        if not row["bumped"] and expected_version is not None:
            raise TurnsChanged(call_id)
        return True

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
        """One transaction: the member's fence row read FOR SHARE, then the call's row locked FOR UPDATE (the
        order every write of a call's turns takes them in), so no other writer of the call comes between the read
        of its lines and the write, and a retried request waits for the first and then finds its key."""
        async with self._tx() as db:
            if not await memory_write_allowed(db, user_id, generation, Conversation("call", call_id)):
                return LiveWrite.REFUSED
            anchored = bool(
                await db.fetchval("SELECT history_anchored FROM calls WHERE call_id = $1 FOR UPDATE", call_id)
            )
            if turn_key is not None and await db.fetchval(
                "SELECT 1 FROM live_turns WHERE call_id = $1 AND turn_key = $2", call_id, turn_key
            ):
                return LiveWrite.SEEN
            rows = await db.fetch(
                f"SELECT {_TURN_COLUMNS} FROM turns WHERE call_id = $1 ORDER BY seq DESC LIMIT $2", call_id, tail
            )
            whole = len(rows) < tail
            write = plan([_turn(r) for r in reversed(rows)], whole, anchored)
            if write is LivePlanNeeds.WHOLE_CALL and not whole:
                rows = await db.fetch(f"SELECT {_TURN_COLUMNS} FROM turns WHERE call_id = $1 ORDER BY seq", call_id)
                write = plan([_turn(r) for r in rows], True, anchored)
            if not isinstance(write, TurnsWrite):
                if write is LivePlanNeeds.WHOLE_CALL:
                    raise AssertionError("a live plan asked for the whole call when it had it")
                if turn_key is not None:
                    await db.execute(
                        "INSERT INTO live_turns (call_id, turn_key) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                        call_id,
                        turn_key,
                    )
                return LiveWrite.UNCHANGED
            params = _apply_params(
                call_id, user_id, write.inserts, write.updates, write.anchored, checkpoint_at, None, None, turn_key
            )
            await db.fetchrow(_APPLY_CALL_TURNS, *params)
        return LiveWrite.WRITTEN

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
        first = await self._first_stage("turns", "turn_id", user_id, query, limit, excluded, language_terms=True)
        if not first:
            return []
        rows = await self._all(f"SELECT {_TURN_COLUMNS} FROM turns WHERE turn_id = ANY($1::bigint[])", list(first))
        found = [(int(r["turn_id"]), token_count(r["content"]), _turn(r)) for r in rows]
        return rerank(first, found, limit)

    async def recent_turns_of(
        self, user_id: int, limit: int, *, exclude_call_id: str | None = None, before: float | None = None
    ) -> list[TurnRecord]:
        until = "" if before is None else "AND spoken_at < $4 "  # a range the (user_id, spoken_at) index seeks to
        rows = await self._all(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE user_id = $1 "
            f"AND (call_id IS NULL OR call_id IS DISTINCT FROM $2) AND content <> '' {until}"
            "ORDER BY spoken_at DESC, seq DESC LIMIT $3",
            user_id,
            exclude_call_id,
            limit,
            *(() if before is None else (before,)),
        )
        return [_turn(r) for r in reversed(rows)]

    async def call_start_memory(self, user_id: int, *, facts: int, lines: int) -> tuple[list[FactRecord], RecentLines]:
        rows = await self._all(_CALL_START_MEMORY, user_id, lines, facts)
        at = next((i for i, row in enumerate(rows) if not row[-1]), len(rows))
        lines_read = rows[:at]
        lines_read.reverse()
        return [fact_record([row[i] for i in _FACT_AT]) for row in rows[at:]], RecentLines(lines_read, turn_record)

    async def turns_at(self, positions: Sequence[tuple[str, int]]) -> list[TurnRecord]:
        if not positions:
            return []
        rows = await self._all(
            f"SELECT {_prefixed(_TURN_COLUMNS, 't')} FROM unnest($1::text[], $2::integer[]) WITH ORDINALITY "
            "AS p(ref, seq, i) JOIN turns t ON (t.call_id = p.ref OR t.chat_id = p.ref) AND t.seq = p.seq "
            "AND t.content <> '' ORDER BY p.i",
            [ref for ref, _ in positions],
            [seq for _, seq in positions],
        )
        return [_turn(r) for r in rows]

    async def conversation_lengths(self, refs: Sequence[str]) -> dict[str, int]:
        if not refs:
            return {}
        rows = await self._all(
            "SELECT r.ref, coalesce((SELECT max(seq) FROM turns WHERE call_id = r.ref AND content <> ''), "
            "(SELECT max(seq) FROM turns WHERE chat_id = r.ref AND content <> '')) FROM unnest($1::text[]) AS r(ref)",
            list(refs),
        )
        return {ref: seq + 1 for ref, seq in rows if seq is not None}

    async def call_tail(self, call_id: str, limit: int) -> list[TurnRecord]:
        rows = await self._all(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE call_id = $1 ORDER BY seq DESC LIMIT $2", call_id, limit
        )
        return [_turn(r) for r in reversed(rows)]

    async def call_memory_state(self, call_id: str) -> CallMemoryState | None:
        row = await self._one(CALL_MEMORY_STATE, call_id)
        if row is None:
            return None
        return call_memory_state(call_record(row), row)

    # ---- summaries and listings ------------------------------------------------------------------------

    async def list_conversations(self, user_id: int, *, offset: int = 0, limit: int = 10) -> list[ConversationSummary]:
        rows = await self._all(
            "SELECT u.*, "
            "  (SELECT COUNT(*) FROM turns t WHERE (u.kind = 'call' AND t.call_id = u.ref_id) "
            "     OR (u.kind = 'chat' AND t.chat_id = u.ref_id)) AS turn_count, "
            "  ARRAY(SELECT t.content FROM turns t WHERE ((u.kind = 'call' AND t.call_id = u.ref_id) "
            "     OR (u.kind = 'chat' AND t.chat_id = u.ref_id)) AND t.role = 'user' ORDER BY t.seq LIMIT 2) "
            f"     AS first_lines FROM {LISTED_CONVERSATIONS} ORDER BY started_at DESC LIMIT $2 OFFSET $3",
            user_id,
            limit,
            offset,
        )
        return [summary_of(r, turn_count=int(r["turn_count"]), first_lines=r["first_lines"]) for r in rows]
