"""Forget everything destroys the member's key in its own committed transaction, then the rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import DEFAULT_PERSONA
from bot.keys.crypto import generate_master_key_text, parse_master_key
from bot.keys.store import SqliteKeyStore
from bot.memory.service import MemoryService
from bot.store.models import ForgetResult
from bot.store.sqlite import SqliteStore
from standins.factories import seed_fact


class RowsFail(SqliteStore):
    """A store whose row deletion fails (a crash between the two steps)."""

    async def forget_user(self, user_id: int, *, begun: int | None = None) -> ForgetResult:
        raise RuntimeError("the database went away")


async def test_forget_everything_deletes_the_key_then_the_rows(tmp_path: Path, sqlite_store: SqliteStore) -> None:
    store = sqlite_store
    keys = SqliteKeyStore(tmp_path / "bot.keys.db", parse_master_key(generate_master_key_text()))
    await keys.open()
    memory = MemoryService(store, budget_tokens=1500, persona=DEFAULT_PERSONA, keys=keys)
    for user_id in (1, 2):
        await keys.cipher(user_id)
        await seed_fact(store, user_id, f"member {user_id} keeps bees", 1000.0)

    result = await memory.forget_everything(1)
    await memory.wait_scrubbed()
    assert result.facts == 1
    assert not await keys.has_key(1)
    assert await store.list_facts(1) == []
    assert await keys.has_key(2) and len(await store.list_facts(2)) == 1
    await keys.close()


async def test_the_key_is_gone_for_good_even_when_deleting_the_rows_fails(tmp_path: Path) -> None:
    path, master = tmp_path / "bot.keys.db", parse_master_key(generate_master_key_text())
    keys = SqliteKeyStore(path, master)
    await keys.open()
    await keys.cipher(1)
    store = RowsFail(tmp_path / "memory.db")
    await store.open()
    await seed_fact(store, 1, "member 1 keeps bees", 1000.0)
    memory = MemoryService(store, budget_tokens=1500, persona=DEFAULT_PERSONA, keys=keys)
    with pytest.raises(RuntimeError):
        await memory.forget_everything(1)
    assert await store.interrupted_forgets() == [1], "the forget stays under way, to be finished"
    await store.close()
    await keys.close()

    other = SqliteKeyStore(path, master)  # another connection sees the deletion: it was committed on its own
    await other.open()
    assert not await other.has_key(1)
    await other.cipher(1)  # a write meanwhile made a new key (its write was refused: the forget is under way)

    restarted = SqliteStore(tmp_path / "memory.db")  # the next start finishes the forget: key, then rows
    await restarted.open()
    memory = MemoryService(restarted, budget_tokens=1500, persona=DEFAULT_PERSONA, keys=other)
    assert await memory.finish_interrupted_forgets() == [1]
    await memory.wait_scrubbed()
    assert not await other.has_key(1) and await restarted.list_facts(1) == []
    assert await restarted.interrupted_forgets() == []
    await restarted.close()
    await other.close()
