"""The memory fence every write of a member's memory passes (inside the write's own transaction), and the
writes that move it: a forget or a pause bumps the member's generation.
"""

from __future__ import annotations

from typing import Any

from bot.store.models import (
    Conversation,
)
from bot.store.postgres.base import _OPEN, Connection, _count


async def memory_write_allowed(
    db: Connection,
    user_id: int,
    generation: int | None,
    convo: Conversation | None = None,
) -> bool:
    """The fence every write of a member's memory passes, inside the write's own transaction (as on SQLite: see
    `bot.store.sqlite.memory_write_allowed`). The member's fence row is read FOR SHARE, so a forget or pause that
    bumps it waits for this write to commit, or this write sees the new generation, and whether a forget of
    everything is under way, from the same row version. One statement: the fence row's lock comes first (the
    FROM clause), then the pause and the conversation."""
    checks = ["f.forget_begun IS NOT NULL", "EXISTS (SELECT 1 FROM users WHERE user_id = $1 AND NOT memory_enabled)"]
    params: list[Any] = [user_id]
    if convo is not None:
        purged = " AND transcript_purged_at IS NULL" if convo.kind == "call" else ""
        checks.append(
            f"NOT EXISTS (SELECT 1 FROM {convo.table} WHERE {convo.column} = $2 AND user_id = $1 "
            f"AND NOT private{purged})"
        )
        params.append(convo.ref_id)
    row = await db.fetchrow(
        f"SELECT COALESCE(f.generation, 0) AS generation, {' OR '.join(checks)} AS refused "
        "FROM (SELECT 1) AS one LEFT JOIN "
        "(SELECT generation, forget_begun FROM memory_fences WHERE user_id = $1 FOR SHARE) AS f ON TRUE",
        *params,
    )
    assert row is not None
    if generation is not None and int(row["generation"]) != generation:
        return False
    return not row["refused"]


async def _bump_generation(db: Connection, user_id: int) -> None:
    await db.execute(
        "INSERT INTO memory_fences (user_id, generation) VALUES ($1, 1) "
        "ON CONFLICT (user_id) DO UPDATE SET generation = memory_fences.generation + 1",
        user_id,
    )


async def _forgotten(db: Connection, user_id: int, at: float, begun: int | None = None) -> None:
    """In a deleting transaction: fence off writes that started before it, and record the scrub it needs.
    ``begun``: the forget of everything this transaction completes (``begin_forget``), no longer under way unless
    another has begun since."""
    await _bump_generation(db, user_id)
    await db.execute("INSERT INTO pending_scrubs (created_at) VALUES ($1)", at)
    if begun is not None:
        await db.execute(
            "UPDATE memory_fences SET forget_begun = NULL WHERE user_id = $1 AND forget_begun = $2", user_id, begun
        )


async def _stop_remembering(db: Connection, user_id: int) -> None:
    """Memory paused (or "without memory" chosen): a running call stops being recorded at once."""
    await _bump_generation(db, user_id)
    await db.execute(f"UPDATE calls SET private = TRUE WHERE user_id = $1 AND state IN {_OPEN}", user_id)


class PostgresTx:
    """``bot.store.shared.Tx`` over the connection inside one of PostgreSQL's transactions."""

    def __init__(self, db: Connection) -> None:
        self.db = db

    async def rows(self, sql: str, *params: Any) -> list[Any]:
        return list(await self.db.fetch(sql, *params))

    async def value(self, sql: str, *params: Any) -> Any:
        return await self.db.fetchval(sql, *params)

    async def changed(self, sql: str, *params: Any) -> int:
        return _count(await self.db.execute(sql, *params))

    async def write_allowed(self, user_id: int, generation: int | None, convo: Conversation | None) -> bool:
        return await memory_write_allowed(self.db, user_id, generation, convo)
