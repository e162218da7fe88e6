"""A memory database whose members' keys are not in the key store in use stops `check` and `run` (issue 33,
finding 3): the memory restored alone, a moved volume, a wrong `memory.key_store`. Members forgotten on purpose
(key and rows both gone) and a brand-new install do not."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.__main__ import main
from bot.keys.crypto import generate_master_key_text, parse_master_key
from bot.keys.store import SqliteKeyStore
from tests.keys.test_cli_keys import REQUIRED, config  # noqa: F401 - the operator's config fixture

CONVERSATION = [
    {
        "started_at": "2026-05-01T10:00:00Z",
        "messages": [
            {"role": "user", "content": "My locker code is 4417."},
            {"role": "assistant", "content": "Noted."},
        ],
    }
]


def import_memory(settings: Path, tmp_path: Path, user_id: int) -> None:
    history = tmp_path / f"history-{user_id}.json"
    history.write_text(json.dumps(CONVERSATION))
    assert main(["--config", str(settings), "import-history", str(user_id), str(history)]) == 0


def member_rows(database: Path) -> set[int]:
    with sqlite3.connect(database) as db:
        return {int(row[0]) for row in db.execute("SELECT user_id FROM turns")}


@pytest.fixture
def operator(config: Path, monkeypatch: pytest.MonkeyPatch) -> Path:  # noqa: F811
    """Everything `run` needs but Discord itself, and a master key."""
    monkeypatch.setenv("MEMORY_MASTER_KEY", generate_master_key_text())
    for name, value in REQUIRED.items():
        monkeypatch.setenv(name, value)
    return config


def test_a_removed_key_store_stops_check_and_run_naming_the_setting(
    operator: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    import_memory(operator, tmp_path, 1)
    import_memory(operator, tmp_path, 2)
    shutil.copy(data / "bot.keys.db", tmp_path / "keys-backup.db")
    (data / "bot.keys.db").unlink()  # the memory database restored alone
    capsys.readouterr()

    assert main(["--config", str(operator), "check"]) == 1
    out = capsys.readouterr().out
    failed = [line for line in out.splitlines() if line.startswith("  FAIL")]
    assert len(failed) >= 1 and "2 member(s) (1, 2)" in failed[0] and "memory.key_store (MEMORY_KEY_STORE)" in failed[0]
    assert "restore the key store" in failed[0] and "forget-unreadable --yes" in failed[0]
    assert "Ready to run" not in out

    for command in (["run"], ["migrate"], ["export-user", "1"], ["context", "1"]):
        assert main(["--config", str(operator), *command]) == 2, command  # 2: systemd does not restart it
        err = capsys.readouterr().err
        assert "memory.key_store" in err and "Nothing was changed" in err and "Traceback" not in err, command
    assert not (data / "bot.keys.db").exists(), "no empty key store was created"
    assert member_rows(data / "bot.db") == {1, 2}

    shutil.copy(tmp_path / "keys-backup.db", data / "bot.keys.db")  # restored beside the database
    assert main(["--config", str(operator), "export-user", "1"]) == 0
    assert "My locker code is 4417." in capsys.readouterr().out


def test_forget_unreadable_lists_then_deletes_the_members_whose_keys_are_lost(
    operator: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    import_memory(operator, tmp_path, 1)
    (data / "bot.keys.db").unlink()
    capsys.readouterr()

    assert main(["--config", str(operator), "forget-unreadable"]) == 1
    out = capsys.readouterr().out
    assert "1 member with memory that no key in" in out and "opens: 1." in out and "--yes" in out
    assert member_rows(data / "bot.db") == {1}, "nothing is deleted without --yes"

    assert main(["--config", str(operator), "forget-unreadable", "--yes"]) == 0
    assert "Forgot the unreadable memory of 1 member: 1." in capsys.readouterr().out
    assert member_rows(data / "bot.db") == set()
    assert main(["--config", str(operator), "migrate"]) == 0, "the bot starts again"
    import_memory(operator, tmp_path, 1)  # the member starts afresh, under a new key
    assert main(["--config", str(operator), "export-user", "1"]) == 0
    assert "My locker code is 4417." in capsys.readouterr().out


def test_a_new_install_and_members_forgotten_on_purpose_still_start(
    operator: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--config", str(operator), "migrate"]) == 0  # brand new: no member rows, no key store yet
    main(["--config", str(operator), "check"])
    assert "FAIL     MEMORY_MASTER_KEY" not in capsys.readouterr().out

    import_memory(operator, tmp_path, 1)
    import_memory(operator, tmp_path, 2)
    assert main(["--config", str(operator), "forget-user", "1"]) == 0
    capsys.readouterr()
    main(["--config", str(operator), "check"])
    out = capsys.readouterr().out
    assert "ok       memory.master_key (MEMORY_MASTER_KEY) is set and opens the key store" in out
    assert "forget-unreadable" not in out
    assert main(["--config", str(operator), "migrate"]) == 0

    # A forget interrupted between its two steps (the process killed after the key went, before the rows did):
    # the rows left are forgotten data, not lost keys, and do not stop the start; forget-unreadable removes them.
    keys = SqliteKeyStore(tmp_path / "data" / "bot.keys.db", parse_master_key(os.environ["MEMORY_MASTER_KEY"]))
    asyncio.run(delete_key(keys, 2))
    assert member_rows(tmp_path / "data" / "bot.db") == {2}
    assert main(["--config", str(operator), "migrate"]) == 0
    assert main(["--config", str(operator), "export-user", "2"]) == 0
    assert "4417" not in capsys.readouterr().out
    assert main(["--config", str(operator), "forget-unreadable", "--yes"]) == 0
    assert "Forgot the unreadable memory of 1 member: 2." in capsys.readouterr().out
    assert member_rows(tmp_path / "data" / "bot.db") == set()


async def delete_key(keys: SqliteKeyStore, user_id: int) -> None:
    await keys.open()
    try:
        assert await keys.delete(user_id)
    finally:
        await keys.close()


def test_postgresql_memory_without_its_key_store_database_stops_run(
    operator: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    new_postgres_database: Callable[[], str],
) -> None:
    memory_url, keys_url, empty_url = (new_postgres_database() for _ in range(3))
    monkeypatch.setenv("MEMORY_DATABASE_URL", memory_url)
    monkeypatch.setenv("MEMORY_KEY_STORE_URL", keys_url)
    import_memory(operator, tmp_path, 7)
    monkeypatch.setenv("MEMORY_KEY_STORE_URL", empty_url)  # a wrong memory.key_store_url
    capsys.readouterr()
    assert main(["--config", str(operator), "run"]) == 2
    err = capsys.readouterr().err
    assert "1 member(s) (7)" in err and "memory.key_store_url (MEMORY_KEY_STORE_URL)" in err
    assert main(["--config", str(operator), "check"]) == 1
    assert "FAIL" in capsys.readouterr().out
    monkeypatch.setenv("MEMORY_KEY_STORE_URL", keys_url)
    assert main(["--config", str(operator), "export-user", "7"]) == 0
