"""The memory fence every write of a member's memory passes (inside the write's own transaction), and the
writes that move it: a forget or a pause bumps the member's generation.
"""

from __future__ import annotations

import aiosqlite

from bot.store.models import Conversation
from bot.store.sqlite import trips


async def memory_write_allowed(
    db: aiosqlite.Connection,
    user_id: int,
    generation: int | None,
    convo: Conversation | None = None,
) -> bool:
    """The fence every write of a member's memory passes, inside the write's own transaction (see
    `bot.store.sqlite.trips.memory_write_allowed`), checked in one statement."""
    return await trips.memory_write_allowed(db, user_id, generation, convo)


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
