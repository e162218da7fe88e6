"""The master key as an operator handles it: keygen, first run, check, a locked start, rotation."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest
from dotenv import dotenv_values

import tasks
from bot.__main__ import main
from bot.config import load_settings
from bot.keys.crypto import generate_master_key_text, parse_master_key
from bot.keys.pg_store import key_store_state_pg
from bot.keys.store import SqliteKeyStore
from bot.store.sqlite import SqliteStore

MARKER = "Marker-Okapi-8812 takes the 7:15 ferry"
REQUIRED = {
    "DISCORD_TOKEN": "token-not-used",
    "AGORA_APP_ID": "0123456789abcdef0123456789abcdef",
    "AGORA_APP_CERTIFICATE": "c" * 32,
    "AGORA_CUSTOMER_ID": "customer",
    "AGORA_CUSTOMER_SECRET": "secret",
}


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in (
        "BOT_CONFIG",
        "LLM_BASE_URL",
        "MEMORY_MASTER_KEY",
        "MEMORY_NEW_MASTER_KEY",
        "MEMORY_DATABASE_URL",
        "MEMORY_KEY_STORE_URL",
        *REQUIRED,
    ):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "config.toml"
    path.write_text(f'[memory]\ndatabase_path = "{tmp_path / "data" / "bot.db"}"\n')
    return path


def encrypted_member(key_store: Path, master: str, user_id: int = 1) -> bytes:
    """Makes the member's key in the key store and returns a value encrypted with it."""

    async def make() -> bytes:
        keys = SqliteKeyStore(key_store, parse_master_key(master))
        await keys.open()
        cipher = await keys.cipher(user_id)
        await keys.close()
        assert cipher is not None
        return cipher.encrypt("turns.content", MARKER)

    return asyncio.run(make())


def decrypts(key_store: Path, master: str, blob: bytes, user_id: int = 1) -> str | None:
    async def read() -> str | None:
        keys = SqliteKeyStore(key_store, parse_master_key(master))
        await keys.open()
        cipher = await keys.cipher(user_id, create=False)
        await keys.close()
        return None if cipher is None else cipher.decrypt("turns.content", blob)

    return asyncio.run(read())


def digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def test_keygen_prints_a_key_the_settings_accept_on_its_last_line(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keygen"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert len(parse_master_key(last)) == 32
    settings = load_settings(config, {"MEMORY_MASTER_KEY": last})
    assert settings.memory.master_key_bytes() == parse_master_key(last)


def test_a_malformed_master_key_is_a_configuration_problem(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MEMORY_MASTER_KEY", "hunter2")
        assert main(["--config", str(config), "check"]) == 2
    err = capsys.readouterr().err
    assert "memory.master_key (MEMORY_MASTER_KEY)" in err and "keygen" in err and "hunter2" not in err


def test_first_run_writes_a_master_key_into_dotenv_once(tmp_path: Path, config: Path) -> None:
    env = tmp_path / ".env"
    env.write_text("DISCORD_TOKEN=abc\nMEMORY_MASTER_KEY=\nLLM_API_KEY=x")  # as copied from .env.example
    assert tasks.ensure_master_key(env, {}) is True
    lines = env.read_text().splitlines()
    assert lines[0] == "DISCORD_TOKEN=abc" and lines[2] == "LLM_API_KEY=x"
    written = lines[1].split("=", 1)[1]
    assert len(parse_master_key(written)) == 32
    assert env.stat().st_mode & 0o077 == 0
    assert tasks.ensure_master_key(env, {}) is False
    assert env.read_text().splitlines()[1].split("=", 1)[1] == written
    # The bot reads it from .env like every secret (load_settings gets .env's values as its environment).
    settings = load_settings(config, {k: v or "" for k, v in dotenv_values(env).items()})
    assert settings.memory.master_key is not None
    assert settings.memory.master_key.get_secret_value() == written


def test_first_run_keeps_a_master_key_from_the_environment(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    assert tasks.ensure_master_key(env, {"MEMORY_MASTER_KEY": generate_master_key_text()}) is False
    assert not env.exists()
    assert tasks.ensure_master_key(env, {}) is True
    assert env.read_text().startswith("MEMORY_MASTER_KEY=")


def test_a_key_store_in_the_memory_database_itself_is_refused_naming_both_settings(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keys must live apart from the memory they unlock: one database for both is a configuration error."""
    monkeypatch.setenv("MEMORY_MASTER_KEY", generate_master_key_text())
    monkeypatch.setenv("MEMORY_DATABASE_URL", "postgresql://bot:pw@db:5432/memory")
    monkeypatch.setenv("MEMORY_KEY_STORE_URL", "postgresql://keys:pw2@db:5432/memory")
    assert main(["--config", str(config), "migrate"]) == 2
    err = capsys.readouterr().err
    assert "memory.key_store_url (MEMORY_KEY_STORE_URL)" in err and "memory.database_url (MEMORY_DATABASE_URL)" in err
    assert "pw@" not in err and "pw2@" not in err
    assert not (config.parent / "data").exists()  # nothing was created


def test_first_run_makes_a_master_key_for_a_postgresql_database_too(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    url = "postgresql://bot:pw@db:5432/memory"
    env.write_text(f"MEMORY_MASTER_KEY=\nMEMORY_DATABASE_URL={url}\n")
    assert tasks.ensure_master_key(env, {"MEMORY_DATABASE_URL": url}) is True
    values = dotenv_values(env)
    assert values["MEMORY_DATABASE_URL"] == url
    assert parse_master_key(values["MEMORY_MASTER_KEY"] or "")


def test_check_reports_postgresql_memory_encrypted_with_its_key_store(
    config: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    new_postgres_database: Callable[[], str],
) -> None:
    memory_url, keys_url = new_postgres_database(), new_postgres_database()
    monkeypatch.setenv("MEMORY_DATABASE_URL", memory_url)
    main(["--config", str(config), "check"])
    assert "is not set: members' memory (PostgreSQL) is not encrypted" in capsys.readouterr().out

    monkeypatch.setenv("MEMORY_MASTER_KEY", generate_master_key_text())
    monkeypatch.setenv("MEMORY_KEY_STORE_URL", keys_url)
    assert main(["--config", str(config), "migrate"]) == 0
    main(["--config", str(config), "check"])
    out = capsys.readouterr().out
    assert "ok       memory.master_key (MEMORY_MASTER_KEY) is set and opens the key store postgresql://" in out
    assert "members' memory (PostgreSQL) is encrypted with their own keys" in out
    assert "warning  memory.key_store_url: the key store's server runs with wal_recycle = on" in out

    monkeypatch.setenv("MEMORY_MASTER_KEY", generate_master_key_text())
    assert asyncio.run(key_store_state_pg(keys_url))[0] is not None  # migrate made it: its verifier refuses
    assert main(["--config", str(config), "check"]) == 1
    assert "FAIL     MEMORY_MASTER_KEY is not the master key of the key store postgresql://" in capsys.readouterr().out


def test_check_reports_the_master_key_and_the_key_store(config: Path, capsys, monkeypatch) -> None:
    master = generate_master_key_text()
    assert main(["--config", str(config), "check"]) == 1  # no Discord token etc.
    assert "warning  memory.master_key (MEMORY_MASTER_KEY) is not set" in capsys.readouterr().out

    monkeypatch.setenv("MEMORY_MASTER_KEY", master)
    encrypted_member(config.parent / "data" / "bot.keys.db", master)
    main(["--config", str(config), "check"])
    assert "ok       memory.master_key (MEMORY_MASTER_KEY) is set and opens the key store" in capsys.readouterr().out

    monkeypatch.setenv("MEMORY_MASTER_KEY", generate_master_key_text())
    assert main(["--config", str(config), "check"]) == 1
    out = capsys.readouterr().out
    assert "FAIL     MEMORY_MASTER_KEY is not the master key of the key store" in out


@pytest.mark.parametrize("given", ["missing", "wrong"])
def test_starting_with_encrypted_data_and_no_or_the_wrong_master_key_stops_with_one_message(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    master = generate_master_key_text()
    data = config.parent / "data"
    monkeypatch.setenv("MEMORY_MASTER_KEY", master)
    assert main(["--config", str(config), "migrate"]) == 0  # the database and the key store exist
    blob = encrypted_member(data / "bot.keys.db", master)
    capsys.readouterr()
    before = digests(data)
    assert {"bot.db", "bot.keys.db"} <= set(before)

    for name, value in REQUIRED.items():
        monkeypatch.setenv(name, value)
    if given == "missing":
        monkeypatch.delenv("MEMORY_MASTER_KEY")
    else:
        monkeypatch.setenv("MEMORY_MASTER_KEY", generate_master_key_text())
    for command in ("run", "migrate", "forget-user"):
        argv = ["--config", str(config), command] + (["1"] if command == "forget-user" else [])
        assert main(argv) == 2, command
        captured = capsys.readouterr()
        lines = [line for line in captured.err.strip().splitlines() if " INFO " not in line]  # log records aside
        assert len(lines) == 1 and "MEMORY_MASTER_KEY" in lines[0] and "Nothing was changed" in lines[0]
        assert "Traceback" not in captured.err + captured.out
    assert digests(data) == before
    assert decrypts(data / "bot.keys.db", master, blob) == MARKER


def test_rotate_master_key_rewraps_every_key_and_leaves_the_data_alone(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = generate_master_key_text(), generate_master_key_text()
    data = config.parent / "data"
    monkeypatch.setenv("MEMORY_MASTER_KEY", old)
    assert main(["--config", str(config), "migrate"]) == 0
    blobs = {user_id: encrypted_member(data / "bot.keys.db", old, user_id) for user_id in (1, 2)}
    database = hashlib.sha256((data / "bot.db").read_bytes()).hexdigest()

    assert main(["--config", str(config), "rotate-master-key"]) == 1
    assert "Set MEMORY_NEW_MASTER_KEY" in capsys.readouterr().err

    monkeypatch.setenv("MEMORY_NEW_MASTER_KEY", new)
    assert main(["--config", str(config), "rotate-master-key"]) == 0
    out = capsys.readouterr().out
    assert "Rewrapped 2 member keys" in out and "set MEMORY_MASTER_KEY" in out
    assert hashlib.sha256((data / "bot.db").read_bytes()).hexdigest() == database
    for user_id, blob in blobs.items():
        assert decrypts(data / "bot.keys.db", new, blob, user_id) == MARKER

    monkeypatch.delenv("MEMORY_NEW_MASTER_KEY")  # the old key no longer opens the store
    assert main(["--config", str(config), "migrate"]) == 2
    assert "is not the master key" in capsys.readouterr().err
    monkeypatch.setenv("MEMORY_MASTER_KEY", new)
    assert main(["--config", str(config), "migrate"]) == 0


def test_forget_user_destroys_the_members_key_and_keeps_the_others(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    master = generate_master_key_text()
    key_store = config.parent / "data" / "bot.keys.db"
    monkeypatch.setenv("MEMORY_MASTER_KEY", master)
    blobs = {user_id: encrypted_member(key_store, master, user_id) for user_id in (1, 2)}
    assert main(["--config", str(config), "forget-user", "1"]) == 0
    assert decrypts(key_store, master, blobs[1], 1) is None
    assert decrypts(key_store, master, blobs[2], 2) == MARKER


def begin_forget(database: Path, user_id: int) -> None:
    """The first step of a forget of everything, committed, as a forget-user killed right after it leaves it."""

    async def begin() -> None:
        store = SqliteStore(database)
        await store.open()
        await store.begin_forget(user_id)
        await store.close()

    asyncio.run(begin())


def test_check_finishes_a_forget_killed_part_way_and_says_so(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    master = generate_master_key_text()
    data = config.parent / "data"
    monkeypatch.setenv("MEMORY_MASTER_KEY", master)
    assert main(["--config", str(config), "migrate"]) == 0
    blob = encrypted_member(data / "bot.keys.db", master)
    begin_forget(data / "bot.db", 1)
    capsys.readouterr()

    monkeypatch.setenv("MEMORY_MASTER_KEY", generate_master_key_text())  # the key store cannot be opened: not here
    assert main(["--config", str(config), "check"]) == 1
    out = capsys.readouterr().out
    assert "FAIL     the forget of member(s) 1 was interrupted part-way and is not finished" in out
    assert "forget-user 1` (for each of them) or starting the bot finishes it" in out
    assert decrypts(data / "bot.keys.db", master, blob) == MARKER

    monkeypatch.setenv("MEMORY_MASTER_KEY", master)
    main(["--config", str(config), "check"])
    assert "ok       finished the forget of member(s) 1, which had been interrupted part-way" in capsys.readouterr().out
    assert decrypts(data / "bot.keys.db", master, blob) is None
    main(["--config", str(config), "check"])
    assert "forget of member" not in capsys.readouterr().out


def test_forget_user_also_finishes_the_forgets_killed_before(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    master = generate_master_key_text()
    data = config.parent / "data"
    monkeypatch.setenv("MEMORY_MASTER_KEY", master)
    assert main(["--config", str(config), "migrate"]) == 0
    blobs = {user_id: encrypted_member(data / "bot.keys.db", master, user_id) for user_id in (1, 2)}
    begin_forget(data / "bot.db", 2)
    capsys.readouterr()
    assert main(["--config", str(config), "forget-user", "1"]) == 0
    assert "Also finished the forget of member(s) 2, interrupted part-way before." in capsys.readouterr().out
    assert decrypts(data / "bot.keys.db", master, blobs[2], 2) is None
