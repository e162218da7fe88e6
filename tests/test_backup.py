"""`python -m bot backup FILE` and `restore FILE` as an admin uses them, on a live database in WAL mode."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from bot.__main__ import main
from standins.harness import free_port

USER = 555


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in ("BOT_CONFIG", "DISCORD_TOKEN", "AGORA_APP_ID", "LLM_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "config.toml"
    path.write_text(f'[memory]\ndatabase_path = "{tmp_path / "data" / "bot.db"}"\n\n[web]\nport = {free_port()}\n')
    return path


def remember(config: Path, tmp_path: Path, text: str) -> None:
    history = tmp_path / f"{abs(hash(text))}.json"
    history.write_text(
        json.dumps({"started_at": "2026-11-01T10:00:00Z", "messages": [{"role": "user", "content": text}]})
    )
    assert main(["--config", str(config), "import-history", str(USER), str(history)]) == 0


def context_text(config: Path, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["--config", str(config), "context", str(USER)]) == 0
    return capsys.readouterr().out


def test_backup_is_consistent_while_the_database_is_in_use_and_restore_brings_it_back(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "data" / "bot.db"
    remember(config, tmp_path, "I keep bees on the roof.")
    # Another connection (the running bot) writes and keeps its changes in the WAL, not yet in bot.db.
    live = sqlite3.connect(db, isolation_level=None)
    try:
        live.execute("PRAGMA wal_autocheckpoint = 0")
        live.execute("UPDATE turns SET content = 'I keep bees and two goats.'")
        plain_copy = tmp_path / "plain-copy.db"
        shutil.copyfile(db, plain_copy)  # what `cp` would do: misses what is still in the WAL
        with sqlite3.connect(plain_copy) as conn:
            assert conn.execute("SELECT content FROM turns").fetchone() == ("I keep bees on the roof.",)

        target = tmp_path / "backups" / "bot-2026-12-01.db"
        target.parent.mkdir()
        assert main(["--config", str(config), "backup", str(target)]) == 0
        assert f"to {target}" in capsys.readouterr().out
    finally:
        live.close()
    with sqlite3.connect(target) as conn:
        assert conn.execute("SELECT content FROM turns").fetchone() == ("I keep bees and two goats.",)
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)

    assert main(["--config", str(config), "backup", str(target)]) == 1
    assert "already exists" in capsys.readouterr().err

    remember(config, tmp_path, "Something said after the backup.")
    assert "after the backup" in context_text(config, capsys)
    assert main(["--config", str(config), "restore", str(target)]) == 0
    out = capsys.readouterr().out
    assert "Restored" in out and "bot.db.before-restore-" in out
    restored = context_text(config, capsys)
    assert "two goats" in restored and "after the backup" not in restored
    kept = next(db.parent.glob("bot.db.before-restore-*"))
    with sqlite3.connect(kept) as conn:
        assert conn.execute("SELECT count(*) FROM turns").fetchone() == (2,)


def test_restore_replaces_a_damaged_database_and_keeps_the_damaged_file(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "data" / "bot.db"
    remember(config, tmp_path, "I play the oboe.")
    target = tmp_path / "good.db"
    assert main(["--config", str(config), "backup", str(target)]) == 0
    for sidecar in db.parent.glob("bot.db-*"):
        sidecar.unlink()
    db.write_bytes(b"\x00garbage" * 500)
    assert main(["--config", str(config), "check"]) == 1
    assert "is not a usable SQLite database" in capsys.readouterr().out  # the damage is found

    assert main(["--config", str(config), "restore", str(target)]) == 0
    assert "oboe" in context_text(config, capsys)
    kept = next(db.parent.glob("bot.db.before-restore-*"))
    assert kept.read_bytes().startswith(b"\x00garbage")


def test_restore_refuses_a_file_that_is_not_a_backup(config: Path, tmp_path: Path, capsys) -> None:
    remember(config, tmp_path, "I like maps.")
    bogus = tmp_path / "notes.txt"
    bogus.write_text("not a database at all" * 100)
    assert main(["--config", str(config), "restore", str(bogus)]) == 1
    assert "is not a usable SQLite database" in capsys.readouterr().err
    assert "maps" in context_text(config, capsys)  # the database is untouched
