"""Forgotten text leaves the database file even after a crash or while another program reads it (issue 13,
items 3 and 4)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from bot import cli
from bot.__main__ import main
from bot.app import open_services
from bot.memory.service import MemoryService
from bot.store.sqlite import SqliteStore
from standins.factories import make_call, seed_fact
from standins.harness import make_settings

MARKERS = ["zqxscrubalpha", "zqxscrubbravo"]


def file_bytes(path: Path) -> bytes:
    wal = path.with_name(path.name + "-wal")
    return path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


def left(path: Path) -> list[str]:
    raw = file_bytes(path)
    return [m for m in MARKERS if m.encode() in raw]


async def remember_markers(store: SqliteStore, memory: MemoryService, user_id: int = 77) -> None:
    call = make_call(user_id=user_id, state="ended")
    await store.create_call(call)
    await memory.record_snapshot(call, [("user", f"my word is {MARKERS[0]}")], max_history=32)
    await seed_fact(store, user_id, f"Word is {MARKERS[1]}", 1.0, call_id=call.call_id)


async def test_a_kill_between_forget_and_scrub_is_finished_at_the_next_start(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    path = Path(settings.memory.database_path)
    store = SqliteStore(path)
    await store.open()
    memory = MemoryService(store, budget_tokens=1500, persona="p")
    await remember_markers(store, memory)
    await store.forget_user(77)  # the rows are deleted, then the process dies before any scrub ran
    await store.close()
    assert left(path), "the full-text index still holds the forgotten words (the check can fail)"

    async with open_services(settings) as services:
        await services.start_background()
        assert not await services.store.pending_scrub()
        assert left(path) == []


async def test_the_sweep_finishes_a_pending_scrub(tmp_path: Path) -> None:
    path = tmp_path / "sweep.db"
    store = SqliteStore(path)
    await store.open()
    memory = MemoryService(store, budget_tokens=1500, persona="p")
    await remember_markers(store, memory)
    await store.forget_user(77)
    assert await store.pending_scrub()
    assert await memory.finish_pending_scrubs()
    assert left(path) == [] and not await store.pending_scrub()
    await store.close()


async def test_forget_while_another_connection_reads_is_retried_until_the_reader_closes(tmp_path: Path) -> None:
    path = tmp_path / "reader.db"
    store = SqliteStore(path)
    await store.open()
    memory = MemoryService(store, budget_tokens=1500, persona="p")
    await remember_markers(store, memory)
    reader = sqlite3.connect(path)  # a backup or an admin's shell in the middle of a read transaction
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM turns").fetchone()

    await memory.forget_everything(77)
    assert not await memory.wait_scrubbed(within=0.5), "it must not claim the text is gone"
    assert await store.pending_scrub()
    assert left(path), "the reader keeps the old pages in the log"

    reader.rollback()
    reader.close()
    assert await memory.wait_scrubbed(within=10)
    assert left(path) == []
    await store.close()


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in ("DISCORD_TOKEN", "AGORA_APP_ID", "AGORA_CUSTOMER_ID", "LLM_BASE_URL", "BOT_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "config.toml"
    path.write_text(f'[memory]\ndatabase_path = "{tmp_path / "bot.db"}"\n')
    return path


async def _seed(path: Path) -> None:
    store = SqliteStore(path)
    await store.open()
    await remember_markers(store, MemoryService(store, budget_tokens=1500, persona="p"), user_id=555)
    await store.close()


def test_cli_forget_user_says_when_the_scrub_could_not_complete(
    config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    db = tmp_path / "bot.db"
    asyncio.run(_seed(db))
    monkeypatch.setattr(cli, "FORGET_SCRUB_WAIT_SECONDS", 0.5)
    reader = sqlite3.connect(db)
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM turns").fetchone()
    try:
        assert main(["--config", str(config), "forget-user", "555"]) == cli.EXIT_NOT_SCRUBBED
        out = capsys.readouterr().out
        assert "Forgot user 555" in out and "Not complete yet" in out and "another program" in out
    finally:
        reader.rollback()
        reader.close()
    assert main(["--config", str(config), "forget-user", "555"]) == 0
    assert "Not complete" not in capsys.readouterr().out
    assert left(db) == []
