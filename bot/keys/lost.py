"""Members whose memory the key store in use cannot open: encrypted rows, and no key for their member.

A forget deletes the member's key and then their rows (``bot.memory.forget_all``), so a member forgotten on purpose
has neither. Encrypted rows without a key mean the key store is not the one this memory was encrypted
with: the memory database restored alone, a moved volume, a wrong ``memory.key_store`` (or
``memory.key_store_url``). Starting anyway would create an empty key store, answer every such member "Something
went wrong", and the first write would make them a new key and leave their old rows unreadable for good. So
``check`` fails, and ``run`` and every command that opens memory stop (exit status 2) with the settings to fix,
before the key store is created or anything is written.

A member whose key a forget deleted is recorded in the key store (``bot.keys.store``): rows of theirs that are
still there (a forget killed between the key and the rows, until it is finished; a backup of the memory database
from before the forget restored) are forgotten data, unreadable by design and left out of every read; they do not
stop the start. ``python -m bot forget-unreadable --yes`` deletes the rows of every member without a key: those, and
those whose keys are truly lost. Both databases are read here without writing a byte.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path

import asyncpg

from bot.config import MemorySettings
from bot.invocation import bot_command
from bot.keys.encrypted import ENCRYPTION_META
from bot.keys.store import KeyStoreLocked

_MEMBERS_WITH_TEXT = (
    "SELECT user_id FROM turns UNION SELECT user_id FROM facts "
    "UNION SELECT user_id FROM calls WHERE summary IS NOT NULL "
    "UNION SELECT user_id FROM chats WHERE summary IS NOT NULL"
)
_WITH_VECTORS = " UNION SELECT user_id FROM memory_vectors"


class KeysMissing(KeyStoreLocked):
    """Encrypted members' keys are not in the key store in use; nothing has been written. The message is the
    operator's."""


def _sqlite_rows(path: Path, table: str, sql: str) -> list[tuple[object, ...]]:
    """``sql``'s rows from the SQLite file at ``path`` opened read-only; none when there is no such file or it
    has no ``table``."""
    if not path.exists():
        return []
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        if db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone() is None:
            return []
        return db.execute(sql).fetchall()


def _sqlite_encrypted_members(path: Path) -> set[int]:
    if not path.exists():
        return set()
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        tables = {str(row[0]) for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "meta" not in tables:
            return set()
        if db.execute("SELECT 1 FROM meta WHERE key = ?", (ENCRYPTION_META,)).fetchone() is None:
            return set()
        sql = _MEMBERS_WITH_TEXT + (_WITH_VECTORS if "memory_vectors" in tables else "")
        return {int(row[0]) for row in db.execute(sql)}


async def encrypted_members(memory: MemorySettings) -> set[int]:
    """The members with encrypted text (lines, facts, summaries, embeddings) in the memory database; empty when
    it does not exist yet or is not encrypted."""
    if memory.database_url is None:
        return await asyncio.to_thread(_sqlite_encrypted_members, memory.database_path)
    db = await asyncpg.connect(memory.database_url.get_secret_value())
    try:
        if not await db.fetchval("SELECT to_regclass('meta') IS NOT NULL"):
            return set()
        if await db.fetchval("SELECT value FROM meta WHERE key = $1", ENCRYPTION_META) is None:
            return set()
        vectors = await db.fetchval("SELECT to_regclass('memory_vectors') IS NOT NULL")
        return {int(r["user_id"]) for r in await db.fetch(_MEMBERS_WITH_TEXT + (_WITH_VECTORS if vectors else ""))}
    finally:
        await db.close()


_HALF_FORGOTTEN = "SELECT user_id FROM memory_fences WHERE forget_begun IS NOT NULL ORDER BY user_id"
_SCHEMA_VERSION = "SELECT COALESCE(MAX(version), 0) FROM schema_migrations"


def _sqlite_half_forgotten(path: Path) -> tuple[list[int], int]:
    if not path.exists():
        return [], 0
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        if db.execute("SELECT 1 FROM pragma_table_info('memory_fences') WHERE name = 'forget_begun'").fetchone():
            return [int(row[0]) for row in db.execute(_HALF_FORGOTTEN)], int(db.execute(_SCHEMA_VERSION).fetchone()[0])
    return [], 0


async def half_forgotten_members(memory: MemorySettings) -> tuple[list[int], int]:
    """The members whose forget of everything has begun and not ended (``bot.memory.forget_all``: a process killed
    part-way, or one under way right now), and the database's schema version, read without writing; no members
    before migration 19."""
    if memory.database_url is None:
        return await asyncio.to_thread(_sqlite_half_forgotten, memory.database_path)
    db = await asyncpg.connect(memory.database_url.get_secret_value())
    try:
        if not await db.fetchval(
            "SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = 'memory_fences' AND column_name = 'forget_begun')"
        ):
            return [], 0
        return [int(r["user_id"]) for r in await db.fetch(_HALF_FORGOTTEN)], int(await db.fetchval(_SCHEMA_VERSION))
    finally:
        await db.close()


async def accounted_members(memory: MemorySettings) -> tuple[set[int], set[int]]:
    """(members with a key, members whose key a forget deleted) in the key store; empty when there is none yet."""
    if memory.key_store_url is not None:
        db = await asyncpg.connect(memory.key_store_url.get_secret_value())
        try:
            if await db.fetchval("SELECT to_regclass('member_keys') IS NULL"):
                return set(), set()
            keyed = {int(r["user_id"]) for r in await db.fetch("SELECT user_id FROM member_keys")}
            if await db.fetchval("SELECT to_regclass('forgotten_keys') IS NULL"):
                return keyed, set()
            return keyed, {int(r["user_id"]) for r in await db.fetch("SELECT user_id FROM forgotten_keys")}
        finally:
            await db.close()
    path = memory.key_store_path
    keys = await asyncio.to_thread(_sqlite_rows, path, "member_keys", "SELECT user_id FROM member_keys")
    deleted = await asyncio.to_thread(_sqlite_rows, path, "forgotten_keys", "SELECT user_id FROM forgotten_keys")
    return {int(str(row[0])) for row in keys}, {int(str(row[0])) for row in deleted}


async def unreadable_members(memory: MemorySettings, *, forgotten_too: bool = False) -> list[int]:
    """The members with encrypted rows and no key in the key store, in order; those whose key a forget deleted
    (``bot.keys.store``) only with ``forgotten_too``."""
    encrypted = await encrypted_members(memory)
    if not encrypted:
        return []
    keyed, forgotten = await accounted_members(memory)
    return sorted(encrypted - keyed - (set() if forgotten_too else forgotten))


def missing_keys_message(memory: MemorySettings, members: list[int]) -> str:
    from bot.keys.setup import key_store_label

    setting = (
        "memory.key_store_url (MEMORY_KEY_STORE_URL)" if memory.key_store_url else "memory.key_store (MEMORY_KEY_STORE)"
    )
    shown = ", ".join(str(m) for m in members[:5]) + (", …" if len(members) > 5 else "")
    return (
        f"The memory database holds encrypted memory of {len(members)} member(s) ({shown}) whose keys are not in "
        f"the key store {key_store_label(memory)} ({setting}): restore the key store that belongs with this "
        f"database beside it, or set {setting} to where it is. If those keys are truly lost, "
        f"`{bot_command('forget-unreadable --yes')}` deletes those members' unreadable memory. Nothing was changed."
    )


async def check_keys_present(memory: MemorySettings) -> None:
    """Raises ``KeysMissing`` when members have encrypted rows and the key store has no key for them."""
    members = await unreadable_members(memory)
    if members:
        raise KeysMissing(missing_keys_message(memory, members))


__all__ = [
    "KeysMissing",
    "accounted_members",
    "check_keys_present",
    "encrypted_members",
    "half_forgotten_members",
    "missing_keys_message",
    "unreadable_members",
]
