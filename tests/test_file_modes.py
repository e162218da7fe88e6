"""What the bot writes is its own user's alone: the database (and its -wal and -shm), the key store, the webhook
inbox, backups and the lock file are 0600 in 0700 folders the bot creates, under the usual umask 022 that used
to leave them 0644 in 0755 folders, readable by every local user. A file an older version left readable is made
owner-only when opened. The systemd unit sets UMask=0077 as well."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.__main__ import main
from bot.calls.inbox import WebhookInbox
from bot.keys import generate_master_key_text
from bot.store.sqlite import SqliteStore

ROOT = Path(__file__).resolve().parents[1]


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def usual_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_the_operators_commands_create_owner_only_files(
    tmp_path: Path, usual_umask: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each command through `main` (what ``python -m bot`` exits with), in the operator's folder."""
    data = tmp_path / "var" / "memory"
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("MEMORY_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("BOT_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("MEMORY_DATABASE_PATH", str(data / "bot.db"))
    monkeypatch.setenv("MEMORY_MASTER_KEY", generate_master_key_text())
    assert main(["migrate"]) == 0, capsys.readouterr().err
    assert mode(tmp_path / "var") == 0o700 and mode(data) == 0o700
    assert mode(data / "bot.db") == 0o600 and mode(data / "bot.keys.db") == 0o600

    (tmp_path / "backups").mkdir()  # the operator's own folder: left as they made it
    assert main(["backup", "backups/bot-1.db"]) == 0, capsys.readouterr().err
    assert mode(tmp_path / "backups" / "bot-1.db") == 0o600

    assert main(["restore", "backups/bot-1.db"]) == 0, capsys.readouterr().err
    kept = list(data.glob("bot.db.before-restore-*"))
    assert len(kept) == 1 and mode(kept[0]) == 0o600
    assert mode(data / "bot.db") == 0o600 and mode(data / "bot.db.lock") == 0o600


async def test_the_running_database_and_the_webhook_inbox_are_owner_only(tmp_path: Path, usual_umask: None) -> None:
    database = tmp_path / "data" / "bot.db"
    store = SqliteStore(database)
    await store.open()
    try:
        await store.set_consent(1, True, 1.0)
        assert mode(database) == 0o600
        assert mode(database.with_name("bot.db-wal")) == 0o600 and mode(database.with_name("bot.db-shm")) == 0o600
    finally:
        await store.close()
    inbox = WebhookInbox.beside(database)
    kept = inbox.put(b'{"noticeId": "n1", "eventType": 201, "payload": {}}')
    assert kept is not None and mode(kept) == 0o600 and mode(kept.parent) == 0o700


async def test_a_database_left_readable_by_an_older_version_is_made_owner_only(tmp_path: Path) -> None:
    database = tmp_path / "bot.db"
    store = SqliteStore(database)
    await store.open()
    await store.close()
    os.chmod(database, 0o644)
    store = SqliteStore(database)
    await store.open()
    await store.close()
    assert mode(database) == 0o600


def test_the_systemd_unit_and_the_image_keep_the_data_owner_only() -> None:
    unit = (ROOT / "deploy" / "memory-call-bot.service").read_text().splitlines()
    assert "UMask=0077" in unit
    assert "mkdir -m 0700 /data" in (ROOT / "deploy" / "Dockerfile").read_text()  # the volume's folder
