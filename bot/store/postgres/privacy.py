"""Forgetting, scrubbing, export and retention (`PrivacyStore`) on PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from bot.store.columns import FACT_COLUMNS as _FACT_COLUMNS
from bot.store.models import (
    Conversation,
    FactRecord,
    ForgetResult,
    UserRecord,
)
from bot.store.postgres.base import Connection, PostgresBase, _count, _fact
from bot.store.postgres.fences import _forgotten
from bot.store.shared import SharedPrivacy, only_from

_DELETE_FINISHED_CALLS = (
    "DELETE FROM calls WHERE user_id = $1 AND state IN ('ended', 'failed') AND NOT agent_stop_pending"
)
"""See ``bot.store.sqlite.privacy``: an ended call whose agent is still to stop is marked, not deleted."""


class PostgresPrivacy(PostgresBase, SharedPrivacy):
    """Implements `bot.store.repository.PrivacyStore`: forgetting, scrubbing residue, export and retention.
    Reads the member's record through `get_user`, which the composed `PostgresStore` provides."""

    if TYPE_CHECKING:

        async def get_user(self, user_id: int) -> UserRecord | None: ...

    async def forget_fact(
        self,
        user_id: int,
        fact_id: int,
        *,
        turn_ids: Sequence[int] = (),
        summaries: Sequence[Conversation] = (),
    ) -> FactRecord | None:
        async with self._tx() as db:
            row = await db.fetchrow(
                f"DELETE FROM facts WHERE fact_id = $1 AND user_id = $2 RETURNING {_FACT_COLUMNS}", fact_id, user_id
            )
            if row is None:
                return None
            await _forgotten(db, user_id, time.time())
            # A line of a call still open keeps its place with no text (content ''): the agent's history still
            # holds it, and the merges of that call's next windows must find it there, not store it again.
            ids = list(turn_ids)
            await db.execute(
                "UPDATE turns SET content = '', specifics = 0, language_terms = NULL "
                "WHERE turn_id = ANY($1::bigint[]) AND user_id = $2 "
                "AND call_id IN (SELECT call_id FROM calls WHERE state IN ('starting', 'active', 'ending'))",
                ids,
                user_id,
            )
            await db.execute(
                "DELETE FROM memory_vectors WHERE turn_id = ANY($1::bigint[]) AND user_id = $2", ids, user_id
            )
            await db.execute(
                "DELETE FROM turns WHERE turn_id = ANY($1::bigint[]) AND user_id = $2 AND content <> ''", ids, user_id
            )
            for target in summaries:
                table, column, ref_id = target.table, target.column, target.ref_id
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

    async def forget_user(self, user_id: int, *, begun: int | None = None) -> ForgetResult:
        async with self._tx() as db:
            turns = _count(await db.execute("DELETE FROM turns WHERE user_id = $1", user_id))
            facts = _count(await db.execute("DELETE FROM facts WHERE user_id = $1", user_id))
            calls = _count(await db.execute(_DELETE_FINISHED_CALLS, user_id))
            # An open call keeps its row (the agent must still be stopped) but loses everything it said; marked
            # forgotten, its row goes when it finishes (migration 12).
            await db.execute(
                "UPDATE calls SET summary = NULL, private = TRUE, forgotten = TRUE WHERE user_id = $1", user_id
            )
            chats = _count(await db.execute("DELETE FROM chats WHERE user_id = $1", user_id))
            await db.execute("DELETE FROM users WHERE user_id = $1", user_id)
            await _forgotten(db, user_id, time.time(), begun)
        return ForgetResult(turns=turns, facts=facts, calls=calls, chats=chats)

    async def scrub(self) -> bool:
        """Reclaim dead rows and index entries of deleted text. What may remain in the data files and WAL until
        PostgreSQL reuses the space is reported by tests/store/test_postgres.py, not hidden."""
        async with self.pool.acquire() as db:
            pending = await db.fetchval("SELECT MAX(scrub_id) FROM pending_scrubs")
            for table in ("turns", "facts", "calls", "chats", "memory_vectors"):
                await db.execute(f"VACUUM {table}")
            await db.execute("CHECKPOINT")
            if pending is not None:
                await db.execute("DELETE FROM pending_scrubs WHERE scrub_id <= $1", pending)
        return True

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


# ---- helpers ---------------------------------------------------------------------------------------------


async def _delete_conversation(db: Connection, convo: Conversation) -> ForgetResult:
    """Delete a call or chat, its turns and summary, and the facts that came only from it."""
    column, ref = convo.column, convo.ref_id
    facts = _count(await db.execute(f"DELETE FROM facts WHERE fact_id IN ({only_from(column)})", ref))
    turns = _count(await db.execute(f"DELETE FROM turns WHERE {column} = $1", ref))
    removed = _count(await db.execute(f"DELETE FROM {convo.table} WHERE {column} = $1", ref))
    return ForgetResult(
        turns=turns,
        facts=facts,
        calls=removed if convo.kind == "call" else 0,
        chats=removed if convo.kind == "chat" else 0,
    )
