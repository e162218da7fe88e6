"""A damaged database, as the operator meets it: every command that opens it prints one line naming the setting
and what to do, and exits 2, which systemd's unit does not restart (`run` used to exit 1 and be restarted every
10 s for ever; export-user, forget-user and context ended in a traceback). `run` with Discord unreachable (DNS)
prints one line too."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.__main__ import main
from bot.store.sqlite import SqliteStore
from standins.agora_emulator import TEST_APP_CERTIFICATE, TEST_APP_ID, TEST_CUSTOMER_ID, TEST_CUSTOMER_SECRET
from standins.harness import free_port

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = [
    ["run"],
    ["migrate"],
    ["export-user", "42"],
    ["forget-user", "42"],
    ["context", "42"],
    ["import-history", "42", "conversations.json"],
    ["forget-unreadable"],
    ["backup", "copy.db"],
]


OPERATOR_PREFIXES = ("MEMORY_", "DISCORD_", "AGORA_", "WEB_")


def operator_settings(tmp_path: Path) -> dict[str, str]:
    return {
        "BOT_CONFIG": str(tmp_path / "none.toml"),
        "MEMORY_DATABASE_PATH": str(tmp_path / "bot.db"),
        "DISCORD_TOKEN": "a-token",
        "AGORA_APP_ID": TEST_APP_ID,
        "AGORA_APP_CERTIFICATE": TEST_APP_CERTIFICATE,
        "AGORA_CUSTOMER_ID": TEST_CUSTOMER_ID,
        "AGORA_CUSTOMER_SECRET": TEST_CUSTOMER_SECRET,
    }


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(OPERATOR_PREFIXES)},
        **operator_settings(tmp_path),
        **extra,
    }


def in_a_process(command: list[str], tmp_path: Path) -> tuple[int, str]:
    """``python -m bot COMMAND`` as systemd or an operator starts it: the process's exit status and stderr."""
    result = subprocess.run(
        [sys.executable, "-m", "bot", *command],
        cwd=tmp_path,
        env=environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result.returncode, result.stderr


def in_this_process(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    """The same command through `main` (what ``python -m bot`` exits with), without a process of its own."""
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith(OPERATOR_PREFIXES)]:
        monkeypatch.delenv(name)
    for name, value in operator_settings(tmp_path).items():
        monkeypatch.setenv(name, value)
    status = main(command)
    return status, capsys.readouterr().err


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real database cut short, as a full disk or a crashed copy leaves it."""
    folder = tmp_path_factory.mktemp("damaged")

    async def make() -> None:
        store = SqliteStore(folder / "bot.db")
        await store.open()
        for user in range(200):
            await store.set_consent(user, True, 1.0)
        await store.close()

    asyncio.run(make())
    whole = (folder / "bot.db").read_bytes()
    (folder / "bot.db").write_bytes(whole[: len(whole) // 2])
    return folder / "bot.db"


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_every_command_explains_a_damaged_database_and_exits_2(
    command: list[str],
    damaged: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`run` in a process of its own, as systemd starts it (its exit status is what RestartPreventExitStatus
    reads); the other commands through `main`, which ``python -m bot`` exits with."""
    database = tmp_path / "bot.db"
    database.write_bytes(damaged.read_bytes())
    (tmp_path / "conversations.json").write_text("[]")
    if command == ["run"]:
        status, stderr = in_a_process(command, tmp_path)
    else:
        status, stderr = in_this_process(command, tmp_path, monkeypatch, capsys)
    assert status == 2, stderr
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert f"memory.database_path {database} is not a usable SQLite database" in lines[0]
    assert "restore" in lines[0] and "move the file away" in lines[0]
    assert database.read_bytes() == damaged.read_bytes(), "nothing was written to it"
    assert not (tmp_path / "copy.db").exists()


def test_run_with_discord_unreachable_says_so_in_one_line(tmp_path: Path) -> None:
    """Discord's address does not resolve (no network, broken DNS): one line, exit 1 (systemd tries again)."""
    script = (
        "import sys, discord; discord.http.Route.BASE = 'http://discord.invalid/api/v10'; "
        "from bot.__main__ import main; sys.exit(main(['run']))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=environment(tmp_path, WEB_PORT=str(free_port()), PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("The bot cannot start: Discord cannot be reached (")
    assert "check this machine's internet connection and DNS" in last


def test_copy_db_from_a_damaged_database_names_it_and_exits_2(
    damaged: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "old.db"
    source.write_bytes(damaged.read_bytes())
    command = ["copy-db", "--from", f"sqlite:///{source}", "--to", f"sqlite:///{tmp_path}/new.db"]
    status, stderr = in_this_process(command, tmp_path, monkeypatch, capsys)
    assert status == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr
    assert lines[0].startswith("copy-db: a SQLite database given is not usable (")
    assert f"--from sqlite:///{source}" in lines[0] and "memory.database_path" not in lines[0]
