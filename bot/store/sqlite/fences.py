"""The memory fence every write of a member's memory passes (inside the write's own transaction), and the
writes that move it: a forget or a pause bumps the member's generation.
"""

from __future__ import annotations

import aiosqlite

from bot.store.models import (
    Conversation,
)


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
