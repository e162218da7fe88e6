"""Forgetting, scrubbing, export, retention and resealing (`PrivacyStore`) on SQLite."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import aiosqlite

from bot.store.columns import RESEALED_TERMS
from bot.store.models import (
    CallRecord,
    ChatRecord,
    Conversation,
    FactRecord,
    ForgetResult,
    UserRecord,
)
from bot.store.shared import SharedPrivacy, only_from, sqlite_sql
from bot.store.sqlite.base import SqliteBase, _changes
from bot.store.sqlite.fences import _forgotten

SCRUB_BUSY_TIMEOUT_MS = 200
"""How long a scrub waits for another connection's read transaction before it reports "not yet"."""
_DELETE_FINISHED_CALLS = (
    "DELETE FROM calls WHERE user_id = ? AND state IN ('ended', 'failed') AND agent_stop_pending = 0"
)
"""A member's finished calls, but for one whose agent Agora has not stopped yet: that row is how a restarted bot
finds the agent to stop; it is marked forgotten like an open call and goes once the agent is stopped."""


class SqlitePrivacy(SqliteBase, SharedPrivacy):
    """Implements `bot.store.repository.PrivacyStore`: forgetting, scrubbing residue, export, retention, and
    resealing every member text (used by `bot.keys.encrypted`). Reads the other aggregates' records through
    the methods below, which the composed `SqliteStore` provides."""

    if TYPE_CHECKING:

        async def get_user(self, user_id: int) -> UserRecord | None: ...
        async def get_call(self, call_id: str) -> CallRecord | None: ...
        async def get_chat(self, chat_id: str) -> ChatRecord | None: ...
        async def get_fact(self, fact_id: int) -> FactRecord | None: ...

    async def forget_fact(
        self,
        user_id: int,
        fact_id: int,
        *,
        turn_ids: Sequence[int] = (),
        summaries: Sequence[Conversation] = (),
    ) -> FactRecord | None:
        fact = await self.get_fact(fact_id)
        if fact is None or fact.user_id != user_id:
            return None
        async with self._tx() as db:
            await db.execute("DELETE FROM facts WHERE fact_id = ? AND user_id = ?", (fact_id, user_id))
            await _forgotten(db, user_id, self._now())
            # A line of a call still open keeps its place with no text (content ''): the agent's history still
            # holds it, and the merges of that call's next windows must find it there, not store it again.
            ids = [(turn_id, user_id) for turn_id in turn_ids]
            await db.executemany(
                "UPDATE turns SET content = '', specifics = 0, language_terms = NULL WHERE turn_id = ? AND user_id = ? "
                "AND call_id IN (SELECT call_id FROM calls WHERE state IN ('starting', 'active', 'ending'))",
                ids,
            )
            await db.executemany("DELETE FROM memory_vectors WHERE turn_id = ? AND user_id = ?", ids)
            await db.executemany("DELETE FROM turns WHERE turn_id = ? AND user_id = ? AND content <> ''", ids)
            for target in summaries:
                table, column, ref_id = target.table, target.column, target.ref_id
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
            return await _delete_conversation(db, Conversation("call", call_id))

    async def forget_chat(self, user_id: int, chat_id: str) -> ForgetResult | None:
        chat = await self.get_chat(chat_id)
        if chat is None or chat.user_id != user_id:
            return None
        async with self._tx() as db:
            await _forgotten(db, user_id, self._now())
            return await _delete_conversation(db, Conversation("chat", chat_id))

    async def forget_user(self, user_id: int, *, begun: int | None = None) -> ForgetResult:
        async with self._tx() as db:
            turns = await _changes(db, "DELETE FROM turns WHERE user_id = ?", (user_id,))
            facts = await _changes(db, "DELETE FROM facts WHERE user_id = ?", (user_id,))
            calls = await _changes(db, _DELETE_FINISHED_CALLS, (user_id,))
            # An open call keeps its row (the agent must still be stopped) but loses everything it said; marked
            # forgotten, its row goes when it finishes (migration 12).
            await db.execute(
                "UPDATE calls SET summary = NULL, private = 1, forgotten = 1 WHERE user_id = ?", (user_id,)
            )
            chats = await _changes(db, "DELETE FROM chats WHERE user_id = ?", (user_id,))
            await db.execute("DELETE FROM users WHERE user_id = ?", (user_id,))
            await _forgotten(db, user_id, self._now(), begun)
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
                "INSERT INTO turns_language_fts (turns_language_fts) VALUES ('optimize')",
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

    async def reseal_texts(self, reseal: Callable[[int, str, str], Awaitable[str | None]]) -> int:
        """Rewrites every member text (turns, facts, call and chat summaries) through ``reseal(user_id, column,
        value)``, in one transaction; None leaves a value as it is. Returns how many values changed. This is how
        an existing database is encrypted in place (``bot.keys.encrypted``); the full-text triggers reindex
        each changed row. A resealed line's language terms go (``RESEALED_TERMS``)."""
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
                terms = RESEALED_TERMS if table == "turns" else ""
                await db.executemany(f"UPDATE {table} SET {column} = ?{terms} WHERE {key} = ?", updates)
                changed += len(updates)
        return changed

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


# ---- helpers ---------------------------------------------------------------------------------------------


async def _delete_conversation(db: aiosqlite.Connection, convo: Conversation) -> ForgetResult:
    """Delete a call or chat, its turns and summary, and the facts that came only from it."""
    column, ref = convo.column, convo.ref_id
    async with db.execute(sqlite_sql(only_from(column)), (ref,)) as cur:
        only_here = [r[0] for r in await cur.fetchall()]
    facts = 0
    for fact_id in set(only_here):
        facts += await _changes(db, "DELETE FROM facts WHERE fact_id = ?", (fact_id,))
    turns = await _changes(db, f"DELETE FROM turns WHERE {column} = ?", (ref,))
    table = convo.table
    removed = await _changes(db, f"DELETE FROM {table} WHERE {column} = ?", (ref,))
    return ForgetResult(
        turns=turns,
        facts=facts,
        calls=removed if convo.kind == "call" else 0,
        chats=removed if convo.kind == "chat" else 0,
    )
