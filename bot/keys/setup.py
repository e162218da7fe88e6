"""Which key store the settings name, and its unlock check, for the bot, the commands and `check`.

With ``memory.key_store_url`` the member keys live in that PostgreSQL database (``PostgresKeyStore``); otherwise in
the SQLite file ``memory.key_store`` (by default beside ``memory.database_path``), whichever backend holds the
memory. Either way the keys are apart from the memory database."""

from __future__ import annotations

import contextlib
import sqlite3

import asyncpg

from bot.config import MemorySettings
from bot.doctor import StartupProblem
from bot.keys.lost import check_keys_present
from bot.keys.pg_store import PostgresKeyStore, check_unlockable_pg, describe_url
from bot.keys.store import KeyStore, SqliteKeyStore, check_unlockable


def key_store_label(memory: MemorySettings) -> str:
    """The key store in use, for messages (a URL without its password)."""
    if memory.key_store_url is not None:
        return describe_url(memory.key_store_url.get_secret_value())
    return str(memory.key_store_path)


def build_key_store(memory: MemorySettings, master_key: bytes) -> KeyStore:
    if memory.key_store_url is not None:
        return PostgresKeyStore(memory.key_store_url.get_secret_value(), master_key)
    return SqliteKeyStore(memory.key_store_path, master_key)


async def check_key_store(memory: MemorySettings, *, require_keys: bool = True) -> int:
    """Raises ``KeyStoreLocked`` (writing nothing) when the key store holds member keys and the master key is
    missing or wrong, and with ``require_keys`` ``KeysMissing`` when members have encrypted memory the key store
    has no key for (``bot.keys.lost``); otherwise how many keys it holds (0 when there is no key store yet)."""
    if memory.key_store_url is not None:
        try:
            count = await check_unlockable_pg(memory.key_store_url.get_secret_value(), memory.master_key_bytes())
        except (OSError, asyncpg.PostgresError) as exc:
            raise StartupProblem(
                f"memory.key_store_url (MEMORY_KEY_STORE_URL) {key_store_label(memory)}: the key store database "
                f"cannot be reached ({type(exc).__name__}: {exc}); start it or correct the URL"
            ) from None
    else:
        count = await check_unlockable(memory.key_store_path, memory.master_key_bytes())
    if require_keys:
        # A memory database that cannot be read is reported by its own check (and by the start) with its setting.
        with contextlib.suppress(OSError, asyncpg.PostgresError, sqlite3.Error):
            await check_keys_present(memory)
    return count


__all__ = ["build_key_store", "check_key_store", "key_store_label"]
