"""Each line's specifics (bot.store.specifics) are stored with it, counted from the plain text, on both backends and
behind the encrypting layer; a call start reads its facts and lines in one trip (``call_start_memory``) and ranks the
lines by their stored columns."""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from pathlib import Path

import pytest

from bot.keys import DecryptionFailed, SqliteKeyStore, generate_master_key_text, parse_master_key
from bot.keys.crypto import MemberCipher
from bot.keys.encrypted import EncryptedStore
from bot.keys.sealed import unseal
from bot.memory.service import MemoryService
from bot.store.columns import turn_record
from bot.store.models import FactRecord, NewTurn, RecentLines, TurnUpdate
from bot.store.postgres import PostgresStore
from bot.store.repository import Store
from bot.store.specifics import specifics
from bot.store.sqlite import SqliteStore
from standins.factories import extract, make_call, seed_chat, seed_fact, seed_facts

LINES = [
    ("assistant", "Hello, what can I do for you?"),
    ("user", "My flight to Lisbon is on March 3 at 7:45, I decided to book the window seat"),
    ("user", "ok"),
    ("assistant", "Noted: Lisbon, March 3, window seat."),
]


async def write_call(store: Store, user_id: int, at: float, lines: list[tuple[str, str]] = LINES) -> str:
    call = make_call(user_id, state="ended", started_at=at, ended_at=at + 60)
    await store.create_call(call)
    inserts = [NewTurn(role, text, at + i, i) for i, (role, text) in enumerate(lines)]  # type: ignore[arg-type]
    assert await store.apply_call_turns(call.call_id, user_id, inserts, [], anchored=True, checkpoint_at=at)
    return call.call_id


@pytest.mark.parametrize(
    ("said", "identifier"),
    [
        ("Your confirmation number is FS-447291.", True),
        ("Account is 7789-4456-901, routing is on file", True),
        ("Adding two captain's chairs: $9,124 total.", True),
        ("Yes, DL208 departs Narita at noon", True),
        ("We moved to Porto in 2024", False),
        ("Drama Club meets at 3:00", False),
        ("The wire fee is $35.", False),
    ],
)
def test_a_line_holding_an_identifier_counts_one_more_than_with_a_short_number(said: str, identifier: bool) -> None:
    """A code, an account number, an amount with thousands: a word with a digit and five characters or more. The
    same line with a one-digit number in its place counts one less; a year, a time or a small amount counts the same.
    """
    (word,) = [w for w in said.split() if any(c.isdigit() for c in w)]
    short = said.replace(word.strip(".,"), "7")
    assert specifics(said) - specifics(short) == int(identifier)


async def test_the_latest_lines_said_before_a_time_are_read_oldest_first(store: Store) -> None:
    """What a question naming a day reads (``recent_turns_of(before=...)``): the latest lines said before the end of
    that day, another member's and the call left out excluded, on both backends and behind the encrypting layer."""
    now = time.time()
    early = await write_call(store, 42, now - 1000)
    late = await write_call(store, 42, now - 100)
    await write_call(store, 7, now - 500)
    everything = await store.recent_turns_of(42, 20)
    assert [t.call_id for t in everything] == [early] * 4 + [late] * 4
    before = await store.recent_turns_of(42, 20, before=now - 100)
    assert before == everything[:4], "the lines said before the later call, none of the other member's"
    assert await store.recent_turns_of(42, 2, before=now - 997) == everything[1:3], "the latest two, oldest first"
    assert await store.recent_turns_of(42, 20, exclude_call_id=early, before=now) == everything[4:]
    assert await store.recent_turns_of(42, 20, before=now - 1000) == []


def specifics_read(recent: RecentLines) -> list[int | None]:
    return [row[RecentLines.SPECIFICS] for row in recent.rows]


async def test_lines_keep_the_specifics_of_their_plain_text_and_a_call_start_reads_them_with_their_text(
    store: Store,
) -> None:
    now = time.time()
    call_id = await write_call(store, 42, now - 100)
    chat_id = await seed_chat(store, 42, now - 50)
    await store.append_chat_turn(chat_id, 42, "user", "Call me Ana, I love Tuesday yoga", now - 40)
    await write_call(store, 7, now - 30)  # another member's lines

    _, recent = await store.call_start_memory(42, facts=10, lines=10)
    turns = await store.recent_turns_of(42, 10)
    assert [recent.line(at) for at in range(len(recent))] == turns
    assert [recent.line(at).content for at in range(len(recent))] == [t.content for t in turns]
    expected = [specifics(text) for _, text in LINES] + [specifics("Call me Ana, I love Tuesday yoga")]
    assert specifics_read(recent) == expected
    assert expected[1] > expected[2] == 0
    assert list(recent.newest_first()) == turns[::-1]
    _, latest = await store.call_start_memory(42, facts=10, lines=2)
    assert [latest.line(at) for at in range(len(latest))] == turns[-2:], "the latest lines, oldest first"

    first = turns[0]
    assert await store.apply_call_turns(
        call_id,
        42,
        [],
        [TurnUpdate(first.turn_id, 0, "Switch it to Friday 9 am", 0, False, 0)],
        anchored=True,
        checkpoint_at=now,
    )
    _, updated = await store.call_start_memory(42, facts=10, lines=10)
    assert specifics_read(updated)[0] == specifics("Switch it to Friday 9 am")


async def test_a_call_start_reads_the_first_page_of_current_facts_in_list_order(store: Store) -> None:
    now = time.time()
    call_id = await write_call(store, 42, now - 100)
    older = await seed_facts(store, 42, ["likes tea", "lives in Porto", "has a cat"], now - 90, call_id=call_id)
    await seed_facts(store, 42, ["likes coffee now", "works nights"], now - 50)  # ties on confirmed_at
    await seed_fact(store, 42, "moved to Lisbon", now - 40, replaces=[older[1].fact_id])  # one superseded
    await extract(store, 42, now - 30, call_id=call_id, confirmed=[older[2].fact_id])  # mentioned again
    await seed_facts(store, 7, ["another member's fact"], now - 20)
    current = await store.list_facts(42)
    assert len(current) == 5 and older[1].fact_id not in {f.fact_id for f in current}
    for size in (0, 1, 3, 5, 10):
        page, _ = await store.call_start_memory(42, facts=size, lines=10)
        assert page == current[:size]
        assert [f.text for f in page] == [f.text for f in current[:size]]


@pytest.mark.parametrize("store", ["sqlite-encrypted", "postgresql-encrypted"], indirect=True)
async def test_an_encrypted_call_start_opens_only_the_facts_it_reads(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The facts' text is decrypted when read (a call start renders only those that fit), once each: the first
    one at the call start (it checks the cached key still opens this member's values, keys/reading.py). A value
    that does not open (here another member's) fails at that read, or, as the first, is left out."""
    assert isinstance(store, EncryptedStore)
    now = time.time()
    await seed_facts(store, 42, [f"fact number {n}" for n in range(6)], now - 100)
    await seed_facts(store, 7, ["another member's fact"], now - 100)
    current = await store.list_facts(42)
    opened: list[str] = []

    def counting(cipher: MemberCipher, column: str, value: str) -> str:
        opened.append(column)
        return unseal(cipher, column, value)

    monkeypatch.setattr("bot.keys.records.unseal", counting)
    monkeypatch.setattr("bot.keys.reading.unseal", counting)
    page, _ = await store.call_start_memory(42, facts=6, lines=10)
    assert opened == ["facts.text"]
    for _ in range(2):
        assert [f.text for f in page[:2]] == [f.text for f in current[:2]]
    assert opened == ["facts.text", "facts.text"]
    assert page == current and [dataclasses.replace(f) for f in page] == current

    sealed = (await store.backend.call_start_memory(42, facts=6, lines=0))[0]
    foreign = (await store.backend.list_facts(7))[0].text
    moved = [sealed[0], dataclasses.replace(sealed[1], text=foreign), *sealed[2:]]

    async def backend_page(user_id: int, *, facts: int, lines: int) -> tuple[list[FactRecord], RecentLines]:
        return moved, RecentLines([], turn_record)

    monkeypatch.setattr(store.backend, "call_start_memory", backend_page)
    page, _ = await store.call_start_memory(42, facts=6, lines=10)
    assert page[0].text == current[0].text
    with pytest.raises(DecryptionFailed):
        _ = page[1].text

    moved[:2] = [dataclasses.replace(sealed[0], text=foreign), sealed[1]]
    page, _ = await store.call_start_memory(42, facts=6, lines=10)
    assert [f.text for f in page] == [f.text for f in current[1:]], "the first value, which does not open, is left out"


async def open_sqlite(path: Path, keys: SqliteKeyStore, encrypted: bool) -> Store:
    """The SQLite store at ``path``, opened, plain or behind the encrypting layer with ``keys``."""
    store: Store = EncryptedStore(SqliteStore(path), keys) if encrypted else SqliteStore(path)
    await store.open()
    return store


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
        store = await open_sqlite(path, keys, encrypted)
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
        _, recent = await store.call_start_memory(42, facts=0, lines=100)
        assert set(specifics_read(recent)) == {None}
        await store.close()

        store = await open_sqlite(path, keys, encrypted)
        _, recent = await store.call_start_memory(42, facts=0, lines=100)
        assert specifics_read(recent) == [specifics(recent.line(at).content) for at in range(len(recent))]
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
    assert set(specifics_read((await store.call_start_memory(43, facts=0, lines=100))[1])) == {None}
    await store.close()

    store = PostgresStore(postgres_url)
    await store.open()
    _, recent = await store.call_start_memory(43, facts=0, lines=100)
    assert len(recent) == 3 * len(LINES)
    assert specifics_read(recent) == [specifics(recent.line(at).content) for at in range(len(recent))]
    await store.close()


SAID_WITH_CODES = [
    ("user", "Please book the table for our anniversary"),
    ("assistant", "Done, your confirmation code is RB-558213."),
    ("user", "ok thanks"),
]


async def test_migration_21_counts_again_the_lines_with_a_digit(tmp_path: Path) -> None:
    """Lines counted before identifiers counted (stale here: every count 5) are counted again when the store opens
    after migration 21: a plain line without a digit keeps its count; sealed lines (their text is not readable in
    the migration) are all counted again, by the encrypting layer."""
    for encrypted in (False, True):
        path = tmp_path / f"memory-{encrypted}.db"
        keys = SqliteKeyStore(tmp_path / f"keys-{encrypted}.db", parse_master_key(generate_master_key_text()))
        await keys.open()
        store = await open_sqlite(path, keys, encrypted)
        await write_call(store, 42, time.time() - 100, SAID_WITH_CODES)
        await store.close()
        db = sqlite3.connect(path)
        db.execute("UPDATE turns SET specifics = 5")
        db.execute("DELETE FROM schema_migrations WHERE version = 21")
        db.commit()

        store = await open_sqlite(path, keys, encrypted)
        _, recent = await store.call_start_memory(42, facts=0, lines=10)
        said = [recent.line(at).content for at in range(len(recent))]
        assert said == [text for _, text in SAID_WITH_CODES]
        counted = [specifics(text) for text in said]
        assert specifics_read(recent) == (counted if encrypted else [5, counted[1], 5]), "those with a digit"
        assert specifics(said[1]) == 3, "a number, an identifier, a confirmation"
        db.close()
        await store.close()
        await keys.close()


async def test_postgresql_migration_21_counts_again_the_lines_with_a_digit(postgres_url: str) -> None:
    store = PostgresStore(postgres_url)
    await store.open()
    await write_call(store, 44, time.time() - 100, SAID_WITH_CODES)
    await store.pool.execute("UPDATE turns SET specifics = 5 WHERE user_id = 44")
    await store.pool.execute("DELETE FROM schema_migrations WHERE version = 21")
    await store.close()

    store = PostgresStore(postgres_url)
    await store.open()
    _, recent = await store.call_start_memory(44, facts=0, lines=10)
    assert specifics_read(recent) == [5, specifics(SAID_WITH_CODES[1][1]), 5]
    await store.close()
