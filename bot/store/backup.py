"""Consistent copies of the live SQLite database, and putting one back.

A plain file copy of a database in WAL mode can miss committed transactions that are still in the `-wal` file,
or catch a page half-written. SQLite's online backup API copies through the database engine instead: the copy
is one consistent snapshot even while the bot keeps writing.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from bot.store.migrations import LATEST_VERSION
from bot.store.private import private_file, private_folder

PAGES_PER_STEP = 1024
"""Copy this many pages, then let other connections write (the bot keeps running during a backup)."""


class BackupError(Exception):
    """The backup or restore could not be done; the message says why and what to do."""


def backup_database(database: Path, target: Path, *, lock_timeout_seconds: float = 5.0) -> int:
    """Copy ``database`` to ``target`` (which must not exist yet; missing folders on its way are created
    owner-only); returns the copy's size in bytes."""
    if not database.is_file():
        raise BackupError(f"memory.database_path {database} does not exist: there is nothing to back up")
    return copy_sqlite(database, target, verify_bot_database, lock_timeout_seconds=lock_timeout_seconds)


def copy_sqlite(
    source_path: Path,
    target: Path,
    verify: Callable[[sqlite3.Connection, Path], None],
    *,
    lock_timeout_seconds: float = 5.0,
) -> int:
    """A consistent copy of the SQLite file ``source_path`` at ``target`` (new), checked by ``verify`` before it
    takes the target's name; returns its size in bytes."""
    if target.exists():
        raise BackupError(f"{target} already exists: choose a new file name (for example with the date in it)")
    for folder in (target.parent, *target.parent.parents):
        if folder.exists() and not folder.is_dir():
            raise BackupError(f"{folder} is a file, not a folder: choose another place for {target.name}")
    private_folder(target.parent)
    partial = target.with_name(target.name + ".partial")
    source = sqlite3.connect(f"{source_path.absolute().as_uri()}?mode=ro", uri=True, timeout=lock_timeout_seconds)
    try:
        private_file(partial)
        copy = sqlite3.connect(partial)
        try:
            source.backup(copy, pages=PAGES_PER_STEP, sleep=0.01)
            verify(copy, partial)
        finally:
            copy.close()
    except sqlite3.Error as exc:
        partial.unlink(missing_ok=True)
        raise BackupError(f"could not back up {source_path}: {exc}") from exc
    except BackupError:
        partial.unlink(missing_ok=True)
        raise
    finally:
        source.close()
    partial.replace(target)
    return target.stat().st_size


def restore_database(backup: Path, database: Path, *, lock_timeout_seconds: float = 5.0) -> Path | None:
    """Make ``database`` a copy of ``backup``. The current database, if any, is kept next to it first (the
    returned path): a consistent copy when it is readable, else the damaged file itself. Stop the bot first."""
    if not backup.is_file():
        raise BackupError(f"{backup} does not exist")
    try:
        source = sqlite3.connect(f"{backup.absolute().as_uri()}?mode=ro", uri=True)
        try:
            verify_bot_database(source, backup)
        finally:
            source.close()
    except sqlite3.Error as exc:
        raise BackupError(f"{backup} is not a usable SQLite database ({exc})") from exc
    if database.is_dir():
        raise BackupError(f"memory.database_path {database} is a directory")
    saved = None
    if database.exists():
        saved = database.with_name(f"{database.name}.before-restore-{time.strftime('%Y%m%d-%H%M%S')}")
        try:
            backup_database(database, saved, lock_timeout_seconds=lock_timeout_seconds)
        except BackupError:
            database.replace(saved)  # unreadable (the usual reason to restore): keep the file as it is
        for leftover in (database, _sidecar(database, "-wal"), _sidecar(database, "-shm")):
            leftover.unlink(missing_ok=True)
    private_folder(database.parent)
    backup_database(backup, database, lock_timeout_seconds=lock_timeout_seconds)
    return saved


def _sidecar(database: Path, suffix: str) -> Path:
    return database.with_name(database.name + suffix)


def verify_bot_database(db: sqlite3.Connection, where: Path) -> None:
    """Raises ``BackupError`` unless ``db`` is an intact database of this bot, at a schema it knows."""
    check = db.execute("PRAGMA quick_check").fetchone()
    if check is None or check[0] != "ok":
        raise BackupError(f"{where} failed SQLite's integrity check: {check[0] if check else 'no answer'}")
    has_versions = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'")
    if has_versions.fetchone() is None:
        raise BackupError(f"{where} is not a database of this bot (it has no schema_migrations table)")
    version = int(db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0])
    if version > LATEST_VERSION:
        raise BackupError(f"{where} has schema version {version}, newer than this bot's {LATEST_VERSION}")
