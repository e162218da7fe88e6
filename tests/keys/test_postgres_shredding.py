"""Member encryption on PostgreSQL: the key store in its own database, and crypto-shredding of a copy of the memory
cluster's data directory taken before a forget.

Both scans read every byte of a throwaway cluster of this module's own (run with ``wal_recycle = off``, as the
README asks of a key store's server), so dead tuples and WAL are looked at as well as the live tables."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import asyncpg
import pytest

from bot.__main__ import main
from bot.keys import DecryptionFailed, KeyStoreLocked, generate_master_key_text, parse_master_key
from bot.keys.encrypted import EncryptedStore
from bot.keys.pg_store import PostgresKeyStore, check_unlockable_pg
from bot.memory.service import MemoryService
from bot.store.models import ChatRecord, Conversation
from bot.store.pg_migrations import PG_MIGRATIONS
from bot.store.postgres import PostgresStore
from bot.store.repository import Store
from standins.factories import make_call
from standins.postgres import PostgresCluster, database_name
from tests.keys.test_shredding import GONE, KEPT, SECRETS, assert_readable_only_for_the_kept_member, plain_terms

MARKER = "Marker-Kinkajou-4410 keeps bees"


@pytest.fixture(scope="module")
def quiet_cluster() -> Iterator[PostgresCluster]:
    """A cluster of this module's own: its data directory holds only what these tests write."""
    yield from running_cluster_with("-c wal_recycle=off")


def running_cluster_with(options: str) -> Iterator[PostgresCluster]:
    cluster = PostgresCluster(options)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def data_bytes(cluster: PostgresCluster) -> list[tuple[Path, bytes]]:
    """Every file of the cluster's data directory (tables, indexes, pg_wal, ...), read whole."""
    return [(p, p.read_bytes()) for p in sorted(cluster.data.rglob("*")) if p.is_file()]


def holding(files: list[tuple[Path, bytes]], needle: bytes) -> list[str]:
    return [str(p) for p, data in files if needle in data]


async def stored_wrapped(url: str, user_id: int) -> bytes:
    db = await asyncpg.connect(url)
    try:
        value = await db.fetchval("SELECT wrapped FROM member_keys WHERE user_id = $1", user_id)
    finally:
        await db.close()
    assert value is not None
    return bytes(value)


def new_master() -> bytes:
    return parse_master_key(generate_master_key_text())


async def test_deleting_a_member_key_leaves_no_copy_in_the_key_store_clusters_files(
    quiet_cluster: PostgresCluster,
) -> None:
    url, master = quiet_cluster.new_database(), new_master()
    keys = PostgresKeyStore(url, master)
    await keys.open()
    for user_id in range(1, 40):  # neighbours on the same pages
        await keys.cipher(user_id)
    victim = await keys.cipher(7)
    assert victim is not None
    blob = victim.encrypt("facts.text", MARKER)
    wrapped = await stored_wrapped(url, 7)
    quiet_cluster.psql("postgres", "CHECKPOINT")
    assert holding(data_bytes(quiet_cluster), wrapped), "the scan must be able to find the key"

    assert await keys.delete(7) is True
    left = holding(data_bytes(quiet_cluster), wrapped)
    assert left == [], f"the deleted member's wrapped key is still in {left}"
    assert await keys.cipher(7, create=False) is None
    assert await keys.delete(7) is False
    await keys.close()

    again = PostgresKeyStore(url, master)  # a new key made later for the same member opens nothing older
    await again.open()
    fresh = await again.cipher(7)
    assert fresh is not None
    with pytest.raises(DecryptionFailed):
        fresh.decrypt("facts.text", blob)
    assert await again.cipher(8, create=False) is not None  # every other member keeps their key
    await again.close()


@pytest.mark.parametrize("given", ["wrong", "missing"])
async def test_a_wrong_or_missing_master_key_opens_no_postgresql_key_store_and_writes_nothing(
    postgres_cluster: PostgresCluster, new_postgres_database: Callable[[], str], given: str
) -> None:
    url = new_postgres_database()
    keys = PostgresKeyStore(url, new_master())
    await keys.open()
    await keys.cipher(1)
    await keys.close()
    before = postgres_cluster.psql(database_name(url), "SELECT * FROM member_keys, key_store_meta")

    with pytest.raises(KeyStoreLocked) as caught:
        if given == "wrong":
            await PostgresKeyStore(url, new_master()).open()
        else:
            await check_unlockable_pg(url, None)
    message = str(caught.value)
    assert "MEMORY_MASTER_KEY" in message and "Nothing was changed" in message and "\n" not in message
    assert postgres_cluster.psql(database_name(url), "SELECT * FROM member_keys, key_store_meta") == (before)


async def test_rotation_rewraps_every_postgresql_key_and_a_process_started_before_cannot_add_one(
    new_postgres_database: Callable[[], str],
) -> None:
    url, old, new = new_postgres_database(), new_master(), new_master()
    running = PostgresKeyStore(url, old)
    await running.open()
    blobs = {}
    for user_id in (1, 2, 3):
        cipher = await running.cipher(user_id)
        assert cipher is not None
        blobs[user_id] = cipher.encrypt("turns.content", f"{MARKER} {user_id}")
    rotating = PostgresKeyStore(url, old)
    await rotating.open()
    assert await rotating.rotate(new) == 3
    await rotating.close()

    with pytest.raises(KeyStoreLocked, match="rotated"):
        await running.cipher(4)
    await running.close()
    with pytest.raises(KeyStoreLocked):
        await PostgresKeyStore(url, old).open()
    rotated = PostgresKeyStore(url, new)
    await rotated.open()
    for user_id, blob in blobs.items():
        cipher = await rotated.cipher(user_id, create=False)
        assert cipher is not None and cipher.decrypt("turns.content", blob) == f"{MARKER} {user_id}"
    assert await rotated.count() == 3
    await rotated.close()


async def remember(store: Store, memory: MemoryService, user_id: int) -> None:
    """Through the production write paths: a call's lines, the post-call job's summary and facts (one replacing
    another: an earlier version is kept), and a text chat's line."""
    a, b, c, d = SECRETS[user_id]
    call = make_call(user_id=user_id, state="ended")
    await store.create_call(call)
    await memory.record_snapshot(
        call, [("user", f"I keep {a} near the {b}"), ("assistant", f"Noted, {a} by the {b}.")], max_history=32
    )
    for facts, summary in (([(f"Likes {c}", ())], f"Talked about {a} and {c}"), (None, None)):
        await store.enqueue_job("post_call", f"{call.call_id}-{summary is None}", 1.0)
        job = await store.claim_job(1.0, 60.0)
        assert job is not None
        if facts is None:  # the second pass replaces the first fact with a longer one
            [old] = await store.list_facts(user_id)
            facts = [(f"Likes {c} and {d}", (old.fact_id,))]
        await store.apply_extraction(
            job.job_id,
            job.attempts,
            user_id,
            2.0,
            Conversation.of(call_id=call.call_id),
            new_facts=facts,
            summary=summary,
        )
    chat = ChatRecord(f"chat-{user_id}", user_id, None, False, 3.0, 3.0)
    await store.create_chat(chat)
    await store.append_chat_turn(chat.chat_id, user_id, "user", f"Any news about {d}?", 3.0)


async def test_a_copy_of_the_postgresql_data_directory_taken_before_a_forget_is_unreadable_for_that_member(
    quiet_cluster: PostgresCluster, new_postgres_database: Callable[[], str]
) -> None:
    """The memory is in the quiet cluster; the key store in another server (the session's), as in production."""
    memory_url, keys_url = quiet_cluster.new_database(), new_postgres_database()
    master = new_master()
    keys = PostgresKeyStore(keys_url, master)
    await keys.open()
    store = EncryptedStore(PostgresStore(memory_url), keys)
    await store.open()
    memory = MemoryService(store, budget_tokens=1500, persona="p", keys=keys)
    try:
        for user_id in (GONE, KEPT):
            await remember(store, memory, user_id)
        found = await store.search_turns(GONE, "zorblax", 5)
        assert found and SECRETS[GONE][0] in found[0].content  # search works on the hashed index
        assert len(await store.list_facts(GONE, include_superseded=True)) == 2
        quiet_cluster.psql("postgres", "CHECKPOINT")
        everything = data_bytes(quiet_cluster)
        for user_id in (GONE, KEPT):
            for term in plain_terms(SECRETS[user_id]):
                assert not holding(everything, term.encode()), f"{term!r} was written in the clear"
        assert not holding(everything, b"Noted")

        copy = quiet_cluster.copy()  # the backup: the data directory as it is now, started on another port
        try:
            await memory.forget_everything(GONE)
            await memory.wait_scrubbed()
            quiet_cluster.psql("postgres", "CHECKPOINT")
            copy.psql("postgres", "CHECKPOINT")
            for where, files in (("live", data_bytes(quiet_cluster)), ("copy", data_bytes(copy))):
                for user_id in (GONE, KEPT):
                    for term in plain_terms(SECRETS[user_id]):
                        assert not holding(files, term.encode()), f"{where} files hold {term!r} in the clear"

            database = database_name(memory_url)
            copied = EncryptedStore(PostgresStore(copy.url(database)), keys)  # with the live key store
            await copied.open()
            try:
                await assert_readable_only_for_the_kept_member(copied)
            finally:
                await copied.backend.close()
        finally:
            copy.stop()
    finally:
        await store.backend.close()
        await keys.close()


def test_an_unencrypted_postgresql_database_is_encrypted_in_place_by_migrate(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    postgres_cluster: PostgresCluster,
    new_postgres_database: Callable[[], str],
) -> None:
    memory_url, keys_url = new_postgres_database(), new_postgres_database()

    async def today() -> None:  # a database as today's bot writes it without encryption
        store = PostgresStore(memory_url)
        await store.open()
        memory = MemoryService(store, budget_tokens=1500, persona="p")
        for user_id in (GONE, KEPT):
            await remember(store, memory, user_id)
        assert await store.schema_version() == PG_MIGRATIONS[-1][0]
        await store.close()

    asyncio.run(today())
    database = database_name(memory_url)
    assert SECRETS[GONE][0] in postgres_cluster.psql(database, "SELECT content FROM turns")
    monkeypatch.chdir(tmp_path)
    for name in ("BOT_CONFIG", "MEMORY_NEW_MASTER_KEY", "LLM_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MEMORY_MASTER_KEY", generate_master_key_text())
    monkeypatch.setenv("MEMORY_DATABASE_URL", memory_url)
    monkeypatch.setenv("MEMORY_KEY_STORE_URL", keys_url)
    config = tmp_path / "config.toml"
    config.write_text("")

    assert main(["--config", str(config), "migrate"]) == 0
    assert "encrypted with their own key" in capsys.readouterr().out
    stored = postgres_cluster.psql(
        database,
        "SELECT content, search::text FROM turns UNION ALL SELECT text, search::text FROM facts "
        "UNION ALL SELECT summary, '' FROM calls UNION ALL SELECT summary, '' FROM chats",
    )
    for user_id in (GONE, KEPT):
        for term in plain_terms(SECRETS[user_id]):
            assert term not in stored, f"{term!r} is still in the clear (rows or their tsvector) after migrate"

    assert main(["--config", str(config), "export-user", str(GONE)]) == 0
    export = json.loads(capsys.readouterr().out)
    assert export["calls"][0]["turns"][0]["content"] == "I keep zorblaxing near the quindlewoods"
    assert export["calls"][0]["summary"] == "Talked about zorblaxing and frabjousness"
    assert export["chats"][0]["turns"][0]["content"] == "Any news about snickersnacks?"
    assert main(["--config", str(config), "context", str(GONE), "--query", "what about the quindlewood?"]) == 0
    assert "zorblaxing near the quindlewoods" in capsys.readouterr().out
    assert main(["--config", str(config), "migrate"]) == 0  # a second run leaves sealed values alone
    capsys.readouterr()
    assert main(["--config", str(config), "export-user", str(KEPT)]) == 0
    facts = json.loads(capsys.readouterr().out)["facts"]
    assert sorted(f["text"] for f in facts) == ["Likes jubjubbirds", "Likes jubjubbirds and bandersnatches"]
