"""PostgreSQL: a pooled connection goes back to the pool without an extra round trip, and still clean."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from bot.store.models import NewTurn
from bot.store.postgres import PostgresStore
from tests.factories import make_call


async def test_a_read_is_one_statement_and_a_failed_transaction_leaves_the_connection_clean(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PostgresStore(postgres_url, min_connections=1, max_connections=1)  # one connection: every op reuses it
    await store.open()
    try:
        await store.set_consent(42, True, 1.0)
        call = make_call(42)
        await store.create_call(call)
        sent: list[str] = []
        execute, execute_args = asyncpg.Connection.execute, asyncpg.Connection._execute

        async def counting_execute(self: asyncpg.Connection, query: str, *args: Any, **kwargs: Any) -> Any:
            if not args:
                sent.append(query)
            return await execute(self, query, *args, **kwargs)

        async def counting_execute_args(self: asyncpg.Connection, query: str, *args: Any, **kwargs: Any) -> Any:
            sent.append(query)
            return await execute_args(self, query, *args, **kwargs)

        monkeypatch.setattr(asyncpg.Connection, "execute", counting_execute)
        monkeypatch.setattr(asyncpg.Connection, "_execute", counting_execute_args)
        assert (await store.get_call(call.call_id)) is not None
        assert len(sent) == 1, sent  # the SELECT only: no reset query when the connection went back

        # A merge of turns is ONE statement: the fence (generation, pause, conversation), the version bump, the
        # updates and the inserts.
        sent.clear()
        generation = await store.memory_generation(42)
        sent.clear()
        turns = [NewTurn("user", f"line {i}", 2.0, i, 0, False, 1000 + i) for i in range(3)]
        assert await store.apply_call_turns(
            call.call_id, 42, turns, [], anchored=True, checkpoint_at=2.0, generation=generation, expected_version=0
        )
        assert len(sent) == 1, sent
        assert not await store.apply_call_turns(  # a stale generation is refused by the same one statement
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
