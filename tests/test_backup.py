"""`python -m bot backup FILE` and `restore FILE` as an admin uses them, on a live database in WAL mode."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from bot.__main__ import main
from bot.keys.crypto import generate_master_key_text
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
    remember_for(config, USER, text)


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


# ---- one archive: the database and the member keys together (issue 39, item 5) ----------------------------


def install(folder: Path, monkeypatch: pytest.MonkeyPatch, master: str | None) -> Path:
    """A fresh install in ``folder``: its config.toml, the master key in the environment as .env puts it."""
    folder.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(folder)
    for name in ("BOT_CONFIG", "DISCORD_TOKEN", "AGORA_APP_ID", "LLM_BASE_URL", "MEMORY_KEY_STORE_URL"):
        monkeypatch.delenv(name, raising=False)
    if master is None:
        monkeypatch.delenv("MEMORY_MASTER_KEY", raising=False)
    else:
        monkeypatch.setenv("MEMORY_MASTER_KEY", master)
    path = folder / "config.toml"
    path.write_text(f'[memory]\ndatabase_path = "{folder / "data" / "bot.db"}"\n\n[web]\nport = {free_port()}\n')
    return path


def remember_for(config: Path, user: int, text: str) -> None:
    history = config.parent / f"{user}-{abs(hash(text))}.json"
    history.write_text(
        json.dumps({"started_at": "2026-11-01T10:00:00Z", "messages": [{"role": "user", "content": text}]})
    )
    assert main(["--config", str(config), "import-history", str(user), str(history)]) == 0


def context_of(config: Path, user: int, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    status = main(["--config", str(config), "context", str(user)])
    seen = capsys.readouterr()
    assert status == 0, seen.err
    return seen.out


def test_the_readme_backup_makes_one_archive_that_restores_memory_and_member_keys_into_a_new_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    master = generate_master_key_text()
    old = install(tmp_path / "old-server", monkeypatch, master)
    remember_for(old, USER, "I keep bees on the roof.")
    capsys.readouterr()
    # the README's nightly command, on an install that has no backups folder yet
    assert main(["--config", str(old), "backup", "backups/"]) == 0
    said = capsys.readouterr().out
    archive = next((old.parent / "backups").iterdir())
    assert archive.name.startswith("bot-backup-") and archive.name.endswith(".tar.gz")
    assert f"to {Path('backups') / archive.name} (" in said and "key store" in said and "1 member key" in said
    assert "no longer than 7 days" in said
    assert oct(archive.stat().st_mode & 0o777) == "0o600"
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == ["bot.db", "bot.keys.db", "manifest.json"]

    new = install(tmp_path / "new-server", monkeypatch, master)  # nothing there yet: no database, no key store
    assert main(["--config", str(new), "restore", str(archive)]) == 0
    said = capsys.readouterr().out
    assert "Restored" in said and "the key store" in said and "Start the bot again." in said
    assert "bees on the roof" in context_of(new, USER, capsys)
    assert main(["--config", str(new), "check"]) == 1  # no Discord token here; the database and keys are fine
    report = capsys.readouterr().out
    assert "opens the key store" in report and "1 member key)" in report and "reachable and migrated" in report


def test_a_member_forgotten_after_the_backup_stays_forgotten_when_it_is_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    master = generate_master_key_text()
    config = install(tmp_path / "server", monkeypatch, master)
    remember_for(config, USER, "I keep bees on the roof.")
    remember_for(config, USER + 1, "My secret is the blue door.")
    assert main(["--config", str(config), "backup", "backups/nightly.tar.gz"]) == 0
    archive = config.parent / "backups" / "nightly.tar.gz"
    assert main(["--config", str(config), "forget-user", str(USER + 1)]) == 0
    capsys.readouterr()

    assert main(["--config", str(config), "restore", str(archive)]) == 0
    said = capsys.readouterr().out
    assert f"1 member forgot everything after this backup was made ({USER + 1})" in said
    assert "bees on the roof" in context_of(config, USER, capsys)
    assert "blue door" not in context_of(config, USER + 1, capsys)
    with tarfile.open(archive) as tar:  # the archive itself still holds that key: why it is kept 7 days at most
        assert "bot.keys.db" in tar.getnames()


def test_restore_refuses_an_archive_the_master_key_does_not_open_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    old = install(tmp_path / "old-server", monkeypatch, generate_master_key_text())
    remember_for(old, USER, "I keep bees on the roof.")
    assert main(["--config", str(old), "backup", "backups"]) == 0
    archive = next((old.parent / "backups").iterdir())

    new = install(tmp_path / "new-server", monkeypatch, generate_master_key_text())
    remember_for(new, USER, "I play the oboe.")
    before = sorted(p.name for p in (new.parent / "data").iterdir())
    capsys.readouterr()
    assert main(["--config", str(new), "restore", str(archive)]) == 1
    refused = capsys.readouterr().err
    assert f"MEMORY_MASTER_KEY is not the master key of the key store in {archive}" in refused
    assert "Nothing was changed." in refused
    assert sorted(p.name for p in (new.parent / "data").iterdir()) == before
    assert "oboe" in context_of(new, USER, capsys)


def test_the_docker_way_streams_the_archive_out_of_the_volume_and_back_in(tmp_path: Path) -> None:
    """`docker compose ... exec -T bot python -m bot backup - > FILE` and `... run --rm -T bot python -m bot restore
    - < FILE`: the archive goes through standard output and input, so it leaves the volume in one command."""
    master = generate_master_key_text()

    def bot(folder: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DISCORD_", "AGORA_", "MEMORY_", "LLM_"))}
        env |= {"BOT_CONFIG": str(folder / "none.toml"), "MEMORY_MASTER_KEY": master}
        env["MEMORY_DATABASE_PATH"] = str(folder / "data" / "bot.db")
        folder.mkdir(exist_ok=True)
        return subprocess.run(
            [sys.executable, "-m", "bot", *args], cwd=folder, env=env, input=stdin, capture_output=True, timeout=60
        )

    old = tmp_path / "old"
    history = tmp_path / "history.json"
    history.write_text(
        json.dumps({"started_at": "2026-11-01T10:00:00Z", "messages": [{"role": "user", "content": "I row."}]})
    )
    assert bot(old, "import-history", str(USER), str(history)).returncode == 0
    out = bot(old, "backup", "-")
    assert out.returncode == 0, out.stderr
    assert b"to standard output" in out.stderr and b"1 member key" in out.stderr
    assert out.stdout[:2] == b"\x1f\x8b"  # the gzip archive alone on standard output

    new = tmp_path / "new"
    back = bot(new, "restore", "-", stdin=out.stdout)
    assert back.returncode == 0, back.stderr
    assert b"from standard input" in back.stdout
    read = bot(new, "context", str(USER))
    assert read.returncode == 0 and b"I row." in read.stdout
    assert not [p.name for p in (new / "data").iterdir() if p.name.startswith(".restore")]


def test_backup_to_standard_output_refuses_a_terminal(tmp_path: Path) -> None:
    """`backup -` typed without `> FILE` would pour the compressed archive onto the admin's terminal."""
    import pty

    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISCORD_", "AGORA_", "MEMORY_", "LLM_"))}
    env |= {"BOT_CONFIG": str(tmp_path / "none.toml"), "MEMORY_DATABASE_PATH": str(tmp_path / "data" / "bot.db")}
    assert subprocess.run([sys.executable, "-m", "bot", "migrate"], cwd=tmp_path, env=env, timeout=60).returncode == 0
    main_end, terminal = pty.openpty()
    try:
        ran = subprocess.run(
            [sys.executable, "-m", "bot", "backup", "-"],
            cwd=tmp_path, env=env, stdout=terminal, stderr=subprocess.PIPE, text=True, timeout=60,
        )  # fmt: skip
    finally:
        os.close(terminal)
        os.close(main_end)
    assert ran.returncode == 1
    assert ran.stderr.strip() == "backup - writes the archive to standard output: redirect it into a file (`> FILE`)"
