"""Start-up problems as an admin meets them: `check` fails on each, `run` stops with one clear line.

`check` must fail on everything that makes `run` fail, must never create or migrate the database, and known
configuration and database problems never print a traceback.
"""

from __future__ import annotations

import socket
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bot.__main__ import main
from bot.store.migrations import LATEST_VERSION, MIGRATIONS
from standins.discord_gateway import FakeDiscord
from standins.harness import TEST_APP_ID, fake_discord_in_thread, free_port

REQUIRED_ENV = {
    "DISCORD_TOKEN": "MTIzNDU2Nzg5MDEyMzQ1Njc4.Gabcde.not-a-real-token-but-shaped-like-one",
    "AGORA_APP_ID": TEST_APP_ID,
    "AGORA_APP_CERTIFICATE": "c" * 32,
    "AGORA_CUSTOMER_ID": "customer",
    "AGORA_CUSTOMER_SECRET": "customer-secret",
    "AGORA_API_BASE_URL": "http://127.0.0.1:9/unset",  # refused at once: `check` never leaves the machine
}


@pytest.fixture
def discord_fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDiscord]:
    with fake_discord_in_thread(monkeypatch) as fake:
        yield fake


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, discord_fake: FakeDiscord) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BOT_CONFIG", raising=False)
    monkeypatch.delenv("LLM_BASE_URL", raising=False)
    for name, value in REQUIRED_ENV.items():
        monkeypatch.setenv(name, value)
    return tmp_path


def write_config(workdir: Path, *, db: Path | None = None, extra: str = "", port: int | None = None) -> Path:
    path = workdir / "config.toml"
    path.write_text(
        f'[memory]\ndatabase_path = "{db or workdir / "bot.db"}"\n\n[web]\nport = {port or free_port()}\n{extra}',
        encoding="utf-8",
    )
    return path


def migrated_db(path: Path) -> Path:
    assert main(["--config", str(write_config(path.parent, db=path)), "migrate"]) == 0
    return path


@pytest.fixture
def listening_port() -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    try:
        yield int(sock.getsockname()[1])
    finally:
        sock.close()


def corrupt(db: Path) -> str:
    db.write_bytes(b"this is not a database, just some text that happens to be here\n" * 200)
    return "is not a usable SQLite database"


def truncated(db: Path) -> str:
    migrated_db(db)
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 3])
    return "is not a usable SQLite database"


def directory(db: Path) -> str:
    db.mkdir()
    return "is a directory"


def newer_schema(db: Path) -> str:
    migrated_db(db)
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, 'future', 0)")
    return f"has schema version 999, but this bot only knows up to {LATEST_VERSION}"


DATABASE_PROBLEMS: dict[str, Callable[[Path], str]] = {
    "corrupt": corrupt,
    "truncated": truncated,
    "directory": directory,
    "newer schema": newer_schema,
}


@pytest.mark.parametrize("problem", DATABASE_PROBLEMS)
def test_a_bad_database_fails_check_and_stops_run_with_one_line(
    workdir: Path, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    db = workdir / "bot.db"
    expected = DATABASE_PROBLEMS[problem](db)
    config = write_config(workdir, db=db)
    capsys.readouterr()

    assert main(["--config", str(config), "check"]) == 1
    out = capsys.readouterr().out
    assert "FAIL     " in out and expected in out
    assert "cannot start until the problems above are fixed" in out

    assert main(["--config", str(config), "run"]) == 2  # the unit's RestartPreventExitStatus: not restarted
    err = capsys.readouterr().err
    assert err.startswith("The bot cannot start: ") and expected in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_port_in_use_fails_check_and_stops_run(workdir: Path, listening_port: int, capsys) -> None:
    config = write_config(workdir, port=listening_port, extra='host = "127.0.0.1"\n')
    assert main(["--config", str(config), "check"]) == 1
    assert f"127.0.0.1:{listening_port} is already in use" in capsys.readouterr().out

    assert main(["--config", str(config), "run"]) == 1
    err = capsys.readouterr().err
    assert f"127.0.0.1:{listening_port} is already in use" in err and len(err.strip().splitlines()) == 1
    assert not (workdir / "bot.db").exists()


def test_an_unresolvable_host_fails_check_and_stops_run(workdir: Path, capsys) -> None:
    # A name with spaces fails in the resolver library itself: no DNS query leaves the machine.
    config = write_config(workdir, extra='host = "no such host"\n')
    assert main(["--config", str(config), "check"]) == 1
    assert "web.host (WEB_HOST) 'no such host' does not resolve" in capsys.readouterr().out

    assert main(["--config", str(config), "run"]) == 1
    err = capsys.readouterr().err
    assert "does not resolve" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("setting", "extra", "expected"),
    [
        ("javascript: SDK URL", '\n[agora]\nsdk_url = "javascript:alert(1)"\n', "agora.sdk_url"),
        ("huge link lifetime", "link_ttl_minutes = 100000000000000\n", "web.link_ttl_minutes"),
        ("call over 72 hours", "\n[calls]\nmax_minutes = 4321\n", "calls.max_minutes"),
        ("public URL without a scheme", 'public_url = "calls.example.org"\n', "web.public_url"),
        ("LLM address without a scheme", '\n[llm]\nbase_url = "api.openai.com/v1"\n', "llm.base_url"),
    ],
)
def test_a_bad_setting_fails_check_and_run_with_its_name(
    workdir: Path, setting: str, extra: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(workdir, extra=extra)
    for command in ("check", "run"):
        assert main(["--config", str(config), command]) == 2
        err = capsys.readouterr().err
        assert f"{expected} in {config}: " in err and "Traceback" not in err, (setting, command, err)


def test_check_never_creates_the_database(workdir: Path, discord_fake: FakeDiscord, capsys) -> None:
    config = write_config(workdir)
    main(["--config", str(config), "check"])
    out = capsys.readouterr().out
    assert f"ok       logged in as {discord_fake.bot_username}" in out
    invite = f"client_id={discord_fake.application_id}&scope=bot+applications.commands&permissions=0"
    assert f"  invite   https://discord.com/oauth2/authorize?{invite}" in out
    assert (
        f"ok       {workdir / 'bot.db'} does not exist yet: `migrate` (or starting the bot) creates it at schema" in out
    )
    assert not (workdir / "bot.db").exists()


def test_check_prints_the_server_and_the_user_install_links(
    workdir: Path, discord_fake: FakeDiscord, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_config(workdir)
    main(["--config", str(config), "check"])
    out = capsys.readouterr().out
    authorize = f"https://discord.com/oauth2/authorize?client_id={discord_fake.application_id}"
    server = f"{authorize}&scope=bot+applications.commands&permissions=0&integration_type=0"
    user = f"{authorize}&scope=applications.commands&integration_type=1"
    assert f"  invite   {server}  (a server admin adds the bot to the server)" in out
    assert f"  invite   {user}  (a member adds it to their own account;" in out

    monkeypatch.setenv("DISCORD_USER_INSTALLS", "false")
    main(["--config", str(config), "check"])
    out = capsys.readouterr().out
    assert server in out and user not in out
    assert "  off      discord.user_installs is false: members cannot add the bot to their own account" in out


def test_check_reports_what_migrate_would_apply_and_changes_nothing(workdir: Path, capsys) -> None:
    db = workdir / "bot.db"
    sqlite3.connect(db).close()  # an empty database file, e.g. created by hand
    main(["--config", str(write_config(workdir, db=db)), "check"])
    pending = ", ".join(f"{number} {name}" for number, name, _sql in MIGRATIONS)
    assert f"ok       {db} is at schema 0: `migrate` (or starting the bot) would apply {pending}" in (
        capsys.readouterr().out
    )
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)


def test_migrate_waits_for_a_write_lock_then_fails_with_one_line(workdir: Path, capsys) -> None:
    db = workdir / "bot.db"
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        holder.execute("PRAGMA journal_mode = WAL")
        holder.execute("BEGIN IMMEDIATE")  # another writer: an admin's sqlite3 shell, say
        config = write_config(workdir, db=db)
        config.write_text(config.read_text().replace("[web]", "lock_timeout_seconds = 0.4\n\n[web]"))
        started = time.monotonic()
        assert main(["--config", str(config), "migrate"]) == 1
        waited = time.monotonic() - started
    finally:
        holder.close()
    err = capsys.readouterr().err
    assert f"the database {db} stayed locked by another program for 0.4 s" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert waited >= 0.35

    assert main(["--config", str(config), "migrate"]) == 0  # once the other writer is gone
    assert f"is at schema {LATEST_VERSION}" in capsys.readouterr().out


def test_a_refused_token_fails_check_and_stops_run(workdir: Path, discord_fake: FakeDiscord, capsys) -> None:
    discord_fake.refused_tokens.add(REQUIRED_ENV["DISCORD_TOKEN"])
    config = write_config(workdir)
    assert main(["--config", str(config), "check"]) == 1
    assert "FAIL     discord.token (DISCORD_TOKEN) was refused by Discord" in capsys.readouterr().out

    assert main(["--config", str(config), "run"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]  # after the start-up log lines
    assert last.startswith("The bot cannot start: discord.token (DISCORD_TOKEN) was refused by Discord")


def test_an_interactions_endpoint_url_fails_check(workdir: Path, discord_fake: FakeDiscord, capsys) -> None:
    discord_fake.interactions_endpoint_url = "https://elsewhere.example/interactions"
    assert main(["--config", str(write_config(workdir)), "check"]) == 1
    assert "FAIL     the application's Interactions Endpoint URL is set" in capsys.readouterr().out


def test_check_logs_no_discord_warning_that_reads_like_a_failure(
    workdir: Path, discord_fake: FakeDiscord, capsys: pytest.CaptureFixture[str]
) -> None:
    """discord.py warned "Guilds intent seems to be disabled" at every check (its HTTP-only login used no intents)."""
    main(["--config", str(write_config(workdir)), "check"])
    captured = capsys.readouterr()
    assert "logged in as" in captured.out  # check did log in to (the fake) Discord
    assert "Guilds intent" not in captured.err and "PyNaCl" not in captured.err
    assert captured.err == "", "no log line amid the report (discord.py's 'logging in using static token')"
