"""Each line's specifics (bot.store.specifics) are stored with it, counted from the plain text, on both backends and
behind the encrypting layer; a call start ranks line heads without their text and reads the text of its lines by id."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from bot.keys import SqliteKeyStore, generate_master_key_text, parse_master_key
from bot.keys.encrypted import EncryptedStore
from bot.memory.service import MemoryService
from bot.store.models import NewTurn, TurnUpdate
from bot.store.postgres import PostgresStore
from bot.store.repository import Store
from bot.store.specifics import specifics
from bot.store.sqlite import SqliteStore
from tests.factories import make_call, seed_chat

LINES = [
    ("assistant", "Hello, what can I do for you?"),
    ("user", "My flight to Lisbon is on March 3 at 7:45, I decided to book the window seat"),
    ("user", "ok"),
    ("assistant", "Noted: Lisbon, March 3, window seat."),
]


async def write_call(store: Store, user_id: int, at: float) -> str:
    call = make_call(user_id, state="ended", started_at=at, ended_at=at + 60)
    await store.create_call(call)
    inserts = [NewTurn(role, text, at + i, i) for i, (role, text) in enumerate(LINES)]  # type: ignore[arg-type]
    assert await store.apply_call_turns(call.call_id, user_id, inserts, [], anchored=True, checkpoint_at=at)
    return call.call_id


async def test_lines_keep_the_specifics_of_their_plain_text_and_heads_carry_no_text(store: Store) -> None:
    now = time.time()
    call_id = await write_call(store, 42, now - 100)
    chat_id = await seed_chat(store, 42, now - 50)
    await store.append_chat_turn(chat_id, 42, "user", "Call me Ana, I love Tuesday yoga", now - 40)
    await write_call(store, 7, now - 30)  # another member's lines

    heads = await store.recent_line_heads(42, 10)
    turns = await store.recent_turns_of(42, 10)
    assert [h.turn_id for h in heads] == [t.turn_id for t in turns]
    expected = [specifics(text) for _, text in LINES] + [specifics("Call me Ana, I love Tuesday yoga")]
    assert [h.specifics for h in heads] == expected
    assert expected[1] > expected[2] == 0
    assert not any(hasattr(h, "content") for h in heads)

    texts = await store.turn_texts(42, [h.turn_id for h in heads])
    assert [texts[h.turn_id] for h in heads] == [t.content for t in turns]
    others = [h.turn_id for h in await store.recent_line_heads(7, 10)]
    assert await store.turn_texts(42, others) == {}, "only the member's own lines"

    first = turns[0]
    assert await store.apply_call_turns(
        call_id,
        42,
        [],
        [TurnUpdate(first.turn_id, 0, "Switch it to Friday 9 am", 0, False, 0)],
        anchored=True,
        checkpoint_at=now,
    )
    updated = {h.turn_id: h.specifics for h in await store.recent_line_heads(42, 10)}
    assert updated[first.turn_id] == specifics("Switch it to Friday 9 am")


async def test_lines_written_before_specifics_were_stored_are_counted_at_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plain lines by the store's open, sealed ones by the encrypting layer's (which can open them), a page at a
    time; until then a call start counts them from their text, and builds the same block."""
    monkeypatch.setattr("bot.store.sqlite.base.SPECIFICS_PAGE", 2)
    now = time.time()
    for encrypted in (False, True):
        path = tmp_path / f"memory-{encrypted}.db"
        keys = SqliteKeyStore(tmp_path / f"keys-{encrypted}.db", parse_master_key(generate_master_key_text()))
        await keys.open()
        store: Store = EncryptedStore(SqliteStore(path), keys) if encrypted else SqliteStore(path)
        await store.open()
        for n in range(3):
            await write_call(store, 42, now - 1000 + n * 100)
        memory = MemoryService(store, budget_tokens=300, persona="p")
        counted = await memory.build_context(42)
        db = sqlite3.connect(path)
        db.execute("UPDATE turns SET specifics = NULL")
        db.commit()
        memory.context.forget_cached()
        assert await memory.build_context(42) == counted
        await memory.context.indexes.idle()
        heads = await store.recent_line_heads(42, 100)
        assert {h.specifics for h in heads} == {None}
        await store.close()

        store = EncryptedStore(SqliteStore(path), keys) if encrypted else SqliteStore(path)
        await store.open()
        heads = await store.recent_line_heads(42, 100)
        texts = await store.turn_texts(42, [h.turn_id for h in heads])
        assert [h.specifics for h in heads] == [specifics(texts[h.turn_id]) for h in heads]
        sealed = [row[0] for row in db.execute("SELECT content FROM turns")]
        assert any(LINES[1][1] in text for text in sealed) != encrypted
        db.close()
        await store.close()
        await keys.close()


async def test_postgresql_counts_older_lines_at_open_a_page_at_a_time(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("bot.store.postgres.base.SPECIFICS_PAGE", 2)
    store = PostgresStore(postgres_url)
    await store.open()
    for n in range(3):
        await write_call(store, 43, time.time() - 1000 + n * 100)
    await store.pool.execute("UPDATE turns SET specifics = NULL WHERE user_id = 43")
    assert {h.specifics for h in await store.recent_line_heads(43, 100)} == {None}
    await store.close()

    store = PostgresStore(postgres_url)
    await store.open()
    heads = await store.recent_line_heads(43, 100)
    texts = await store.turn_texts(43, [h.turn_id for h in heads])
    assert len(heads) == 3 * len(LINES)
    assert [h.specifics for h in heads] == [specifics(texts[h.turn_id]) for h in heads]
    await store.close()
