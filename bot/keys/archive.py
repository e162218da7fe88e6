"""One backup holds everything needed to restore: the memory database and, with member keys, the key store, in
one ``.tar.gz`` archive (with a ``manifest.json`` saying what is in it), put back by one ``restore``.

Both files are copied through SQLite's online backup API while the bot runs, the memory database FIRST: a member's
key is written to the key store before anything sealed with it reaches the database, so every key the database
copy needs is in the key store copy taken after it. A forget in between leaves rows whose key is gone, recorded
as forgotten: forgotten data, as after any forget (``bot.keys.lost``).

Restoring an archive must not bring back a member who forgot everything after it was made: the keys of members
the current key store records as forgotten since then are deleted from the restored key store before it goes in
place, so their rows in the restored database stay unreadable (``forget-unreadable --yes`` removes them).

The master key is never in an archive (it lives in ``.env``): a stolen archive opens only with it. An archive
with member keys is a key store backup, so it is kept no longer than a key store backup (7 days).
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sqlite3
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from bot import __version__
from bot.config import MemorySettings
from bot.keys.store import key_store_state, locked_message
from bot.store.backup import BackupError, copy_sqlite, restore_database, verify_bot_database
from bot.store.private import FILE_MODE, private_file, private_folder

FORMAT = "memory-call-bot backup"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
DATABASE_NAME = "bot.db"
KEY_STORE_NAME = "bot.keys.db"
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")
DATABASE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
KEY_BACKUP_DAYS = 7
"""How long an archive holding member keys may be kept: a member who forgot everything stays readable in it."""


@dataclass(frozen=True)
class Contents:
    """What an archive holds, as its manifest says."""

    created_at: float
    schema: int
    member_keys: int | None
    """How many member keys its key store holds; None when it has no key store (no master key was in use)."""


@dataclass(frozen=True)
class Restored:
    contents: Contents
    saved_database: Path | None
    saved_key_store: Path | None
    still_forgotten: list[int]
    """Members forgotten after the archive was made, whose keys were left out of the restored key store."""


def archive_name(now: float) -> str:
    return f"bot-backup-{time.strftime('%Y-%m-%d-%H%M%S', time.localtime(now))}.tar.gz"


def target_of(destination: Path, now: float) -> Path:
    """Where ``backup DESTINATION`` writes: a name ending in .tar.gz (or .tgz) is the archive itself; any other
    name is a folder (created when missing) that gets an archive named with the date and time."""
    if destination.name.endswith(ARCHIVE_SUFFIXES):
        return destination
    return destination / archive_name(now)


def _verify_key_store(db: sqlite3.Connection, where: Path) -> None:
    check = db.execute("PRAGMA quick_check").fetchone()
    if check is None or check[0] != "ok":
        raise BackupError(f"{where} failed SQLite's integrity check: {check[0] if check else 'no answer'}")
    if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'member_keys'").fetchone() is None:
        raise BackupError(f"{where} is not a key store of this bot (it has no member_keys table)")


def _count(path: Path, sql: str) -> int:
    with contextlib.closing(sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)) as db:
        return int(db.execute(sql).fetchone()[0])


def write_archive(
    database: Path,
    key_store: Path | None,
    out: Path | IO[bytes],
    *,
    lock_timeout_seconds: float = 5.0,
    now: float | None = None,
) -> Contents:
    """Writes the archive of ``database`` and ``key_store`` (when given and present) to the new file ``out`` (its
    missing folders created owner-only) or the stream ``out``. The bot may keep running meanwhile."""
    if not database.is_file():
        raise BackupError(f"memory.database_path {database} does not exist: there is nothing to back up")
    if isinstance(out, Path) and out.exists():
        raise BackupError(f"{out} already exists: choose a new file name, or a folder")
    created_at = time.time() if now is None else now
    with tempfile.TemporaryDirectory(prefix=".backup-", dir=database.parent) as scratch:
        work = Path(scratch)
        copy_sqlite(database, work / DATABASE_NAME, verify_bot_database, lock_timeout_seconds=lock_timeout_seconds)
        member_keys = None
        if key_store is not None and key_store.exists():  # after the database: see the module's note
            copy_sqlite(key_store, work / KEY_STORE_NAME, _verify_key_store, lock_timeout_seconds=lock_timeout_seconds)
            member_keys = _count(work / KEY_STORE_NAME, "SELECT COUNT(*) FROM member_keys")
        contents = Contents(
            created_at=created_at,
            schema=_count(work / DATABASE_NAME, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations"),
            member_keys=member_keys,
        )
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "bot_version": __version__,
            "created_at": created_at,
            "schema": contents.schema,
            "database": DATABASE_NAME,
            "key_store": KEY_STORE_NAME if member_keys is not None else None,
            "member_keys": member_keys,
        }
        if isinstance(out, Path):
            for folder in (out.parent, *out.parent.parents):
                if folder.exists() and not folder.is_dir():
                    raise BackupError(f"{folder} is a file, not a folder: choose another place for {out.name}")
            private_folder(out.parent)
            partial = out.with_name(out.name + ".partial")
            private_file(partial)
            try:
                with tarfile.open(partial, "w:gz") as tar:
                    _add(tar, work, manifest)
            except BaseException:
                partial.unlink(missing_ok=True)
                raise
            partial.replace(out)
        else:
            with tarfile.open(fileobj=out, mode="w|gz") as tar:
                _add(tar, work, manifest)
            out.flush()
    return contents


def _add(tar: tarfile.TarFile, work: Path, manifest: dict[str, object]) -> None:
    text = json.dumps(manifest, indent=2).encode()
    info = tarfile.TarInfo(MANIFEST)
    info.size, info.mode, info.mtime = len(text), FILE_MODE, int(time.time())
    tar.addfile(info, io.BytesIO(text))
    for name in (DATABASE_NAME, KEY_STORE_NAME):
        if (work / name).exists():
            tar.add(work / name, arcname=name, recursive=False)


def is_archive(path: Path) -> bool:
    return path.is_file() and tarfile.is_tarfile(path)


@contextlib.contextmanager
def _unpacked(archive: Path, scratch_in: Path) -> Iterator[tuple[Path, Contents]]:
    """The archive's files in a private scratch folder beside the database, removed afterwards. Only the files a
    backup holds are read out, by name: nothing in an archive can write anywhere else."""
    private_folder(scratch_in)
    with tempfile.TemporaryDirectory(prefix=".restore-", dir=scratch_in) as scratch:
        work = Path(scratch).absolute()  # a relative memory.database_path (data/bot.db) has no file URI
        try:
            with tarfile.open(archive, "r:*") as tar:
                manifest = _manifest(tar, archive)
                for name in (DATABASE_NAME, KEY_STORE_NAME if manifest.member_keys is not None else None):
                    if name is None:
                        continue
                    member = tar.extractfile(name)
                    if member is None:
                        raise BackupError(f"{archive} is damaged: its {name} is not a file")
                    private_file(work / name)
                    with member, (work / name).open("wb") as file:
                        shutil.copyfileobj(member, file)
        except (tarfile.TarError, EOFError, OSError, KeyError) as exc:
            if isinstance(exc, FileNotFoundError | PermissionError):
                raise
            raise BackupError(f"{archive} is not a complete backup archive ({type(exc).__name__}: {exc})") from exc
        yield work, manifest


def _manifest(tar: tarfile.TarFile, archive: Path) -> Contents:
    try:
        member = tar.extractfile(MANIFEST)
        data = json.loads(member.read()) if member is not None else None
    except KeyError:
        data = None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BackupError(f"{archive} is not a backup archive of this bot (it has no {MANIFEST} of one)")
    if int(data.get("format_version", 0)) > FORMAT_VERSION:
        raise BackupError(f"{archive} was made by a newer version of the bot ({data.get('bot_version')}): upgrade")
    keys = data.get("member_keys")
    return Contents(float(data["created_at"]), int(data["schema"]), None if keys is None else int(keys))


def _forget_again(key_store: Path, current: Path, since: float) -> list[int]:
    """Deletes from the restored ``key_store`` the keys of members the ``current`` key store records as
    forgotten after ``since`` (and records them as forgotten there): they stay forgotten."""
    if not current.exists():
        return []
    with contextlib.closing(sqlite3.connect(f"{current.absolute().as_uri()}?mode=ro", uri=True)) as db:
        has_table = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'forgotten_keys'").fetchone()
        forgotten = (
            db.execute("SELECT user_id, deleted_at FROM forgotten_keys WHERE deleted_at >= ?", (since,)).fetchall()
            if has_table
            else []
        )
    if not forgotten:
        return []
    gone = []
    with contextlib.closing(sqlite3.connect(key_store, isolation_level=None)) as db:
        db.execute("PRAGMA secure_delete = ON")
        db.execute("PRAGMA journal_mode = TRUNCATE")
        db.execute("CREATE TABLE IF NOT EXISTS forgotten_keys (user_id INTEGER PRIMARY KEY, deleted_at REAL NOT NULL)")
        db.execute("BEGIN IMMEDIATE")
        for user_id, deleted_at in forgotten:
            if db.execute("DELETE FROM member_keys WHERE user_id = ?", (user_id,)).rowcount:
                gone.append(int(user_id))
            db.execute(
                "INSERT OR REPLACE INTO forgotten_keys (user_id, deleted_at) VALUES (?, ?)", (user_id, deleted_at)
            )
        db.execute("COMMIT")
    return sorted(gone)


async def restore_archive(archive: Path, memory: MemorySettings, *, lock_timeout_seconds: float = 5.0) -> Restored:
    """Puts the archive's database (and key store) in place of the configured ones, each kept beside as
    ``<name>.before-restore-<time>``. Everything is checked before anything is replaced: the database, the key
    store, and that ``MEMORY_MASTER_KEY`` opens it. Stop the bot first (the caller holds the database alone)."""
    import asyncio

    database, key_store = memory.database_path, memory.key_store_path
    with _unpacked(archive, database.parent) as (work, contents):
        with contextlib.closing(sqlite3.connect(f"{(work / DATABASE_NAME).as_uri()}?mode=ro", uri=True)) as db:
            verify_bot_database(db, archive)
        restored_keys = work / KEY_STORE_NAME if contents.member_keys is not None else None
        if restored_keys is not None:
            if memory.key_store_url is not None:
                raise BackupError(
                    f"{archive} holds a SQLite key store, but memory.key_store_url (MEMORY_KEY_STORE_URL) puts the "
                    "key store in PostgreSQL: unset it to restore this archive, or restore the database alone "
                    "from a copy made with `backup FILE.db`. Nothing was changed."
                )
            with contextlib.closing(sqlite3.connect(f"{restored_keys.as_uri()}?mode=ro", uri=True)) as db:
                _verify_key_store(db, archive)
            verifier, count = await key_store_state(restored_keys)
            locked = locked_message(f"in {archive}", memory.master_key_bytes(), verifier, count)
            if locked is not None:
                raise BackupError(locked)
        still_forgotten = (
            await asyncio.to_thread(_forget_again, restored_keys, key_store, contents.created_at)
            if restored_keys is not None
            else []
        )
        saved_database = await asyncio.to_thread(
            restore_database, work / DATABASE_NAME, database, lock_timeout_seconds=lock_timeout_seconds
        )
        saved_keys = None
        if restored_keys is not None:
            saved_keys = await asyncio.to_thread(_put_key_store, restored_keys, key_store, lock_timeout_seconds)
    return Restored(contents, saved_database, saved_keys, still_forgotten)


def _put_key_store(restored: Path, key_store: Path, lock_timeout_seconds: float) -> Path | None:
    saved = None
    if key_store.exists():
        saved = key_store.with_name(f"{key_store.name}.before-restore-{time.strftime('%Y%m%d-%H%M%S')}")
        key_store.replace(saved)
        key_store.with_name(key_store.name + "-journal").unlink(missing_ok=True)
    copy_sqlite(restored, key_store, _verify_key_store, lock_timeout_seconds=lock_timeout_seconds)
    return saved


__all__ = [
    "ARCHIVE_SUFFIXES",
    "DATABASE_SUFFIXES",
    "KEY_BACKUP_DAYS",
    "Contents",
    "Restored",
    "is_archive",
    "restore_archive",
    "target_of",
    "write_archive",
]
