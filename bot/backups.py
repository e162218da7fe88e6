"""`python -m bot backup` and `restore`: one archive of the database and the key store (``bot.keys.archive``)
into a folder, a file or standard output, and back, as the command line runs them. Each returns the exit status."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bot.app import database_use
from bot.cli import CommandFailed, _counted, _out
from bot.config import Settings
from bot.invocation import bot_command
from bot.keys.archive import DATABASE_SUFFIXES, KEY_BACKUP_DAYS, is_archive, restore_archive, target_of, write_archive
from bot.keys.setup import key_store_label
from bot.store.backup import BackupError, backup_database, restore_database
from bot.store.private import private_folder


def _sqlite_only(settings: Settings, command: str) -> None:
    if settings.memory.database_url is not None:
        raise CommandFailed(
            f"{command} handles the SQLite file (memory.database_path); with memory.database_url (PostgreSQL) use "
            f"pg_dump and pg_restore, or `{bot_command('copy-db --from <database url> --to sqlite:///backup.db')}`"
        )


async def backup(settings: Settings, args: argparse.Namespace) -> int:
    """One archive of the database and the key store (``bot.keys.archive``) into a folder, a .tar.gz file or
    standard output (``-``); a FILE.db is the database alone, as before archives."""
    _sqlite_only(settings, "backup")
    memory = settings.memory
    say = _err if args.file == "-" else _out
    try:
        if args.file != "-" and Path(args.file).name.endswith(DATABASE_SUFFIXES):
            size = await asyncio.to_thread(
                backup_database, memory.database_path, Path(args.file), lock_timeout_seconds=memory.lock_timeout_seconds
            )
            _out(f"Backed up {memory.database_path} to {args.file} ({size:,} bytes).")
            if memory.key_store_url is None and memory.key_store_path.exists():
                _out(
                    f"This copy holds the database alone, not the key store {memory.key_store_path}: name a folder "
                    "(or FILE.tar.gz) instead to back both up in one archive."
                )
            return 0
        if args.file == "-" and sys.stdout.isatty():
            raise CommandFailed("backup - writes the archive to standard output: redirect it into a file (`> FILE`)")
        target = None if args.file == "-" else target_of(Path(args.file), time.time())
        key_store = memory.key_store_path if memory.key_store_url is None else None
        contents = await asyncio.to_thread(
            write_archive,
            memory.database_path,
            key_store,
            sys.stdout.buffer if target is None else target,
            lock_timeout_seconds=memory.lock_timeout_seconds,
        )
    except BackupError as exc:
        raise CommandFailed(str(exc)) from exc
    where = "standard output" if target is None else f"{target} ({target.stat().st_size:,} bytes)"
    if contents.member_keys is None:
        keys = "" if key_store is None else " (no key store: no master key has been used)"
        say(f"Backed up {memory.database_path} (schema {contents.schema}){keys} to {where}.")
    else:
        say(
            f"Backed up {memory.database_path} (schema {contents.schema}) and the key store {key_store} "
            f"({_counted(contents.member_keys, 'member_key')}) to {where}. Restore both with "
            f"`{bot_command('restore FILE')}`; they open with MEMORY_MASTER_KEY, which is not in it: keep it apart. "
            f"Keep this archive no longer than {KEY_BACKUP_DAYS} days: a member who forgets everything stays "
            "readable in it until it is deleted."
        )
    if memory.key_store_url is not None:
        say(
            f"The key store is in PostgreSQL ({key_store_label(memory)}, memory.key_store_url): back it up with "
            f"pg_dump, kept {KEY_BACKUP_DAYS} days at most."
        )
    return 0


async def restore(settings: Settings, args: argparse.Namespace) -> int:
    """Puts back an archive (``-``: read from standard input) or a database copy; stop the bot first."""
    memory = settings.memory
    async with database_use(settings).alone(f"restore {args.file}"):  # a running bot would write to the old file
        _sqlite_only(settings, "restore")
        with _input_file(args.file, memory.database_path.parent) as source:
            try:
                if is_archive(source):
                    restored = await restore_archive(source, memory, lock_timeout_seconds=memory.lock_timeout_seconds)
                    saved, saved_keys = restored.saved_database, restored.saved_key_store
                else:
                    saved, saved_keys = (
                        await asyncio.to_thread(
                            restore_database,
                            source,
                            memory.database_path,
                            lock_timeout_seconds=memory.lock_timeout_seconds,
                        ),
                        None,
                    )
                    restored = None
            except BackupError as exc:
                raise CommandFailed(str(exc)) from exc
    what = str(memory.database_path)
    if restored is not None and restored.contents.member_keys is not None:
        what += f" and the key store {memory.key_store_path} ({_counted(restored.contents.member_keys, 'member_key')})"
    _out(f"Restored {what} from {args.file if args.file != '-' else 'standard input'}.")
    for kept, name in ((saved, "database"), (saved_keys, "key store")):
        if kept is not None:
            _out(f"The {name} it replaced is kept as {kept}.")
    if restored is not None and restored.still_forgotten:
        listed = ", ".join(str(m) for m in restored.still_forgotten)
        _out(
            f"{_counted(len(restored.still_forgotten), 'member')} forgot everything after this backup was made "
            f"({listed}): their keys were left out, so their memory in it stays unreadable; "
            f"`{bot_command('forget-unreadable --yes')}` deletes those rows."
        )
    _out("Start the bot again.")
    return 0


@contextlib.contextmanager
def _input_file(name: str, scratch_in: Path) -> Iterator[Path]:
    """The file to restore from: ``name``, or for ``-`` standard input copied to a private scratch file first (a
    restore checks everything before it replaces anything)."""
    if name != "-":
        yield Path(name)
        return
    if sys.stdin.isatty():
        raise CommandFailed("restore - reads the archive from standard input: give it there (`< FILE`)")
    private_folder(scratch_in)
    with tempfile.TemporaryDirectory(prefix=".restore-input-", dir=scratch_in) as scratch:
        path = Path(scratch) / "backup"
        with path.open("wb") as file:
            shutil.copyfileobj(sys.stdin.buffer, file)
        yield path


def _err(line: str) -> None:
    sys.stderr.write(line + "\n")
