"""The PostgreSQL backend (asyncpg with a connection pool), selected by `memory.database_url = "postgresql://…"`.

It implements the same `Store` protocol as the SQLite backend and is tested by the same tests (see
tests/store). Several bot processes may share one database: call transitions are conditional UPDATEs and the job
queue is claimed with `FOR UPDATE SKIP LOCKED`, so two processes never take the same job.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from bot.store.columns import CALL_COLUMNS as _CALL_COLUMNS
from bot.store.columns import CHAT_COLUMNS as _CHAT_COLUMNS
from bot.store.columns import FACT_COLUMNS as _FACT_COLUMNS
from bot.store.columns import GUILD_SETTING_NAMES as _GUILD_SETTING_NAMES
from bot.store.columns import TURN_COLUMNS as _TURN_COLUMNS
from bot.store.columns import check_call_fields as _check_call_fields
from bot.store.export import build_export
from bot.store.models import (
    CallRecord,
    CallState,
    ChatRecord,
    Conversation,
    ConversationSummary,
    FactRecord,
    ForgetResult,
    GuildSettings,
    Job,
    NewTurn,
    TurnRecord,
    TurnUpdate,
    UserRecord,
)
from bot.store.pg_migrations import PG_LATEST_VERSION, PG_MIGRATIONS
from bot.store.ranking import WORD, first_stage, fts_terms, rerank
from bot.store.repository import NOTICE_KEEP_SECONDS, OpenCallExists, SchemaTooNew, TurnsChanged

_OPEN = "('starting', 'active', 'ending')"
# Serialises migrations when several processes start at once on an empty database.
_MIGRATION_LOCK = 0x6D656D6F7279

Connection: TypeAlias = "PoolConnectionProxy[asyncpg.Record]"


def _prefixed(columns: str, alias: str) -> str:
    return ", ".join(f"{alias}.{c.strip()}" for c in columns.split(","))


def _count(status: str) -> int:
    """Rows changed, from a command status such as 'UPDATE 3' or 'INSERT 0 1'."""
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0


class PostgresStore:
    def __init__(self, url: str, *, min_connections: int = 2, max_connections: int = 10):
        self.url = url
        self._min = min_connections
        self._max = max_connections
        self._pool: asyncpg.Pool | None = None

    def __repr__(self) -> str:  # never show a password from the URL
        return f"PostgresStore({re.sub(r'//[^@/]*@', '//***@', self.url)!r})"

    # ---- lifecycle -------------------------------------------------------------------------------------

    async def open(self) -> None:
        pool = await asyncpg.create_pool(self.url, min_size=self._min, max_size=self._max)
        self._pool = pool
        try:
            await self._migrate()
        except BaseException:
            self._pool = None
            await pool.close()
            raise

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("store is not open")
        return self._pool

    async def _migrate(self) -> None:
        async with self.pool.acquire() as db, db.transaction():
            await db.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
            await db.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                "applied_at DOUBLE PRECISION NOT NULL)"
            )
            current = int(await db.fetchval("SELECT COALESCE(MAX(version), 0) FROM schema_migrations"))
            if current > PG_LATEST_VERSION:
                raise SchemaTooNew(
                    f"the PostgreSQL database has schema version {current}, but this bot only knows up to "
                    f"{PG_LATEST_VERSION}: upgrade the bot, or point memory.database_url at another database"
                )
            for version, name, sql in PG_MIGRATIONS:
                if version <= current:
                    continue
                await db.execute(sql)
                await db.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
                    version,
                    name,
                    time.time(),
                )

    async def schema_version(self) -> int:
        return int(await self.pool.fetchval("SELECT COALESCE(MAX(version), 0) FROM schema_migrations"))

    async def ping(self) -> None:
        await self.pool.fetchval("SELECT 1")

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[Connection]:
        async with self.pool.acquire() as db, db.transaction():
            yield db

    async def _all(self, sql: str, *params: Any) -> list[asyncpg.Record]:
        return list(await self.pool.fetch(sql, *params))

    async def _one(self, sql: str, *params: Any) -> asyncpg.Record | None:
        row: asyncpg.Record | None = await self.pool.fetchrow(sql, *params)
        return row

    async def _write(self, sql: str, *params: Any) -> int:
        return _count(await self.pool.execute(sql, *params))

    # ---- users -----------------------------------------------------------------------------------------

    async def get_user(self, user_id: int) -> UserRecord | None:
        row = await self._one("SELECT * FROM users WHERE user_id = $1", user_id)
        return None if row is None else _user(row)

    async def set_consent(self, user_id: int, remember: bool, at: float) -> UserRecord:
        async with self._tx() as db:
            row = await db.fetchrow(
                "INSERT INTO users (user_id, memory_enabled, consent, consent_at, created_at) "
                "VALUES ($1, $2, $3, $4, $4) ON CONFLICT (user_id) DO UPDATE SET consent = excluded.consent, "
                "consent_at = excluded.consent_at, memory_enabled = excluded.memory_enabled RETURNING *",
                user_id,
                remember,
                "remember" if remember else "no_memory",
                at,
            )
            if not remember:
                await _stop_remembering(db, user_id)
        assert row is not None
        return _user(row)

    async def set_memory_enabled(self, user_id: int, enabled: bool, at: float) -> UserRecord:
        async with self._tx() as db:
            row = await db.fetchrow(
                "INSERT INTO users (user_id, memory_enabled, created_at) VALUES ($1, $2, $3) "
                "ON CONFLICT (user_id) DO UPDATE SET memory_enabled = excluded.memory_enabled RETURNING *",
                user_id,
                enabled,
                at,
            )
            if not enabled:
                await _stop_remembering(db, user_id)
        assert row is not None
        return _user(row)

    # ---- guild settings --------------------------------------------------------------------------------

    async def get_guild_settings(self, guild_id: int) -> GuildSettings:
        row = await self._one("SELECT * FROM guild_settings WHERE guild_id = $1", guild_id)
        return GuildSettings(guild_id=guild_id) if row is None else _guild(row)

    async def update_guild_settings(self, guild_id: int, at: float, **changes: Any) -> GuildSettings:
        unknown = set(changes) - _GUILD_SETTING_NAMES
        if unknown:
            raise ValueError(f"unknown guild settings: {sorted(unknown)}")
        names = list(changes)
        columns = ", ".join(["guild_id", "updated_at", *names])
        placeholders = ", ".join(f"${i}" for i in range(1, len(names) + 3))
        updates = ", ".join(["updated_at = excluded.updated_at", *(f"{n} = excluded.{n}" for n in names)])
        row = await self._one(
            f"INSERT INTO guild_settings ({columns}) VALUES ({placeholders}) "
            f"ON CONFLICT (guild_id) DO UPDATE SET {updates} RETURNING *",
            guild_id,
            at,
            *changes.values(),
        )
        assert row is not None
        return _guild(row)

    async def retention_policies(self) -> list[tuple[int, int]]:
        rows = await self._all(
            "SELECT guild_id, retention_days FROM guild_settings WHERE retention_days IS NOT NULL "
            "AND retention_days > 0"
        )
        return [(r[0], r[1]) for r in rows]

    async def delete_guild_settings(self, guild_id: int) -> None:
        await self._write("DELETE FROM guild_settings WHERE guild_id = $1", guild_id)

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
    ) -> bool:
        async with self._tx() as db:
            if not await memory_write_allowed(db, user_id, generation, call_id=call_id):
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
            return True

    async def append_chat_turn(
        self, chat_id: str, user_id: int, role: str, content: str, at: float, *, generation: int | None = None
    ) -> int | None:
        async with self._tx() as db:
            if not await memory_write_allowed(db, user_id, generation, chat_id=chat_id):
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

    async def _first_stage(
        self, table: str, key: str, user_id: int, query: str, limit: int, excluded: Sequence[int]
    ) -> dict[int, float]:
        """One round trip: the member's row count and, per query term, the member's rows holding it."""
        terms = fts_terms(query)
        if not terms:
            return {}
        current = " AND t.superseded_by IS NULL AND t.invalidated_at IS NULL" if table == "facts" else ""
        rows = await self._all(
            f"SELECT 0 AS i, NULL::bigint[] AS ids, (SELECT COUNT(*) FROM {table} WHERE user_id = $1) AS n "
            f"UNION ALL SELECT q.i, array_agg(t.{key}), 0 FROM unnest($2::text[]) WITH ORDINALITY AS q(term, i) "
            f"JOIN {table} t ON t.search @@ (to_tsquery('simple', $3) && phraseto_tsquery('memory', q.term)){current} "
            "GROUP BY q.i",
            user_id,
            terms,
            f"u{int(user_id)}",
        )
        total = next(int(r["n"]) for r in rows if r["i"] == 0)
        postings = [list(r["ids"]) for r in rows if r["i"] != 0 and r["ids"]]
        return first_stage(total, postings, excluded, limit)

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

    # ---- facts and summaries ---------------------------------------------------------------------------

    async def add_fact(
        self, user_id: int, text: str, at: float, *, call_id: str | None = None, chat_id: str | None = None
    ) -> FactRecord:
        async with self._tx() as db:
            row = await db.fetchrow(
                "INSERT INTO facts (user_id, text, source_call_id, source_chat_id, created_at, updated_at, "
                f"confirmed_at) VALUES ($1, $2, $3, $4, $5, $5, $5) RETURNING {_FACT_COLUMNS}",
                user_id,
                text,
                call_id,
                chat_id,
                at,
            )
            assert row is not None
            if call_id or chat_id:
                await db.execute(
                    "INSERT INTO fact_sources (fact_id, call_id, chat_id) VALUES ($1, $2, $3)",
                    row["fact_id"],
                    call_id,
                    chat_id,
                )
        return _fact(row)

    async def confirm_fact(
        self, fact_id: int, at: float, *, call_id: str | None = None, chat_id: str | None = None
    ) -> None:
        async with self._tx() as db:
            await db.execute(
                "UPDATE facts SET mentions = mentions + 1, confirmed_at = $2, updated_at = $2 WHERE fact_id = $1",
                fact_id,
                at,
            )
            if call_id or chat_id:
                await db.execute(
                    "INSERT INTO fact_sources (fact_id, call_id, chat_id) VALUES ($1, $2, $3)",
                    fact_id,
                    call_id,
                    chat_id,
                )

    async def supersede_fact(self, old_fact_id: int, new_fact_id: int, at: float) -> None:
        await self._write(
            "UPDATE facts SET superseded_by = $2, invalidated_at = $3, updated_at = $3 WHERE fact_id = $1",
            old_fact_id,
            new_fact_id,
            at,
        )

    async def get_fact(self, fact_id: int) -> FactRecord | None:
        row = await self._one(f"SELECT {_FACT_COLUMNS} FROM facts WHERE fact_id = $1", fact_id)
        return None if row is None else _fact(row)

    async def list_facts(
        self,
        user_id: int,
        *,
        include_superseded: bool = False,
        superseded_only: bool = False,
        offset: int = 0,
        limit: int = 100,
    ) -> list[FactRecord]:
        if superseded_only:
            where = "AND (superseded_by IS NOT NULL OR invalidated_at IS NOT NULL)"
        elif include_superseded:
            where = ""
        else:
            where = "AND superseded_by IS NULL AND invalidated_at IS NULL"
        rows = await self._all(
            f"SELECT {_FACT_COLUMNS} FROM facts WHERE user_id = $1 {where} "
            "ORDER BY (superseded_by IS NOT NULL OR invalidated_at IS NOT NULL), confirmed_at DESC, mentions DESC, "
            "fact_id DESC LIMIT $2 OFFSET $3",
            user_id,
            limit,
            offset,
        )
        return [_fact(r) for r in rows]

    async def count_facts(self, user_id: int, *, include_superseded: bool = False) -> int:
        where = "" if include_superseded else "AND superseded_by IS NULL AND invalidated_at IS NULL"
        return int(await self.pool.fetchval(f"SELECT COUNT(*) FROM facts WHERE user_id = $1 {where}", user_id))

    async def search_facts(self, user_id: int, query: str, limit: int) -> list[FactRecord]:
        return [fact for fact, _ in await self.rank_facts(user_id, query, limit)]

    async def rank_facts(self, user_id: int, query: str, limit: int) -> list[tuple[FactRecord, float]]:
        """The member's current facts matching any word of ``query`` (stemmed), best BM25 first."""
        first = await self._first_stage("facts", "fact_id", user_id, query, limit, ())
        if not first:
            return []
        rows = await self._all(
            f"SELECT {_FACT_COLUMNS} FROM facts WHERE fact_id = ANY($1::bigint[]) "
            "AND superseded_by IS NULL AND invalidated_at IS NULL",
            list(first),
        )
        found = [(int(r["fact_id"]), len(WORD.findall(r["text"])), _fact(r)) for r in rows]
        return rerank(first, found, limit)

    async def facts_from(self, *, call_id: str | None = None, chat_id: str | None = None) -> list[FactRecord]:
        convo = Conversation.of(call_id=call_id, chat_id=chat_id)
        column, ref = convo.column, convo.ref_id
        rows = await self._all(
            f"SELECT DISTINCT {_prefixed(_FACT_COLUMNS, 'f')} FROM fact_sources s "
            f"JOIN facts f ON f.fact_id = s.fact_id WHERE s.{column} = $1 ORDER BY f.fact_id",
            ref,
        )
        return [_fact(r) for r in rows]

    async def set_summary(self, *, call_id: str | None = None, chat_id: str | None = None, text: str) -> None:
        if call_id:
            await self._write("UPDATE calls SET summary = $2 WHERE call_id = $1", call_id, text)
        else:
            await self._write("UPDATE chats SET summary = $2 WHERE chat_id = $1", chat_id, text)

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

    async def count_call_turns(self, call_id: str) -> int:
        return int(await self.pool.fetchval("SELECT COUNT(*) FROM turns WHERE call_id = $1", call_id))

    async def call_tail(self, call_id: str, limit: int) -> list[TurnRecord]:
        rows = await self._all(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE call_id = $1 ORDER BY seq DESC LIMIT $2", call_id, limit
        )
        return [_turn(r) for r in reversed(rows)]

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

    # ---- forgetting, export, retention -----------------------------------------------------------------

    async def forget_fact(
        self,
        user_id: int,
        fact_id: int,
        *,
        turn_ids: Sequence[int] = (),
        summaries: Sequence[tuple[str, str]] = (),
    ) -> FactRecord | None:
        async with self._tx() as db:
            row = await db.fetchrow(
                f"DELETE FROM facts WHERE fact_id = $1 AND user_id = $2 RETURNING {_FACT_COLUMNS}", fact_id, user_id
            )
            if row is None:
                return None
            await _forgotten(db, user_id, time.time())
            await db.execute(
                "DELETE FROM turns WHERE turn_id = ANY($1::bigint[]) AND user_id = $2", list(turn_ids), user_id
            )
            for kind, ref_id in summaries:
                target = Conversation.named(kind, ref_id)
                table, column = target.table, target.column
                await db.execute(
                    f"UPDATE {table} SET summary = NULL WHERE {column} = $1 AND user_id = $2", ref_id, user_id
                )
        return _fact(row)

    async def forget_call(self, user_id: int, call_id: str) -> ForgetResult | None:
        async with self._tx() as db:
            owner = await db.fetchval("SELECT user_id FROM calls WHERE call_id = $1 FOR UPDATE", call_id)
            if owner != user_id:
                return None
            await _forgotten(db, user_id, time.time())
            return await _delete_conversation(db, Conversation("call", call_id))

    async def forget_chat(self, user_id: int, chat_id: str) -> ForgetResult | None:
        async with self._tx() as db:
            owner = await db.fetchval("SELECT user_id FROM chats WHERE chat_id = $1 FOR UPDATE", chat_id)
            if owner != user_id:
                return None
            await _forgotten(db, user_id, time.time())
            return await _delete_conversation(db, Conversation("chat", chat_id))

    async def forget_user(self, user_id: int) -> ForgetResult:
        async with self._tx() as db:
            turns = _count(await db.execute("DELETE FROM turns WHERE user_id = $1", user_id))
            facts = _count(await db.execute("DELETE FROM facts WHERE user_id = $1", user_id))
            calls = _count(
                await db.execute("DELETE FROM calls WHERE user_id = $1 AND state IN ('ended', 'failed')", user_id)
            )
            # An open call keeps its row (the agent must still be stopped) but loses everything it said.
            await db.execute("UPDATE calls SET summary = NULL, private = TRUE WHERE user_id = $1", user_id)
            chats = _count(await db.execute("DELETE FROM chats WHERE user_id = $1", user_id))
            await db.execute("DELETE FROM users WHERE user_id = $1", user_id)
            await _forgotten(db, user_id, time.time())
        return ForgetResult(turns=turns, facts=facts, calls=calls, chats=chats)

    async def scrub(self) -> bool:
        """Reclaim dead rows and index entries of deleted text. What may remain in the data files and WAL until
        PostgreSQL reuses the space is reported by tests/store/test_postgres.py, not hidden."""
        async with self.pool.acquire() as db:
            pending = await db.fetchval("SELECT MAX(scrub_id) FROM pending_scrubs")
            for table in ("turns", "facts", "calls", "chats"):
                await db.execute(f"VACUUM {table}")
            await db.execute("CHECKPOINT")
            if pending is not None:
                await db.execute("DELETE FROM pending_scrubs WHERE scrub_id <= $1", pending)
        return True

    async def pending_scrub(self) -> bool:
        return await self._one("SELECT 1 FROM pending_scrubs LIMIT 1") is not None

    async def memory_generation(self, user_id: int) -> int:
        value = await self.pool.fetchval("SELECT generation FROM memory_fences WHERE user_id = $1", user_id)
        return int(value or 0)

    async def memory_stamp(self, user_id: int) -> tuple[int, int]:
        row = await self.pool.fetchrow(
            "SELECT (SELECT version FROM memory_versions WHERE user_id = $1), "
            "(SELECT generation FROM memory_fences WHERE user_id = $1)",
            user_id,
        )
        return (int(row[0] or 0), int(row[1] or 0)) if row is not None else (0, 0)

    async def export_user(self, user_id: int) -> dict[str, Any]:
        user = await self.get_user(user_id)
        facts = await self._all(f"SELECT {_FACT_COLUMNS} FROM facts WHERE user_id = $1 ORDER BY fact_id", user_id)
        calls = await self._all("SELECT * FROM calls WHERE user_id = $1 ORDER BY started_at", user_id)
        chats = await self._all("SELECT * FROM chats WHERE user_id = $1 ORDER BY started_at", user_id)
        turns = await self._all(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE user_id = $1 ORDER BY spoken_at, seq", user_id
        )
        return build_export(user_id, user, facts=facts, calls=calls, chats=chats, turns=turns)

    async def purge_transcripts(self, *, guild_id: int | None, older_than: float) -> int:
        """Delete turns of finished conversations that started before `older_than` in one server (or DMs)."""
        async with self._tx() as db:
            calls = _count(
                await db.execute(
                    "DELETE FROM turns WHERE call_id IN (SELECT call_id FROM calls WHERE guild_id IS NOT DISTINCT "
                    "FROM $1 AND started_at < $2 AND state IN ('ended', 'failed'))",
                    guild_id,
                    older_than,
                )
            )
            chats = _count(
                await db.execute(
                    "DELETE FROM turns WHERE chat_id IN (SELECT chat_id FROM chats WHERE guild_id IS NOT DISTINCT "
                    "FROM $1 AND started_at < $2 AND ended_at IS NOT NULL)",
                    guild_id,
                    older_than,
                )
            )
            await db.execute(
                "UPDATE calls SET transcript_purged_at = $3 WHERE guild_id IS NOT DISTINCT FROM $1 AND started_at < $2 "
                "AND state IN ('ended', 'failed') AND transcript_purged_at IS NULL",
                guild_id,
                older_than,
                time.time(),
            )
            if calls + chats:
                await db.execute("INSERT INTO pending_scrubs (created_at) VALUES ($1)", time.time())
        return calls + chats

    # ---- jobs ------------------------------------------------------------------------------------------

    async def enqueue_job(self, kind: str, ref_id: str, at: float, *, not_before: float = 0.0) -> bool:
        added = await self._write(
            "INSERT INTO jobs (kind, ref_id, created_at, updated_at, not_before) VALUES ($1, $2, $3, $3, $4) "
            "ON CONFLICT (kind, ref_id) DO NOTHING",
            kind,
            ref_id,
            at,
            not_before,
        )
        return added == 1

    async def expedite_job(self, kind: str, ref_id: str, at: float) -> bool:
        changed = await self._write(
            "UPDATE jobs SET not_before = $3, updated_at = $3 WHERE kind = $1 AND ref_id = $2 AND state = 'pending' "
            "AND not_before > $3",
            kind,
            ref_id,
            at,
        )
        return changed == 1

    async def claim_job(self, at: float, lease_seconds: float) -> Job | None:
        """Take the oldest due job; a 'running' job whose lease ran out (its worker died) is due again. SKIP LOCKED
        lets several processes claim at once without waiting on, or taking, each other's job."""
        row = await self._one(
            "UPDATE jobs SET state = 'running', attempts = attempts + 1, not_before = $2, updated_at = $1 "
            "WHERE job_id = (SELECT job_id FROM jobs WHERE state IN ('pending', 'running') AND not_before <= $1 "
            "ORDER BY job_id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING job_id, kind, ref_id, attempts",
            at,
            at + lease_seconds,
        )
        if row is None:
            return None
        return Job(job_id=row["job_id"], kind=row["kind"], ref_id=row["ref_id"], attempts=row["attempts"])

    async def finish_job(self, job_id: int, at: float) -> None:
        await self._write("UPDATE jobs SET state = 'done', updated_at = $2 WHERE job_id = $1", job_id, at)

    async def fail_job(self, job_id: int, at: float, error: str, *, retry_at: float | None) -> None:
        if retry_at is None:
            await self._write(
                "UPDATE jobs SET state = 'failed', last_error = $2, updated_at = $3 WHERE job_id = $1",
                job_id,
                error[:500],
                at,
            )
        else:
            await self._write(
                "UPDATE jobs SET state = 'pending', last_error = $2, not_before = $4, updated_at = $3 "
                "WHERE job_id = $1",
                job_id,
                error[:500],
                at,
                retry_at,
            )

    async def job_queue(self) -> tuple[int, float | None]:
        """Jobs waiting or running, and the creation time of the oldest of them (None when there are none)."""
        row = await self._one("SELECT COUNT(*), MIN(created_at) FROM jobs WHERE state IN ('pending', 'running')")
        if row is None:
            return 0, None
        return int(row[0]), None if row[1] is None else float(row[1])

    async def job_state(self, kind: str, ref_id: str) -> str | None:
        state = await self.pool.fetchval("SELECT state FROM jobs WHERE kind = $1 AND ref_id = $2", kind, ref_id)
        return None if state is None else str(state)

    # ---- notices and meta ------------------------------------------------------------------------------

    async def notice_seen(self, notice_id: str) -> bool:
        return await self._one("SELECT 1 FROM notices WHERE notice_id = $1", notice_id) is not None

    async def remember_notice(self, notice_id: str, at: float) -> bool:
        async with self._tx() as db:
            status = await db.execute(
                "INSERT INTO notices (notice_id, received_at) VALUES ($1, $2) ON CONFLICT (notice_id) DO NOTHING",
                notice_id,
                at,
            )
            await db.execute("DELETE FROM notices WHERE received_at < $1", at - NOTICE_KEEP_SECONDS)
            return _count(status) == 1

    async def get_meta(self, key: str) -> str | None:
        value = await self.pool.fetchval("SELECT value FROM meta WHERE key = $1", key)
        return None if value is None else str(value)

    async def set_meta(self, key: str, value: str) -> None:
        await self._write(
            "INSERT INTO meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            key,
            value,
        )

    # ---- post-call extraction results ------------------------------------------------------------------

    async def apply_extraction(
        self,
        job_id: int,
        attempt: int,
        user_id: int,
        at: float,
        *,
        call_id: str | None = None,
        chat_id: str | None = None,
        new_facts: Sequence[tuple[str, Sequence[int]]] = (),
        confirmed: Sequence[int] = (),
        summary: str | None = None,
        generation: int | None = None,
    ) -> int | None:
        convo = Conversation.of(call_id=call_id, chat_id=chat_id)
        column, ref = convo.column, convo.ref_id
        table = convo.table
        current = "user_id = $3 AND superseded_by IS NULL AND invalidated_at IS NULL"
        async with self._tx() as db:
            status = await db.execute(
                "UPDATE jobs SET state = 'done', updated_at = $1 WHERE job_id = $2 AND state = 'running' "
                "AND attempts = $3",
                at,
                job_id,
                attempt,
            )
            if _count(status) != 1:
                return None
            if not await memory_write_allowed(db, user_id, generation, call_id=call_id, chat_id=chat_id):
                return 0
            for fact_id in dict.fromkeys(confirmed):
                status = await db.execute(
                    "UPDATE facts SET mentions = mentions + 1, confirmed_at = GREATEST(confirmed_at, $2), "
                    f"updated_at = $2 WHERE fact_id = $1 AND {current}",
                    fact_id,
                    at,
                    user_id,
                )
                if _count(status) == 1:
                    await db.execute(
                        f"INSERT INTO fact_sources (fact_id, {column}) SELECT $1, $2 WHERE NOT EXISTS "
                        f"(SELECT 1 FROM fact_sources WHERE fact_id = $1 AND {column} = $2)",
                        fact_id,
                        ref,
                    )
            for text, replaces in new_facts:
                new_id = await db.fetchval(
                    f"INSERT INTO facts (user_id, text, source_{column}, created_at, updated_at, confirmed_at) "
                    "VALUES ($1, $2, $3, $4, $4, $4) RETURNING fact_id",
                    user_id,
                    text,
                    ref,
                    at,
                )
                await db.execute(f"INSERT INTO fact_sources (fact_id, {column}) VALUES ($1, $2)", new_id, ref)
                for old_id in dict.fromkeys(replaces):
                    await db.execute(
                        "UPDATE facts SET superseded_by = $2, invalidated_at = $4, updated_at = $4 "
                        f"WHERE fact_id = $1 AND fact_id != $2 AND {current}",
                        old_id,
                        new_id,
                        user_id,
                        at,
                    )
            if summary is not None:
                await db.execute(f"UPDATE {table} SET summary = $2 WHERE {column} = $1", ref, summary)
            return int(await db.fetchval(f"SELECT COUNT(DISTINCT fact_id) FROM fact_sources WHERE {column} = $1", ref))


# ---- helpers ---------------------------------------------------------------------------------------------


async def memory_write_allowed(
    db: Connection,
    user_id: int,
    generation: int | None,
    *,
    call_id: str | None = None,
    chat_id: str | None = None,
) -> bool:
    """The fence every write of a member's memory passes, inside the write's own transaction (as on SQLite: see
    `bot.store.sqlite.memory_write_allowed`). The member's fence row is read FOR SHARE, so a forget or pause that
    bumps it waits for this write to commit, or this write sees the new generation."""
    if generation is not None:
        current = await db.fetchval("SELECT generation FROM memory_fences WHERE user_id = $1 FOR SHARE", user_id)
        if int(current or 0) != generation:
            return False
    if await db.fetchval("SELECT 1 FROM users WHERE user_id = $1 AND NOT memory_enabled", user_id) is not None:
        return False
    if call_id is not None or chat_id is not None:
        convo = Conversation.of(call_id=call_id, chat_id=chat_id)
        column, ref = convo.column, convo.ref_id
        table = convo.table
        purged = " AND transcript_purged_at IS NULL" if call_id else ""
        row = await db.fetchval(
            f"SELECT 1 FROM {table} WHERE {column} = $1 AND user_id = $2 AND NOT private{purged}", ref, user_id
        )
        if row is None:
            return False
    return True


async def _bump_generation(db: Connection, user_id: int) -> None:
    await db.execute(
        "INSERT INTO memory_fences (user_id, generation) VALUES ($1, 1) "
        "ON CONFLICT (user_id) DO UPDATE SET generation = memory_fences.generation + 1",
        user_id,
    )


async def _forgotten(db: Connection, user_id: int, at: float) -> None:
    """In a deleting transaction: fence off writes that started before it, and record the scrub it needs."""
    await _bump_generation(db, user_id)
    await db.execute("INSERT INTO pending_scrubs (created_at) VALUES ($1)", at)


async def _stop_remembering(db: Connection, user_id: int) -> None:
    """Memory paused (or "without memory" chosen): a running call stops being recorded at once."""
    await _bump_generation(db, user_id)
    await db.execute(f"UPDATE calls SET private = TRUE WHERE user_id = $1 AND state IN {_OPEN}", user_id)


async def _delete_conversation(db: Connection, convo: Conversation) -> ForgetResult:
    """Delete a call or chat, its turns and summary, and the facts that came only from it."""
    column, ref = convo.column, convo.ref_id
    facts = _count(
        await db.execute(
            "DELETE FROM facts WHERE fact_id IN ("
            f"  SELECT fact_id FROM fact_sources WHERE {column} = $1 "
            f"  EXCEPT SELECT fact_id FROM fact_sources WHERE {column} IS NULL OR {column} != $1 "
            f"  UNION SELECT fact_id FROM facts WHERE source_{column} = $1 "
            "     AND fact_id NOT IN (SELECT fact_id FROM fact_sources))",
            ref,
        )
    )
    turns = _count(await db.execute(f"DELETE FROM turns WHERE {column} = $1", ref))
    removed = _count(await db.execute(f"DELETE FROM {convo.table} WHERE {column} = $1", ref))
    return ForgetResult(
        turns=turns,
        facts=facts,
        calls=removed if convo.kind == "call" else 0,
        chats=removed if convo.kind == "chat" else 0,
    )


def _to_db(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(value)
    return value


def _user(row: asyncpg.Record) -> UserRecord:
    return UserRecord(
        user_id=row["user_id"],
        memory_enabled=row["memory_enabled"],
        consent=row["consent"],
        consent_at=row["consent_at"],
        created_at=row["created_at"],
    )


def _guild(row: asyncpg.Record) -> GuildSettings:
    return GuildSettings(**{name: row[name] for name in ("guild_id", *sorted(_GUILD_SETTING_NAMES))})


def _call(row: asyncpg.Record) -> CallRecord:
    return CallRecord(**{name: row[name] for name in _CALL_COLUMNS})


def _chat(row: asyncpg.Record) -> ChatRecord:
    return ChatRecord(**{name: row[name] for name in _CHAT_COLUMNS})


def _turn(row: asyncpg.Record) -> TurnRecord:
    return TurnRecord(**{name.strip(): row[name.strip()] for name in _TURN_COLUMNS.split(",")})


def _fact(row: asyncpg.Record) -> FactRecord:
    return FactRecord(**{name.strip(): row[name.strip()] for name in _FACT_COLUMNS.split(",")})
