"""The embedded SQLite backend (aiosqlite): one file, WAL mode, foreign keys and secure_delete on.

One connection serves the process; an asyncio lock makes every operation (and every transaction) run alone,
so coroutines never see each other's half-written state. Conditional UPDATEs make call state transitions safe
across processes sharing the file too.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import aiosqlite

from bot.store.columns import CALL_COLUMNS as _CALL_COLUMNS
from bot.store.columns import CHAT_COLUMNS as _CHAT_COLUMNS
from bot.store.columns import FACT_COLUMNS as _FACT_COLUMNS
from bot.store.columns import GUILD_SETTING_NAMES as _GUILD_SETTING_NAMES
from bot.store.columns import TURN_COLUMNS as _TURN_COLUMNS
from bot.store.columns import check_call_fields as _check_call_fields
from bot.store.export import build_export
from bot.store.migrations import LATEST_VERSION, MIGRATIONS, REPAIRS
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
from bot.store.ranking import first_stage, fts_terms, rerank
from bot.store.repository import NOTICE_KEEP_SECONDS, OpenCallExists, SchemaTooNew, StorageFull, TurnsChanged

SCRUB_BUSY_TIMEOUT_MS = 200
"""How long a scrub waits for another connection's read transaction before it reports "not yet"."""


def fts_query(text: str, max_terms: int = 12) -> str | None:
    """Turn free text into a safe FTS5 OR-query of quoted terms (user text never reaches FTS syntax)."""
    terms = fts_terms(text, max_terms)
    return " OR ".join(f'"{t}"' for t in terms) if terms else None


def _varint(blob: bytes) -> int:
    """The first SQLite varint of ``blob`` (an FTS5 docsize record starts with the first column's size)."""
    value = 0
    for i, byte in enumerate(blob[:9]):
        if i == 8:
            return (value << 8) | byte
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value
    return value


class SqliteStore:
    def __init__(self, path: Path | str, *, busy_timeout_ms: int = 5000):
        self.path = Path(path)
        self._busy_timeout_ms = busy_timeout_ms
        self._db: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()

    # ---- lifecycle -------------------------------------------------------------------------------------

    async def open(self) -> None:
        if self.path.parent and str(self.path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        db = await aiosqlite.connect(self.path, isolation_level=None)
        db.row_factory = aiosqlite.Row
        try:
            for pragma in (
                f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}",
                "PRAGMA journal_mode = WAL",
                "PRAGMA foreign_keys = ON",
                "PRAGMA secure_delete = ON",
                "PRAGMA synchronous = NORMAL",
            ):
                async with db.execute(pragma):
                    pass  # some pragmas return a row; closing the cursor ends the statement
            self._db = db
            await self._migrate()
        except BaseException:
            self._db = None
            await db.close()
            raise

    async def close(self) -> None:
        if self._db is not None:
            async with self._lock:
                await self._db.close()
                self._db = None

    @staticmethod
    def _now() -> float:
        return time.time()

    @property
    def db(self) -> aiosqlite.Connection:
        if self._db is None:
            raise RuntimeError("store is not open")
        return self._db

    async def _migrate(self) -> None:
        await self.db.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
            "applied_at REAL NOT NULL)"
        )
        current = await self.schema_version()
        if current > LATEST_VERSION:
            raise SchemaTooNew(
                f"the database {self.path} has schema version {current}, but this bot only knows up to "
                f"{LATEST_VERSION}: upgrade the bot, or point memory.database_path at another file"
            )
        for version, name, sql in MIGRATIONS:
            if version <= current:
                continue
            async with self._transaction():
                for needed, repair in REPAIRS.get(version, []):
                    if list(await self.db.execute_fetchall(needed)):
                        for statement in _split_sql(repair):
                            await self.db.execute(statement)
                for statement in _split_sql(sql):
                    await self.db.execute(statement)
                await self.db.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (version, name, time.time()),
                )

    async def schema_version(self) -> int:
        async with self.db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations") as cur:
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def ping(self) -> None:
        async with self._lock, self.db.execute("SELECT 1") as cur:
            await cur.fetchone()

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        with _storage_errors():
            await self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                if self.db.in_transaction:  # SQLite may already have rolled back (e.g. on a full disk)
                    await self.db.execute("ROLLBACK")
                raise
            else:
                await self.db.execute("COMMIT")

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[aiosqlite.Connection]:
        async with self._lock, self._transaction() as db:
            yield db

    async def _all(self, sql: str, params: Iterable[Any] = ()) -> list[aiosqlite.Row]:
        """One round trip to the database thread (execute, fetch and close together)."""
        async with self._lock:
            return list(await self.db.execute_fetchall(sql, tuple(params)))

    async def _write(self, sql: str, params: Iterable[Any] = ()) -> int:
        """A single-statement write: atomic on its own, so no explicit transaction; returns the rows changed."""
        with _storage_errors():
            async with self._lock, self.db.execute(sql, tuple(params)) as cur:
                return max(cur.rowcount, 0)

    async def _one(self, sql: str, params: Iterable[Any] = ()) -> aiosqlite.Row | None:
        rows = await self._all(sql, params)
        return rows[0] if rows else None

    async def _scalar(self, sql: str, params: Iterable[Any] = ()) -> Any:
        row = await self._one(sql, params)
        return None if row is None else row[0]

    # ---- users -----------------------------------------------------------------------------------------

    async def get_user(self, user_id: int) -> UserRecord | None:
        row = await self._one("SELECT * FROM users WHERE user_id = ?", (user_id,))
        return None if row is None else _user(row)

    async def set_consent(self, user_id: int, remember: bool, at: float) -> UserRecord:
        consent = "remember" if remember else "no_memory"
        async with self._tx() as db:
            await db.execute(
                "INSERT INTO users (user_id, memory_enabled, consent, consent_at, created_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (user_id) DO UPDATE SET consent = excluded.consent, consent_at = excluded.consent_at, "
                "memory_enabled = excluded.memory_enabled",
                (user_id, int(remember), consent, at, at),
            )
            if not remember:
                await _stop_remembering(db, user_id)
        user = await self.get_user(user_id)
        assert user is not None
        return user

    async def set_memory_enabled(self, user_id: int, enabled: bool, at: float) -> UserRecord:
        async with self._tx() as db:
            await db.execute(
                "INSERT INTO users (user_id, memory_enabled, created_at) VALUES (?, ?, ?) "
                "ON CONFLICT (user_id) DO UPDATE SET memory_enabled = excluded.memory_enabled",
                (user_id, int(enabled), at),
            )
            if not enabled:
                await _stop_remembering(db, user_id)
        user = await self.get_user(user_id)
        assert user is not None
        return user

    # ---- guild settings --------------------------------------------------------------------------------

    async def get_guild_settings(self, guild_id: int) -> GuildSettings:
        row = await self._one("SELECT * FROM guild_settings WHERE guild_id = ?", (guild_id,))
        if row is None:
            return GuildSettings(guild_id=guild_id)
        return GuildSettings(
            guild_id=guild_id,
            calls_enabled=bool(row["calls_enabled"]),
            persona=row["persona"],
            greeting=row["greeting"],
            max_call_minutes=row["max_call_minutes"],
            calls_per_member_per_day=row["calls_per_member_per_day"],
            retention_days=row["retention_days"],
        )

    async def update_guild_settings(self, guild_id: int, at: float, **changes: Any) -> GuildSettings:
        unknown = set(changes) - _GUILD_SETTING_NAMES
        if unknown:
            raise ValueError(f"unknown guild settings: {sorted(unknown)}")
        async with self._tx() as db:
            await db.execute(
                "INSERT INTO guild_settings (guild_id, updated_at) VALUES (?, ?) ON CONFLICT (guild_id) DO NOTHING",
                (guild_id, at),
            )
            if changes:
                assignments = ", ".join(f"{name} = ?" for name in changes)
                values = [int(v) if isinstance(v, bool) else v for v in changes.values()]
                await db.execute(
                    f"UPDATE guild_settings SET {assignments}, updated_at = ? WHERE guild_id = ?",
                    (*values, at, guild_id),
                )
        return await self.get_guild_settings(guild_id)

    async def retention_policies(self) -> list[tuple[int, int]]:
        rows = await self._all(
            "SELECT guild_id, retention_days FROM guild_settings WHERE retention_days IS NOT NULL "
            "AND retention_days > 0"
        )
        return [(r[0], r[1]) for r in rows]

    async def delete_guild_settings(self, guild_id: int) -> None:
        async with self._tx() as db:
            await db.execute("DELETE FROM guild_settings WHERE guild_id = ?", (guild_id,))

    # ---- calls -----------------------------------------------------------------------------------------

    async def create_call(self, call: CallRecord) -> None:
        values = [_to_db(getattr(call, name)) for name in _CALL_COLUMNS]
        try:
            async with self._tx() as db:
                await db.execute(
                    f"INSERT INTO calls ({', '.join(_CALL_COLUMNS)}) VALUES ({', '.join('?' * len(_CALL_COLUMNS))})",
                    values,
                )
        except sqlite3.IntegrityError as exc:
            if "calls.user_id" in str(exc):
                raise OpenCallExists(call.user_id) from exc
            raise

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

    async def count_calls_since(self, user_id: int, guild_id: int | None, since: float) -> int:
        return int(
            await self._scalar(
                "SELECT COUNT(*) FROM calls WHERE user_id = ? AND guild_id IS ? AND started_at >= ? "
                "AND state != 'failed'",
                (user_id, guild_id, since),
            )
        )

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
        rows = await self._all(f"SELECT {_TURN_COLUMNS} FROM turns WHERE call_id = ? ORDER BY seq", (call_id,))
        return [_turn(r) for r in rows]

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
    ) -> bool:
        async with self._tx() as db:
            if not await memory_write_allowed(db, user_id, generation, call_id=call_id):
                return False
            cur = await db.execute(
                "UPDATE calls SET history_anchored = MAX(history_anchored, ?), last_checkpoint_at = ?, "
                "turns_version = turns_version + 1 WHERE call_id = ? AND (? IS NULL OR turns_version = ?)",
                (int(anchored), checkpoint_at, call_id, expected_version, expected_version),
            )
            if cur.rowcount != 1 and expected_version is not None:
                raise TurnsChanged(call_id)
            if updates:
                await db.executemany(
                    "UPDATE turns SET seq = ?, content = ?, segment = ?, partial = ?, captured = ? "
                    "WHERE turn_id = ? AND call_id = ?",
                    [(u.seq, u.content, u.segment, int(u.partial), u.captured, u.turn_id, call_id) for u in updates],
                )
            if inserts:
                await db.executemany(
                    "INSERT INTO turns (user_id, call_id, seq, segment, partial, captured, role, content, spoken_at, "
                    "source) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'voice')",
                    [
                        (
                            user_id,
                            call_id,
                            t.seq,
                            t.segment,
                            int(t.partial),
                            t.captured,
                            t.role,
                            t.content,
                            t.spoken_at,
                        )
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
            cur = await db.execute(
                "INSERT INTO turns (user_id, chat_id, seq, role, content, spoken_at, source) "
                "VALUES (?, ?, (SELECT COALESCE(MAX(seq), -1) + 1 FROM turns WHERE chat_id = ?), ?, ?, ?, 'text')",
                (user_id, chat_id, chat_id, role, content, at),
            )
            await db.execute("UPDATE chats SET last_message_at = ? WHERE chat_id = ?", (at, chat_id))
            return int(cur.lastrowid or 0)

    async def recent_turns(self, user_id: int, limit: int) -> list[TurnRecord]:
        rows = await self._all(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE user_id = ? ORDER BY spoken_at DESC, seq DESC LIMIT ?",
            (user_id, limit),
        )
        return [_turn(r) for r in reversed(rows)]

    async def turns_around(self, turn: TurnRecord, *, before: int, after: int) -> list[TurnRecord]:
        convo = Conversation.of_turn(turn)
        column, ref = convo.column, convo.ref_id
        rows = await self._all(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE {column} = ? AND seq BETWEEN ? AND ? ORDER BY seq",
            (ref, turn.seq - before, turn.seq + after),
        )
        return [_turn(r) for r in rows]

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

    async def _bm25(
        self,
        table: str,
        column: str,
        user_id: int,
        query: str,
        limit: int,
        *,
        records: str,
        excluded: tuple[str, Any] | None = None,
    ) -> list[tuple[aiosqlite.Row, float]]:
        """Okapi BM25 of ``query`` over one member's rows of an FTS5 table, best ``limit`` first, in two round
        trips to SQLite.

        FTS5's own bm25() counts each term's documents over the whole table (every member's lines) on every
        query, which costs tens of milliseconds on a large database; here the counts come from the member's own
        rows: one indexed lookup per query term (stemmed by the table's tokenizer) gives the rows holding it,
        as one comma-separated list per term (far cheaper than a result row per posting); ``excluded`` ("table
        WHERE ...", parameter) names rowids to leave out. Term frequency is taken as 1 (lines are short). Rows
        are first ordered by the sum of their terms' IDF; the best ``RERANK_DEPTH * limit`` are then read with
        ``records`` (a SELECT over json_each(?) of rowids whose last column is the FTS docsize record), scored
        with the length normalisation, and the best ``limit`` returned with their score."""
        terms = fts_terms(query)
        if not terms:
            return []
        owner = f"owner_key:u{int(user_id)}"
        selects = [f"SELECT -1, COUNT(*) FROM {table} WHERE {table} MATCH ?"]
        selects += [f"SELECT {i}, group_concat(rowid) FROM {table} WHERE {table} MATCH ?" for i in range(len(terms))]
        params: list[Any] = [owner, *(f'{owner} AND {column}:"{term}"' for term in terms)]
        if excluded is not None:
            selects.append(f"SELECT -2, group_concat(rowid) FROM {excluded[0]}")
            params.append(excluded[1])
        rows = await self._all(" UNION ALL ".join(selects), params)
        total = next(int(r[1]) for r in rows if r[0] == -1)
        postings = [list(map(int, r[1].split(","))) for r in rows if r[0] >= 0 and r[1]]
        excluded_ids = [rowid for r in rows if r[0] == -2 and r[1] for rowid in map(int, r[1].split(","))]
        first = first_stage(total, postings, excluded_ids, limit)
        if not first:
            return []
        found = await self._all(records, (json.dumps(list(first)),))
        return rerank(first, [(int(r[0]), _varint(r[-1]), r) for r in found], limit)

    async def recent_turns_of(
        self, user_id: int, limit: int, *, exclude_call_id: str | None = None
    ) -> list[TurnRecord]:
        """Like ``recent_turns``, leaving out the lines of ``exclude_call_id``."""
        rows = await self._all(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE user_id = ? AND (call_id IS NULL OR call_id IS NOT ?) "
            "ORDER BY spoken_at DESC, seq DESC LIMIT ?",
            (user_id, exclude_call_id, limit),
        )
        return [_turn(r) for r in reversed(rows)]

    async def turns_at(self, positions: Sequence[tuple[str, int]]) -> list[TurnRecord]:
        """The lines at (conversation id, seq) positions, where the id is a call's or a chat's; missing ones are
        skipped. One indexed lookup per position."""
        if not positions:
            return []
        lookups = " UNION ALL ".join(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE call_id = ? AND seq = ? UNION ALL "
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE chat_id = ? AND seq = ?"
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

    # ---- facts and summaries ---------------------------------------------------------------------------

    async def add_fact(
        self, user_id: int, text: str, at: float, *, call_id: str | None = None, chat_id: str | None = None
    ) -> FactRecord:
        async with self._tx() as db:
            cur = await db.execute(
                "INSERT INTO facts (user_id, text, source_call_id, source_chat_id, created_at, updated_at, "
                "confirmed_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (user_id, text, call_id, chat_id, at, at, at),
            )
            fact_id = int(cur.lastrowid or 0)
            if call_id or chat_id:
                await db.execute(
                    "INSERT INTO fact_sources (fact_id, call_id, chat_id) VALUES (?, ?, ?)",
                    (fact_id, call_id, chat_id),
                )
        fact = await self.get_fact(fact_id)
        assert fact is not None
        return fact

    async def confirm_fact(
        self, fact_id: int, at: float, *, call_id: str | None = None, chat_id: str | None = None
    ) -> None:
        async with self._tx() as db:
            await db.execute(
                "UPDATE facts SET mentions = mentions + 1, confirmed_at = ?, updated_at = ? WHERE fact_id = ?",
                (at, at, fact_id),
            )
            if call_id or chat_id:
                await db.execute(
                    "INSERT INTO fact_sources (fact_id, call_id, chat_id) VALUES (?, ?, ?)",
                    (fact_id, call_id, chat_id),
                )

    async def supersede_fact(self, old_fact_id: int, new_fact_id: int, at: float) -> None:
        async with self._tx() as db:
            await db.execute(
                "UPDATE facts SET superseded_by = ?, invalidated_at = ?, updated_at = ? WHERE fact_id = ?",
                (new_fact_id, at, at, old_fact_id),
            )

    async def get_fact(self, fact_id: int) -> FactRecord | None:
        row = await self._one(f"SELECT {_FACT_COLUMNS} FROM facts WHERE fact_id = ?", (fact_id,))
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
            f"SELECT {_FACT_COLUMNS} FROM facts WHERE user_id = ? {where} "
            "ORDER BY (superseded_by IS NOT NULL OR invalidated_at IS NOT NULL), confirmed_at DESC, mentions DESC, "
            "fact_id DESC LIMIT ? OFFSET ?",
            (user_id, limit, offset),
        )
        return [_fact(r) for r in rows]

    async def count_facts(self, user_id: int, *, include_superseded: bool = False) -> int:
        where = "" if include_superseded else "AND superseded_by IS NULL AND invalidated_at IS NULL"
        return int(await self._scalar(f"SELECT COUNT(*) FROM facts WHERE user_id = ? {where}", (user_id,)))

    async def search_facts(self, user_id: int, query: str, limit: int) -> list[FactRecord]:
        return [fact for fact, _ in await self.rank_facts(user_id, query, limit)]

    async def rank_facts(self, user_id: int, query: str, limit: int) -> list[tuple[FactRecord, float]]:
        """The member's current facts matching any word of ``query`` (porter-stemmed), best BM25 first."""
        columns = ", ".join("f." + c.strip() for c in _FACT_COLUMNS.split(","))
        ranked = await self._bm25(
            "facts_fts",
            "text",
            user_id,
            query,
            limit,
            records=f"SELECT {columns}, d.sz FROM facts f JOIN facts_fts_docsize d ON d.id = f.fact_id "
            "WHERE f.fact_id IN (SELECT value FROM json_each(?)) "
            "AND f.superseded_by IS NULL AND f.invalidated_at IS NULL",
        )
        return [(FactRecord(*tuple(row)[:-1]), score) for row, score in ranked]

    async def facts_from(self, *, call_id: str | None = None, chat_id: str | None = None) -> list[FactRecord]:
        convo = Conversation.of(call_id=call_id, chat_id=chat_id)
        column, ref = convo.column, convo.ref_id
        rows = await self._all(
            f"SELECT DISTINCT {', '.join('f.' + c.strip() for c in _FACT_COLUMNS.split(','))} FROM fact_sources s "
            f"JOIN facts f ON f.fact_id = s.fact_id WHERE s.{column} = ? ORDER BY f.fact_id",
            (ref,),
        )
        return [_fact(r) for r in rows]

    async def set_summary(self, *, call_id: str | None = None, chat_id: str | None = None, text: str) -> None:
        async with self._tx() as db:
            if call_id:
                await db.execute("UPDATE calls SET summary = ? WHERE call_id = ?", (text, call_id))
            else:
                await db.execute("UPDATE chats SET summary = ? WHERE chat_id = ?", (text, chat_id))

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

    async def count_call_turns(self, call_id: str) -> int:
        return int(await self._scalar("SELECT COUNT(*) FROM turns WHERE call_id = ?", (call_id,)))

    async def call_tail(self, call_id: str, limit: int) -> list[TurnRecord]:
        rows = await self._all(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE call_id = ? ORDER BY seq DESC LIMIT ?", (call_id, limit)
        )
        return [_turn(r) for r in reversed(rows)]

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

    # ---- forgetting, export, retention -----------------------------------------------------------------

    async def forget_fact(
        self,
        user_id: int,
        fact_id: int,
        *,
        turn_ids: Sequence[int] = (),
        summaries: Sequence[tuple[str, str]] = (),
    ) -> FactRecord | None:
        fact = await self.get_fact(fact_id)
        if fact is None or fact.user_id != user_id:
            return None
        async with self._tx() as db:
            await db.execute("DELETE FROM facts WHERE fact_id = ? AND user_id = ?", (fact_id, user_id))
            await _forgotten(db, user_id, self._now())
            await db.executemany(
                "DELETE FROM turns WHERE turn_id = ? AND user_id = ?", [(turn_id, user_id) for turn_id in turn_ids]
            )
            for kind, ref_id in summaries:
                target = Conversation.named(kind, ref_id)
                table, column = target.table, target.column
                await db.execute(
                    f"UPDATE {table} SET summary = NULL WHERE {column} = ? AND user_id = ?", (ref_id, user_id)
                )
        return fact

    async def forget_call(self, user_id: int, call_id: str) -> ForgetResult | None:
        call = await self.get_call(call_id)
        if call is None or call.user_id != user_id:
            return None
        async with self._tx() as db:
            await _forgotten(db, user_id, self._now())
            return await _delete_conversation(db, call_id=call_id)

    async def forget_chat(self, user_id: int, chat_id: str) -> ForgetResult | None:
        chat = await self.get_chat(chat_id)
        if chat is None or chat.user_id != user_id:
            return None
        async with self._tx() as db:
            await _forgotten(db, user_id, self._now())
            return await _delete_conversation(db, chat_id=chat_id)

    async def forget_user(self, user_id: int) -> ForgetResult:
        async with self._tx() as db:
            turns = await _changes(db, "DELETE FROM turns WHERE user_id = ?", (user_id,))
            facts = await _changes(db, "DELETE FROM facts WHERE user_id = ?", (user_id,))
            calls = await _changes(
                db, "DELETE FROM calls WHERE user_id = ? AND state IN ('ended', 'failed')", (user_id,)
            )
            # An open call keeps its row (the agent must still be stopped) but loses everything it said.
            await db.execute("UPDATE calls SET summary = NULL, private = 1 WHERE user_id = ?", (user_id,))
            chats = await _changes(db, "DELETE FROM chats WHERE user_id = ?", (user_id,))
            await db.execute("DELETE FROM users WHERE user_id = ?", (user_id,))
            await _forgotten(db, user_id, self._now())
        return ForgetResult(turns=turns, facts=facts, calls=calls, chats=chats)

    async def scrub(self) -> bool:
        """Optimize the full-text indexes and truncate the write-ahead log. False when another connection's
        read transaction keeps old pages alive (the log cannot be truncated yet): the pending scrub stays
        recorded and the caller tries again later. The scrub record is removed only after a complete scrub."""
        async with self._lock:
            pending = await self._locked_scalar("SELECT MAX(scrub_id) FROM pending_scrubs")
            for statement in (
                "INSERT INTO turns_fts (turns_fts) VALUES ('optimize')",
                "INSERT INTO facts_fts (facts_fts) VALUES ('optimize')",
            ):
                async with self.db.execute(statement):
                    pass
            if not await self._truncate_wal():
                return False
            if pending is not None:
                async with self.db.execute("DELETE FROM pending_scrubs WHERE scrub_id <= ?", (pending,)):
                    pass
                await self._truncate_wal()  # the log now holds only that deletion
            return True

    async def _truncate_wal(self) -> bool:
        """Checkpoint and truncate the log, waiting only briefly for readers (the whole store waits meanwhile)."""
        async with self.db.execute(f"PRAGMA busy_timeout = {SCRUB_BUSY_TIMEOUT_MS}"):
            pass
        try:
            # returns a row: its cursor must be closed, or COMMITs fail
            async with self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)") as cur:
                row = await cur.fetchone()
        finally:
            async with self.db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}"):
                pass
        return row is not None and int(row[0]) == 0

    async def _locked_scalar(self, sql: str, params: Iterable[Any] = ()) -> Any:
        rows = list(await self.db.execute_fetchall(sql, tuple(params)))
        return rows[0][0] if rows else None

    async def pending_scrub(self) -> bool:
        return await self._one("SELECT 1 FROM pending_scrubs LIMIT 1") is not None

    async def memory_generation(self, user_id: int) -> int:
        value = await self._scalar("SELECT generation FROM memory_fences WHERE user_id = ?", (user_id,))
        return int(value or 0)

    async def memory_stamp(self, user_id: int) -> tuple[int, int]:
        row = await self._one(
            "SELECT (SELECT version FROM memory_versions WHERE user_id = ?), "
            "(SELECT generation FROM memory_fences WHERE user_id = ?)",
            (user_id, user_id),
        )
        return (int(row[0] or 0), int(row[1] or 0)) if row is not None else (0, 0)

    async def reseal_texts(self, reseal: Callable[[int, str, str], Awaitable[str | None]]) -> int:
        """Rewrites every member text (turns, facts, call and chat summaries) through ``reseal(user_id, column,
        value)``, in one transaction; None leaves a value as it is. Returns how many values changed. This is how
        an existing database is encrypted in place (``bot.keys.encrypted``); the full-text triggers reindex
        each changed row."""
        sources = (
            ("turns", "turn_id", "content", "turns.content"),
            ("facts", "fact_id", "text", "facts.text"),
            ("calls", "call_id", "summary", "calls.summary"),
            ("chats", "chat_id", "summary", "chats.summary"),
        )
        changed = 0
        async with self._tx() as db:
            for table, key, column, name in sources:
                rows = await db.execute_fetchall(
                    f"SELECT {key}, user_id, {column} FROM {table} WHERE {column} IS NOT NULL"
                )
                updates = []
                for row in rows:
                    new = await reseal(int(row[1]), name, str(row[2]))
                    if new is not None:
                        updates.append((new, row[0]))
                await db.executemany(f"UPDATE {table} SET {column} = ? WHERE {key} = ?", updates)
                changed += len(updates)
        return changed

    async def export_user(self, user_id: int) -> dict[str, Any]:
        user = await self.get_user(user_id)
        facts = await self._all(f"SELECT {_FACT_COLUMNS} FROM facts WHERE user_id = ? ORDER BY fact_id", (user_id,))
        calls = await self._all("SELECT * FROM calls WHERE user_id = ? ORDER BY started_at", (user_id,))
        chats = await self._all("SELECT * FROM chats WHERE user_id = ? ORDER BY started_at", (user_id,))
        turns = await self._all(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE user_id = ? ORDER BY spoken_at, seq", (user_id,)
        )
        return build_export(user_id, user, facts=facts, calls=calls, chats=chats, turns=turns)

    async def purge_transcripts(self, *, guild_id: int | None, older_than: float) -> int:
        """Delete turns of finished conversations that started before `older_than` in one server (or DMs)."""
        async with self._tx() as db:
            calls = await _changes(
                db,
                "DELETE FROM turns WHERE call_id IN (SELECT call_id FROM calls WHERE guild_id IS ? "
                "AND started_at < ? AND state IN ('ended', 'failed'))",
                (guild_id, older_than),
            )
            await db.execute(
                "UPDATE calls SET transcript_purged_at = ? WHERE guild_id IS ? AND started_at < ? "
                "AND state IN ('ended', 'failed') AND transcript_purged_at IS NULL",
                (self._now(), guild_id, older_than),
            )
            chats = await _changes(
                db,
                "DELETE FROM turns WHERE chat_id IN (SELECT chat_id FROM chats WHERE guild_id IS ? "
                "AND started_at < ? AND ended_at IS NOT NULL)",
                (guild_id, older_than),
            )
            if calls + chats:
                await db.execute("INSERT INTO pending_scrubs (created_at) VALUES (?)", (self._now(),))
        return calls + chats

    # ---- jobs ------------------------------------------------------------------------------------------

    async def enqueue_job(self, kind: str, ref_id: str, at: float, *, not_before: float = 0.0) -> bool:
        added = await self._write(
            "INSERT INTO jobs (kind, ref_id, created_at, updated_at, not_before) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (kind, ref_id) DO NOTHING",
            (kind, ref_id, at, at, not_before),
        )
        return added == 1

    async def expedite_job(self, kind: str, ref_id: str, at: float) -> bool:
        changed = await self._write(
            "UPDATE jobs SET not_before = ?, updated_at = ? WHERE kind = ? AND ref_id = ? AND state = 'pending' "
            "AND not_before > ?",
            (at, at, kind, ref_id, at),
        )
        return changed == 1

    async def claim_job(self, at: float, lease_seconds: float) -> Job | None:
        """Take the oldest due job; a 'running' job whose lease ran out (its worker died) is due again."""
        async with self._tx() as db:
            async with db.execute(
                "SELECT job_id, kind, ref_id, attempts FROM jobs WHERE (state = 'pending' AND not_before <= ?) "
                "OR (state = 'running' AND not_before <= ?) ORDER BY job_id LIMIT 1",
                (at, at),
            ) as cur:
                row = await cur.fetchone()
            if row is None:
                return None
            await db.execute(
                "UPDATE jobs SET state = 'running', attempts = attempts + 1, not_before = ?, updated_at = ? "
                "WHERE job_id = ?",
                (at + lease_seconds, at, row["job_id"]),
            )
            return Job(job_id=row["job_id"], kind=row["kind"], ref_id=row["ref_id"], attempts=row["attempts"] + 1)

    async def finish_job(self, job_id: int, at: float) -> None:
        await self._write("UPDATE jobs SET state = 'done', updated_at = ? WHERE job_id = ?", (at, job_id))

    async def fail_job(self, job_id: int, at: float, error: str, *, retry_at: float | None) -> None:
        async with self._tx() as db:
            if retry_at is None:
                await db.execute(
                    "UPDATE jobs SET state = 'failed', last_error = ?, updated_at = ? WHERE job_id = ?",
                    (error[:500], at, job_id),
                )
            else:
                await db.execute(
                    "UPDATE jobs SET state = 'pending', last_error = ?, not_before = ?, updated_at = ? "
                    "WHERE job_id = ?",
                    (error[:500], retry_at, at, job_id),
                )

    async def job_queue(self) -> tuple[int, float | None]:
        """Jobs waiting or running, and the creation time of the oldest of them (None when there are none)."""
        row = await self._one("SELECT COUNT(*), MIN(created_at) FROM jobs WHERE state IN ('pending', 'running')")
        if row is None:
            return 0, None
        return int(row[0]), None if row[1] is None else float(row[1])

    async def job_state(self, kind: str, ref_id: str) -> str | None:
        state = await self._scalar("SELECT state FROM jobs WHERE kind = ? AND ref_id = ?", (kind, ref_id))
        return None if state is None else str(state)

    # ---- notices and meta ------------------------------------------------------------------------------

    async def live_turn_seen(self, call_id: str, turn_key: str) -> bool:
        return (
            await self._one("SELECT 1 FROM live_turns WHERE call_id = ? AND turn_key = ?", (call_id, turn_key))
        ) is not None

    async def remember_live_turn(self, call_id: str, turn_key: str) -> None:
        await self._write("INSERT OR IGNORE INTO live_turns (call_id, turn_key) VALUES (?, ?)", (call_id, turn_key))

    async def notice_seen(self, notice_id: str) -> bool:
        return await self._one("SELECT 1 FROM notices WHERE notice_id = ?", (notice_id,)) is not None

    async def remember_notice(self, notice_id: str, at: float) -> bool:
        async with self._tx() as db:
            cur = await db.execute(
                "INSERT INTO notices (notice_id, received_at) VALUES (?, ?) ON CONFLICT (notice_id) DO NOTHING",
                (notice_id, at),
            )
            await db.execute("DELETE FROM notices WHERE received_at < ?", (at - NOTICE_KEEP_SECONDS,))
            return cur.rowcount == 1

    async def get_meta(self, key: str) -> str | None:
        value = await self._scalar("SELECT value FROM meta WHERE key = ?", (key,))
        return None if value is None else str(value)

    async def set_meta(self, key: str, value: str) -> None:
        await self._write(
            "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
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
        current = "user_id = ? AND superseded_by IS NULL AND invalidated_at IS NULL"
        async with self._tx() as db:
            cur = await db.execute(
                "UPDATE jobs SET state = 'done', updated_at = ? WHERE job_id = ? AND state = 'running' "
                "AND attempts = ?",
                (at, job_id, attempt),
            )
            if cur.rowcount != 1:
                return None
            if not await memory_write_allowed(db, user_id, generation, call_id=call_id, chat_id=chat_id):
                return 0
            for fact_id in dict.fromkeys(confirmed):
                cur = await db.execute(
                    "UPDATE facts SET mentions = mentions + 1, confirmed_at = MAX(confirmed_at, ?), updated_at = ? "
                    f"WHERE fact_id = ? AND {current}",
                    (at, at, fact_id, user_id),
                )
                if cur.rowcount == 1:
                    await db.execute(
                        f"INSERT INTO fact_sources (fact_id, {column}) SELECT ?, ? WHERE NOT EXISTS "
                        f"(SELECT 1 FROM fact_sources WHERE fact_id = ? AND {column} = ?)",
                        (fact_id, ref, fact_id, ref),
                    )
            for text, replaces in new_facts:
                cur = await db.execute(
                    f"INSERT INTO facts (user_id, text, source_{column}, created_at, updated_at, confirmed_at) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (user_id, text, ref, at, at, at),
                )
                new_id = int(cur.lastrowid or 0)
                await db.execute(f"INSERT INTO fact_sources (fact_id, {column}) VALUES (?, ?)", (new_id, ref))
                for old_id in dict.fromkeys(replaces):
                    await db.execute(
                        f"UPDATE facts SET superseded_by = ?, invalidated_at = ?, updated_at = ? "
                        f"WHERE fact_id = ? AND fact_id != ? AND {current}",
                        (new_id, at, at, old_id, new_id, user_id),
                    )
            if summary is not None:
                await db.execute(f"UPDATE {table} SET summary = ? WHERE {column} = ?", (summary, ref))
            async with db.execute(
                f"SELECT COUNT(DISTINCT fact_id) FROM fact_sources WHERE {column} = ?", (ref,)
            ) as cur:
                row = await cur.fetchone()
            return int(row[0]) if row else 0


# ---- helpers ---------------------------------------------------------------------------------------------


@contextmanager
def _storage_errors() -> Iterator[None]:
    """A full disk (SQLITE_FULL) crosses the store boundary as StorageFull, which callers can act on."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(exc):
            raise StorageFull(str(exc)) from exc
        raise


async def memory_write_allowed(
    db: aiosqlite.Connection,
    user_id: int,
    generation: int | None,
    *,
    call_id: str | None = None,
    chat_id: str | None = None,
) -> bool:
    """The fence every write of a member's memory passes, inside the write's own transaction.

    False when the member forgot something or paused memory since the writer read `generation` (from
    `memory_generation`, before it started reading what it writes), when memory is paused, or when the call or
    chat is gone or private, or the call's transcript was purged by retention. `generation=None` skips only the
    generation check."""
    if generation is not None:
        async with db.execute("SELECT generation FROM memory_fences WHERE user_id = ?", (user_id,)) as cur:
            row = await cur.fetchone()
        if (int(row[0]) if row else 0) != generation:
            return False
    async with db.execute("SELECT 1 FROM users WHERE user_id = ? AND memory_enabled = 0", (user_id,)) as cur:
        if await cur.fetchone() is not None:
            return False
    if call_id is not None or chat_id is not None:
        convo = Conversation.of(call_id=call_id, chat_id=chat_id)
        column, ref = convo.column, convo.ref_id
        table = convo.table
        purged = " AND transcript_purged_at IS NULL" if call_id else ""
        async with db.execute(
            f"SELECT 1 FROM {table} WHERE {column} = ? AND user_id = ? AND private = 0{purged}", (ref, user_id)
        ) as cur:
            if await cur.fetchone() is None:
                return False
    return True


async def _bump_generation(db: aiosqlite.Connection, user_id: int) -> None:
    await db.execute(
        "INSERT INTO memory_fences (user_id, generation) VALUES (?, 1) "
        "ON CONFLICT (user_id) DO UPDATE SET generation = generation + 1",
        (user_id,),
    )


async def _forgotten(db: aiosqlite.Connection, user_id: int, at: float) -> None:
    """In a deleting transaction: fence off writes that started before it, and record the scrub it needs."""
    await _bump_generation(db, user_id)
    await db.execute("INSERT INTO pending_scrubs (created_at) VALUES (?)", (at,))


async def _stop_remembering(db: aiosqlite.Connection, user_id: int) -> None:
    """Memory paused (or "without memory" chosen): a running call stops being recorded at once."""
    await _bump_generation(db, user_id)
    await db.execute(
        "UPDATE calls SET private = 1 WHERE user_id = ? AND state IN ('starting', 'active', 'ending')", (user_id,)
    )


def _split_sql(script: str) -> list[str]:
    """Split a migration into statements, keeping trigger bodies (BEGIN ... END;) whole."""
    statements, current = [], []
    in_trigger = False
    for line in script.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("--"):
            continue
        current.append(line)
        upper = stripped.upper()
        if upper.startswith("CREATE TRIGGER"):
            in_trigger = True
        if in_trigger:
            if upper == "END;":
                statements.append("\n".join(current))
                current, in_trigger = [], False
        elif stripped.endswith(";"):
            statements.append("\n".join(current))
            current = []
    if current:
        statements.append("\n".join(current))
    return statements


async def _changes(db: aiosqlite.Connection, sql: str, params: tuple[Any, ...]) -> int:
    cur = await db.execute(sql, params)
    return max(cur.rowcount, 0)


async def _delete_conversation(
    db: aiosqlite.Connection, *, call_id: str | None = None, chat_id: str | None = None
) -> ForgetResult:
    """Delete a call or chat, its turns and summary, and the facts that came only from it."""
    convo = Conversation.of(call_id=call_id, chat_id=chat_id)
    column, ref = convo.column, convo.ref_id
    async with db.execute(
        f"SELECT fact_id FROM fact_sources WHERE {column} = ? "
        f"EXCEPT SELECT fact_id FROM fact_sources WHERE {column} IS NULL OR {column} != ? "
        f"UNION SELECT fact_id FROM facts WHERE source_{column} = ? "
        "AND fact_id NOT IN (SELECT fact_id FROM fact_sources)",
        (ref, ref, ref),
    ) as cur:
        only_here = [r[0] for r in await cur.fetchall()]
    facts = 0
    for fact_id in set(only_here):
        facts += await _changes(db, "DELETE FROM facts WHERE fact_id = ?", (fact_id,))
    turns = await _changes(db, f"DELETE FROM turns WHERE {column} = ?", (ref,))
    table = convo.table
    removed = await _changes(db, f"DELETE FROM {table} WHERE {column} = ?", (ref,))
    return ForgetResult(turns=turns, facts=facts, calls=removed if call_id else 0, chats=removed if chat_id else 0)


def _to_db(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, dict | list):
        return json.dumps(value)
    return value


def _user(row: aiosqlite.Row) -> UserRecord:
    return UserRecord(
        user_id=row["user_id"],
        memory_enabled=bool(row["memory_enabled"]),
        consent=row["consent"],
        consent_at=row["consent_at"],
        created_at=row["created_at"],
    )


def _call(row: aiosqlite.Row) -> CallRecord:
    data = {name: row[name] for name in _CALL_COLUMNS}
    data["private"] = bool(data["private"])
    data["history_anchored"] = bool(data["history_anchored"])
    data["agent_stop_pending"] = bool(data["agent_stop_pending"])
    return CallRecord(**data)


def _chat(row: aiosqlite.Row) -> ChatRecord:
    data = {name: row[name] for name in _CHAT_COLUMNS}
    data["private"] = bool(data["private"])
    return ChatRecord(**data)


def _turn(row: aiosqlite.Row) -> TurnRecord:
    return TurnRecord(
        turn_id=row[0],
        user_id=row[1],
        call_id=row[2],
        chat_id=row[3],
        seq=row[4],
        role=row[5],
        content=row[6],
        spoken_at=row[7],
        source=row[8],
        segment=row[9],
        partial=bool(row[10]),
        captured=row[11],
    )


def _fact(row: aiosqlite.Row) -> FactRecord:
    return FactRecord(*tuple(row))
