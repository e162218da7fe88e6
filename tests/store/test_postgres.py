"""PostgreSQL's own machinery: migrations, the selection by `memory.database_url`, several processes claiming jobs,
and what forgetting leaves in the cluster's files. (Every other store test runs on both backends: see the `store`
fixture in tests/conftest.py.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest

from bot.__main__ import main
from bot.app import build_store, open_services
from bot.config import load_settings
from bot.memory.service import MemoryService
from bot.store.pg_migrations import PG_LATEST_VERSION
from bot.store.postgres import PostgresStore
from bot.store.repository import SchemaTooNew
from standins.factories import make_call, seed_fact, seed_summary
from standins.harness import free_port
from standins.postgres import PostgresCluster


async def test_fresh_database_is_migrated_once_even_when_processes_start_together(postgres_url: str) -> None:
    stores = [PostgresStore(postgres_url) for _ in range(3)]
    await asyncio.gather(*(s.open() for s in stores))
    try:
        assert [await s.schema_version() for s in stores] == [PG_LATEST_VERSION] * 3
        rows = await stores[0].pool.fetch("SELECT version FROM schema_migrations ORDER BY version")
        assert [r["version"] for r in rows] == list(range(1, PG_LATEST_VERSION + 1))
    finally:
        for s in stores:
            await s.close()


async def test_database_newer_than_the_code_is_refused_clearly(postgres_url: str) -> None:
    store = PostgresStore(postgres_url)
    await store.open()
    await store.pool.execute("INSERT INTO schema_migrations VALUES ($1, 'from the future', 0)", PG_LATEST_VERSION + 1)
    await store.close()
    with pytest.raises(SchemaTooNew, match=r"upgrade the bot, or point memory\.database_url"):
        await PostgresStore(postgres_url).open()


async def test_database_url_selects_postgresql_and_its_password_never_shows(postgres_url: str, tmp_path: Path) -> None:
    settings = load_settings(environ={"MEMORY_DATABASE_URL": postgres_url}, load_dotenv_file=False)
    store = build_store(settings)
    assert isinstance(store, PostgresStore)
    assert "s3cret" not in repr(PostgresStore("postgresql://bot:s3cret@db.example/memory"))
    async with open_services(settings) as services:
        assert await services.store.schema_version() == PG_LATEST_VERSION
        await services.store.set_consent(7, True, 1.0)
    async with open_services(settings) as services:
        user = await services.store.get_user(7)
        assert user is not None and user.consent == "remember"
    plain = load_settings(environ={"MEMORY_DATABASE_PATH": str(tmp_path / "m.db")}, load_dotenv_file=False)
    assert not isinstance(build_store(plain), PostgresStore)


async def test_processes_claiming_at_once_never_take_the_same_job(postgres_url: str) -> None:
    stores = [PostgresStore(postgres_url) for _ in range(4)]
    for s in stores:
        await s.open()
    try:
        for i in range(40):
            assert await stores[0].enqueue_job("extract", f"call-{i}", 1.0)
        claimed = await asyncio.gather(*(stores[i % 4].claim_job(10.0, lease_seconds=60) for i in range(60)))
        jobs = [j for j in claimed if j is not None]
        assert sorted(j.ref_id for j in jobs) == sorted(f"call-{i}" for i in range(40))
        # A lease that ran out (its worker died) is due again, for exactly one claimer.
        again = await asyncio.gather(*(s.claim_job(100.0, lease_seconds=60) for s in stores))
        assert len([j for j in again if j is not None]) == 4 and all(j is None or j.attempts == 2 for j in again)
    finally:
        for s in stores:
            await s.close()


MARKERS = ["zqxmarkeralpha", "zqxmarkerbravo", "zqxmarkercharlie"]


async def test_forget_removes_every_row_and_reports_what_the_cluster_files_still_hold(
    postgres_cluster: PostgresCluster, postgres_url: str
) -> None:
    """Forget deletes the member's rows from every table and index. PostgreSQL does not overwrite deleted tuples
    or recycle the write-ahead log at once, so the text can remain on disk after VACUUM and CHECKPOINT; this test
    measures that residue and pins it, so a change either way is noticed (per-member encryption is to end it)."""
    store = PostgresStore(postgres_url)
    await store.open()
    memory = MemoryService(store, budget_tokens=1500, persona="p")
    call = make_call(user_id=77, state="ended")
    await store.create_call(call)
    await memory.record_snapshot(
        call, [("user", f"my secret word is {MARKERS[0]}"), ("assistant", f"noted {MARKERS[1]}")], max_history=32
    )
    await seed_fact(store, 77, f"Secret word is {MARKERS[2]}", 1.0, call_id=call.call_id)
    await seed_summary(store, f"Talked about {MARKERS[0]}", call_id=call.call_id)
    keeper = make_call(user_id=78, state="ended")
    await store.create_call(keeper)
    await memory.record_snapshot(keeper, [("user", "zqxkeepme stays")], max_history=32)

    result = await memory.forget_everything(77)
    await memory.wait_scrubbed()
    assert result.turns == 2 and result.facts == 1 and result.calls == 1

    # No row anywhere still holds the text, and no index finds it.
    tables = [r["relname"] for r in await store.pool.fetch("SELECT relname FROM pg_stat_user_tables")]
    for table in tables:
        hits = await store.pool.fetchval(f"SELECT COUNT(*) FROM {table} t WHERE t::text LIKE '%zqxmarker%'")
        assert hits == 0, f"{table} still holds forgotten text"
    assert await store.search_turns(77, MARKERS[0], 10) == []
    assert await store.search_facts(77, MARKERS[2], 10) == []
    assert await store.pool.fetchval("SELECT COUNT(*) FROM turns WHERE search @@ to_tsquery('memory', 'zqxkeepme')")
    await store.close()

    residue = _scan(postgres_cluster, "zqxmarker")
    print(f"forgotten text left in the cluster's files after VACUUM + CHECKPOINT: {residue}")
    assert _scan(postgres_cluster, "zqxkeepme")["wal"], "the scan can see text that was written (it can fail)"
    # Measured: VACUUM frees the dead tuples' space without overwriting it, and the WAL keeps the inserted text
    # until its segments are recycled, so the text is still in both. Pinned so that a change shows up.
    assert residue == {"tables_and_indexes": True, "wal": True}


def _scan(cluster: PostgresCluster, needle: str) -> dict[str, bool]:
    """Whether `needle` sits in the table/index files (base/) or the write-ahead log (pg_wal/)."""
    found = {"tables_and_indexes": False, "wal": False}
    for part, folder in (("tables_and_indexes", "base"), ("wal", "pg_wal")):
        for path in (cluster.data / folder).rglob("*"):
            if path.is_file() and needle.encode() in path.read_bytes():
                found[part] = True
                break
    return found


async def test_wrong_password_or_host_fails_at_open_naming_postgresql(postgres_cluster: PostgresCluster) -> None:
    store = PostgresStore(postgres_cluster.url("no_such_database"))
    with pytest.raises(asyncpg.InvalidCatalogNameError):
        await store.open()


def test_migrate_and_the_sqlite_only_commands_with_a_database_url(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEMORY_DATABASE_URL", postgres_url)
    assert main(["migrate"]) == 0
    out = capsys.readouterr().out
    assert f"is at schema {PG_LATEST_VERSION}." in out and "postgresql://" in out
    assert not (tmp_path / "data" / "bot.db").exists(), "no SQLite file was made"
    assert main(["backup", str(tmp_path / "b.db")]) == 1
    assert "with memory.database_url (PostgreSQL) use pg_dump" in capsys.readouterr().err


def test_check_reaches_postgresql_reads_its_schema_and_names_the_setting(
    postgres_cluster: PostgresCluster,
    postgres_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEMORY_DATABASE_URL", postgres_url)
    main(["check"])
    out = capsys.readouterr().out
    assert "memory.database_url postgresql://" in out and "reachable and empty" in out
    assert main(["migrate"]) == 0
    capsys.readouterr()
    main(["check"])
    assert f"is reachable, at schema {PG_LATEST_VERSION}" in capsys.readouterr().out

    monkeypatch.setenv("MEMORY_DATABASE_URL", postgres_cluster.url("no_such_database"))
    assert main(["check"]) == 1
    out = capsys.readouterr().out
    assert "FAIL     memory.database_url postgresql://" in out and "refused the connection" in out
    assert "no_such_database" in out

    monkeypatch.setenv("MEMORY_DATABASE_URL", f"postgresql://bot:secret-pw@127.0.0.1:{free_port()}/memory")
    assert main(["check"]) == 1
    out = capsys.readouterr().out
    assert "FAIL     memory.database_url" in out and "cannot reach the PostgreSQL server" in out
    assert "secret-pw" not in out
