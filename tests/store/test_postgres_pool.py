"""PostgreSQL: a pooled connection goes back to the pool clean although the store's pool skips asyncpg's reset
query (the round trips each operation takes are counted by bench/calls.py, not pinned here)."""

from __future__ import annotations

import asyncpg
import pytest

from bot.store.models import NewTurn
from bot.store.postgres import PostgresStore
from standins.factories import make_call


async def test_a_failed_transaction_leaves_the_pooled_connection_clean_for_the_next_caller(postgres_url: str) -> None:
    store = PostgresStore(postgres_url, min_connections=1, max_connections=1)  # one connection: every op reuses it
    await store.open()
    try:
        await store.set_consent(42, True, 1.0)
        call = make_call(42)
        await store.create_call(call)
        assert (await store.get_call(call.call_id)) is not None

        # A merge of turns is applied whole; a stale generation is refused and writes nothing.
        generation = await store.memory_generation(42)
        turns = [NewTurn("user", f"line {i}", 2.0, i, 0, False, 1000 + i) for i in range(3)]
        assert await store.apply_call_turns(
            call.call_id, 42, turns, [], anchored=True, checkpoint_at=2.0, generation=generation, expected_version=0
        )
        assert not await store.apply_call_turns(
            call.call_id, 42, turns, [], anchored=True, checkpoint_at=2.0, generation=generation + 1
        )
        assert [t.content for t in await store.call_turns(call.call_id)] == ["line 0", "line 1", "line 2"]

        # A transaction that fails half-way is rolled back; the connection it used serves the next caller.
        with pytest.raises(asyncpg.UndefinedTableError):
            async with store._tx() as db:
                await db.execute("UPDATE calls SET summary = 'half' WHERE call_id = $1", call.call_id)
                await db.execute("SELECT * FROM no_such_table")
        fetched = await store.get_call(call.call_id)
        assert fetched is not None and fetched.summary is None
        assert await store.transition_call(call.call_id, ["active"], "ending")
    finally:
        await store.close()
