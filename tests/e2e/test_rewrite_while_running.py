"""The commands that replace or rewrite the database refuse while a real bot process uses it, on SQLite and on
PostgreSQL, and name that process; once the bot has stopped they work. (Restoring under a running bot used to
exit 0 while the bot kept writing to the unlinked old file: a member's next call was confirmed, then gone.)"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx

from bot.keys import generate_master_key_text
from bot.store.backup import backup_database
from bot.store.inuse import PostgresUse
from bot.store.sqlite import SqliteStore
from standins.agora_emulator import (
    TEST_APP_CERTIFICATE,
    TEST_APP_ID,
    TEST_CUSTOMER_ID,
    TEST_CUSTOMER_SECRET,
    running_emulator,
)
from standins.discord_gateway import FakeDiscord
from standins.harness import eventually, free_port

ROOT = Path(__file__).resolve().parents[2]


def environment(tmp_path: Path, port: int, agora_url: str, database: dict[str, str]) -> dict[str, str]:
    config = tmp_path / "config.toml"
    config.write_text(
        f'[agora]\napi_base_url = "{agora_url}"\napp_id = "{TEST_APP_ID}"\n'
        f'[web]\nport = {port}\npublic_url = "http://127.0.0.1:{port}"\n'
        "[calls]\nshutdown_grace_seconds = 1\n"
    )
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("MEMORY_", "DISCORD_", "AGORA_", "WEB_"))},
        "BOT_CONFIG": str(config),
        "DISCORD_TOKEN": "fake-token",
        "AGORA_APP_CERTIFICATE": TEST_APP_CERTIFICATE,
        "AGORA_CUSTOMER_ID": TEST_CUSTOMER_ID,
        "AGORA_CUSTOMER_SECRET": TEST_CUSTOMER_SECRET,
        "MEMORY_KEY_STORE": str(tmp_path / "keys.db"),
        "PYTHONUNBUFFERED": "1",
        **database,
    }


async def start_bot(tmp_path: Path, env: dict[str, str], fake: FakeDiscord, port: int) -> asyncio.subprocess.Process:
    log = (tmp_path / "bot.log").open("ab")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.e2e.bot_process", fake.base_url, fake.gateway_url,
        cwd=ROOT, env=env, stdout=log, stderr=log,
    )  # fmt: skip
    log.close()

    async def serving() -> bool:
        assert process.returncode is None, (tmp_path / "bot.log").read_text()
        try:
            async with httpx.AsyncClient() as http:
                return (await http.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200
        except httpx.TransportError:
            return False

    await eventually(serving, within=60)
    return process


async def stop(process: asyncio.subprocess.Process) -> None:
    process.terminate()
    assert await asyncio.wait_for(process.wait(), timeout=30) == 0


def command(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m bot …` as the operator types it, in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "bot", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


async def test_sqlite_restore_copy_and_rotation_refused_while_the_bot_runs(tmp_path: Path) -> None:
    database = tmp_path / "data" / "bot.db"
    store = SqliteStore(database)
    await store.open()
    await store.set_consent(42, True, 1.0)
    await store.close()
    backup = tmp_path / "backup.db"
    backup_database(database, backup)
    fake = FakeDiscord()
    await fake.start()
    port = free_port()
    try:
        async with running_emulator() as emu:
            env = environment(tmp_path, port, emu.base_url, {"MEMORY_DATABASE_PATH": str(database)})
            bot = await start_bot(tmp_path, env, fake, port)
            try:
                refused = command(env, tmp_path, "restore", str(backup))
                assert refused.returncode == 1
                line = one_line(refused)
                assert line.startswith(f"cannot restore {backup} while a bot process (process {bot.pid}) uses ")
                assert f"memory.database_path {database}: stop it first" in line and "Nothing was changed." in line
                assert not list(database.parent.glob("bot.db.before-restore-*")), "the live file was not touched"

                into = command(
                    env, tmp_path, "copy-db", "--from", f"sqlite:///{backup}", "--to", f"sqlite:///{database}"
                )
                assert into.returncode == 1
                assert one_line(into).startswith(f"cannot copy a database into sqlite:///{database} while a bot")

                keys = {
                    "MEMORY_MASTER_KEY": generate_master_key_text(),
                    "MEMORY_NEW_MASTER_KEY": generate_master_key_text(),
                }
                rotated = command({**env, **keys}, tmp_path, "rotate-master-key")
                assert rotated.returncode == 1
                assert one_line(rotated).startswith(
                    f"cannot rotate the master key while a bot process (process {bot.pid})"
                )

                # Encrypting in place under a bot that writes plain text: refused too, nothing sealed.
                sealed = command({**env, "MEMORY_MASTER_KEY": keys["MEMORY_MASTER_KEY"]}, tmp_path, "migrate")
                assert sealed.returncode == 1
                assert "cannot encrypt the memory database in place while a bot process" in one_line(sealed)
                with sqlite3.connect(database) as db:
                    assert db.execute("SELECT value FROM meta WHERE key = 'memory.encryption'").fetchone() is None
            finally:
                await stop(bot)
    finally:
        await fake.stop()

    restored = command(env, tmp_path, "restore", str(backup))
    assert restored.returncode == 0, restored.stderr
    assert f"Restored {database} from {backup}." in restored.stdout
    assert len(list(database.parent.glob("bot.db.before-restore-*"))) == 1


async def test_postgres_restore_and_copy_into_refused_while_the_bot_runs(tmp_path: Path, postgres_url: str) -> None:
    backup = tmp_path / "backup.db"
    store = SqliteStore(backup)
    await store.open()
    await store.close()
    fake = FakeDiscord()
    await fake.start()
    port = free_port()
    try:
        async with running_emulator() as emu:
            env = environment(tmp_path, port, emu.base_url, {"MEMORY_DATABASE_URL": postgres_url})
            bot = await start_bot(tmp_path, env, fake, port)
            try:
                refused = command(env, tmp_path, "restore", str(backup))
                assert refused.returncode == 1
                line = one_line(refused)
                assert line.startswith(
                    f"cannot restore {backup} while a bot process (memory-call-bot pid {bot.pid} on "
                )
                assert "(running bot)) uses memory.database_url postgresql://" in line and "stop it first" in line

                into = command(env, tmp_path, "copy-db", "--from", f"sqlite:///{backup}", "--to", postgres_url)
                assert into.returncode == 1
                assert f"memory-call-bot pid {bot.pid} on " in one_line(into)
                running = await PostgresUse(postgres_url, "the database").running()  # what `check` reports
                assert running is not None and running.startswith(f"memory-call-bot pid {bot.pid} on ")
            finally:
                await stop(bot)
    finally:
        await fake.stop()

    assert await PostgresUse(postgres_url, "the database").running() is None
    after = command(env, tmp_path, "restore", str(backup))  # stopped: PostgreSQL's own tools restore it
    assert after.returncode == 1 and "pg_restore" in one_line(after)
