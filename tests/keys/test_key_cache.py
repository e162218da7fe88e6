"""The key cache is tied to the member's memory generation (issue 33, finding 1), checked step by step with two
"processes" in one test: each has its own key store instance (its own cache) and its own connection to one memory
database and one key store, as two processes do. The real-process version is tests/e2e/test_forget_across_processes.py.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from bot.keys import SqliteKeyStore, generate_master_key_text, parse_master_key
from bot.keys.encrypted import EncryptedStore
from bot.keys.sealed import unseal
from bot.memory.service import MemoryService
from bot.store.models import ChatRecord
from bot.store.sqlite import SqliteStore

ALICE = 7
MASTER = parse_master_key(generate_master_key_text())


def make_chat(user_id: int, *, chat_id: str) -> ChatRecord:
    now = time.time()
    return ChatRecord(chat_id, user_id, guild_id=None, private=False, started_at=now, last_message_at=now)


async def process(tmp_path: Path) -> EncryptedStore:
    store = EncryptedStore(SqliteStore(tmp_path / "bot.db"), SqliteKeyStore(tmp_path / "bot.keys.db", MASTER))
    await store.keys.open()
    await store.open()
    return store


@pytest_asyncio.fixture
async def two(tmp_path: Path) -> AsyncIterator[tuple[EncryptedStore, EncryptedStore]]:
    first = await process(tmp_path)
    second = await process(tmp_path)
    yield first, second
    for store in (first, second):
        await store.backend.close()
        await store.keys.close()


async def say(store: EncryptedStore, text: str, chat_id: str) -> None:
    generation = await store.memory_generation(ALICE)
    assert await store.append_chat_turn(chat_id, ALICE, "user", text, time.time(), generation=generation) is not None


async def raw_lines(store: EncryptedStore) -> list[str]:
    return [t.content for t in await store.backend.recent_turns_of(ALICE, 50)]


async def test_a_write_after_a_forget_elsewhere_seals_with_a_new_key_never_the_deleted_one(
    two: tuple[EncryptedStore, EncryptedStore], tmp_path: Path
) -> None:
    bot, shell = two
    await bot.set_consent(ALICE, True, time.time())
    await bot.create_chat(make_chat(ALICE, chat_id="before"))
    await say(bot, "My locker code is 4417.", "before")
    deleted = await bot.keys.cipher(ALICE, create=False)  # cached in the bot
    assert deleted is not None

    forgotten = MemoryService(shell, budget_tokens=1500, persona="p", keys=shell.keys)
    await forgotten.forget_everything(ALICE)
    await forgotten.wait_scrubbed()

    await bot.set_consent(ALICE, True, time.time())
    await bot.create_chat(make_chat(ALICE, chat_id="after"))
    await say(bot, "I moved to Lisbon.", "after")
    sealed = await raw_lines(bot)
    assert len(sealed) == 1
    third = SqliteKeyStore(tmp_path / "bot.keys.db", MASTER)  # what a process started now reads
    await third.open()
    current = await third.cipher(ALICE, create=False)
    await third.close()
    assert current is not None, "the bot made a new key in the key store"
    assert unseal(current, "turns.content", sealed[0]) == "I moved to Lisbon."
    with pytest.raises(Exception, match="did not decrypt"):
        unseal(deleted, "turns.content", sealed[0])


async def test_a_stale_key_in_a_reader_is_read_again_and_never_fails_the_member(
    two: tuple[EncryptedStore, EncryptedStore], caplog: pytest.LogCaptureFixture
) -> None:
    reader, writer = two
    await writer.set_consent(ALICE, True, time.time())
    await writer.create_chat(make_chat(ALICE, chat_id="one"))
    await say(writer, "First words.", "one")
    assert [t.content for t in await reader.recent_turns_of(ALICE, 10)] == ["First words."]  # the reader caches K1

    await writer.keys.delete(ALICE)  # a forget elsewhere: key, then rows and generation
    await writer.backend.forget_user(ALICE)
    await writer.set_consent(ALICE, True, time.time())
    await writer.create_chat(make_chat(ALICE, chat_id="two"))
    await say(writer, "Fresh start.", "two")  # under a new key, made by the writer

    # No generation read in between: the cached key does not open the new line, so it is read afresh.
    assert [t.content for t in await reader.recent_turns_of(ALICE, 10)] == ["Fresh start."]
    assert [t.content for t in await reader.recent_turns_of(ALICE, 10)] == ["Fresh start."]
    facts, recent = await reader.call_start_memory(ALICE, facts=5, lines=10)
    assert facts == [] and [recent.line(i).content for i in range(len(recent))] == ["Fresh start."]

    # A line sealed under a key that no longer exists (what the old cache wrote, issue 33) is left out, not an error.
    with caplog.at_level(logging.WARNING, logger="bot.keys.reading"):
        orphan = (await raw_lines(writer))[0]
        await writer.keys.delete(ALICE)
        await writer.backend.forget_user(ALICE)
        await writer.set_consent(ALICE, True, time.time())
        await writer.create_chat(make_chat(ALICE, chat_id="three"))
        await say(writer, "Newest.", "three")
        assert await writer.backend.append_chat_turn("three", ALICE, "user", orphan, time.time()) is not None
        await reader.memory_generation(ALICE)  # as /chat and every call turn read it first
        assert [t.content for t in await reader.recent_turns_of(ALICE, 10)] == ["Newest."]
        assert [t.content for t in await reader.chat_turns("three")] == ["Newest."]
        assert [t.content for t in await reader.recent_turns_of(ALICE, 10)] == ["Newest."]
        export = await reader.export_user(ALICE)
    assert [t["content"] for c in export["chats"] for t in c["turns"]] == ["Newest."]
    assert "sealed under a key that no longer exists" in caplog.text and "Fresh start" not in caplog.text


async def test_every_generation_read_drops_an_older_cached_key(two: tuple[EncryptedStore, EncryptedStore]) -> None:
    bot, shell = two
    await bot.set_consent(ALICE, True, time.time())
    await bot.create_chat(make_chat(ALICE, chat_id="c"))
    await say(bot, "Hello.", "c")
    first = await bot.keys.cipher(ALICE, create=False)
    assert await bot.keys.cipher(ALICE, create=False) is first  # cached
    await shell.keys.delete(ALICE)
    await shell.backend.forget_user(ALICE)  # bumps the generation
    await bot.memory_stamp(ALICE)  # what the live path reads each turn
    assert await bot.keys.cipher(ALICE, create=False) is None, "read again from the key store: gone"


async def test_a_stale_key_reads_embeddings_again(two: tuple[EncryptedStore, EncryptedStore]) -> None:
    reader, writer = two
    await writer.set_consent(ALICE, True, time.time())
    await writer.create_chat(make_chat(ALICE, chat_id="one"))
    await say(writer, "First words.", "one")
    assert len(await reader.recent_turns_of(ALICE, 10)) == 1  # the reader caches the first key
    await writer.keys.delete(ALICE)
    await writer.backend.forget_user(ALICE)
    await writer.set_consent(ALICE, True, time.time())
    await writer.create_chat(make_chat(ALICE, chat_id="two"))
    await say(writer, "Fresh start.", "two")
    turn = (await writer.backend.recent_turns_of(ALICE, 1))[0]
    vector = bytes(range(16))
    assert await writer.put_vectors(ALICE, "model", [("turn", turn.turn_id, vector)]) == 1
    assert [v.vector for v in await reader.member_vectors(ALICE, "model")] == [vector]
