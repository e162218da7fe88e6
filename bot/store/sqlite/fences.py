"""The memory fence every write of a member's memory passes (inside the write's own transaction), and the
writes that move it: a forget or a pause bumps the member's generation.
"""

from __future__ import annotations

from typing import Any

import aiosqlite

from bot.store.models import Conversation
from bot.store.shared import sqlite_sql
from bot.store.sqlite import trips
from bot.store.sqlite.one_trip import on_thread


async def memory_write_allowed(
    db: aiosqlite.Connection,
    user_id: int,
    generation: int | None,
    convo: Conversation | None = None,
) -> bool:
    """The fence every write of a member's memory passes, inside the write's own transaction (see
    `bot.store.sqlite.trips.memory_write_allowed`), checked in one trip to the database thread."""
    return await on_thread(db, trips.memory_write_allowed, user_id, generation, convo)


async def _bump_generation(db: aiosqlite.Connection, user_id: int) -> None:
    await db.execute(
        "INSERT INTO memory_fences (user_id, generation) VALUES (?, 1) "
        "ON CONFLICT (user_id) DO UPDATE SET generation = generation + 1",
        (user_id,),
    )


async def _forgotten(db: aiosqlite.Connection, user_id: int, at: float, begun: int | None = None) -> None:
    """In a deleting transaction: fence off writes that started before it, and record the scrub it needs.
    ``begun``: the forget of everything this transaction completes (``begin_forget``), no longer under way unless
    another has begun since."""
    await _bump_generation(db, user_id)
    await db.execute("INSERT INTO pending_scrubs (created_at) VALUES (?)", (at,))
    if begun is not None:
        await db.execute(
            "UPDATE memory_fences SET forget_begun = NULL WHERE user_id = ? AND forget_begun = ?", (user_id, begun)
        )


async def _stop_remembering(db: aiosqlite.Connection, user_id: int) -> None:
    """Memory paused (or "without memory" chosen): a running call stops being recorded at once."""
    await _bump_generation(db, user_id)
    await db.execute(
        "UPDATE calls SET private = 1 WHERE user_id = ? AND state IN ('starting', 'active', 'ending')", (user_id,)
    )


class SqliteTx:
    """``bot.store.shared.Tx`` over the connection inside one of SQLite's transactions."""

    def __init__(self, db: aiosqlite.Connection) -> None:
        self.db = db

    async def rows(self, sql: str, *params: Any) -> list[Any]:
        return list(await self.db.execute_fetchall(sqlite_sql(sql), params))

    async def value(self, sql: str, *params: Any) -> Any:
        rows = await self.rows(sql, *params)
        return rows[0][0] if rows else None

    async def changed(self, sql: str, *params: Any) -> int:
        cur = await self.db.execute(sqlite_sql(sql), params)
        return max(cur.rowcount, 0)

    async def write_allowed(self, user_id: int, generation: int | None, convo: Conversation | None) -> bool:
        return await memory_write_allowed(self.db, user_id, generation, convo)
