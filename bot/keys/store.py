"""The member key store: each member's data key, wrapped by the master key, kept apart from the memory database.

A backup of the memory database holds no keys; once a member's key is deleted here, every copy of their data,
however old, is unreadable. Deleting leaves no copy in this store's files either: ``secure_delete`` overwrites the
freed bytes and the rollback journal is truncated when each transaction commits (``journal_mode = TRUNCATE``), so
the wrapped key is in neither file afterwards.

Opening checks the master key before anything is written: with a key store that already holds member keys, a
missing or wrong ``MEMORY_MASTER_KEY`` raises ``KeyStoreLocked`` and the file is left byte for byte as it was.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from pathlib import Path
from typing import Protocol

import aiosqlite

from bot.keys.crypto import (
    MASTER_KEY_ENV,
    DecryptionFailed,
    MemberCipher,
    make_verifier,
    new_data_key,
    unwrap_data_key,
    verifier_opens,
    wrap_data_key,
)

CACHE_SIZE = 4096
"""Unwrapped member ciphers kept in memory (an LRU); a deleted member's is dropped at once."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS key_store_meta (name TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS member_keys (
    user_id INTEGER PRIMARY KEY,
    wrapped BLOB NOT NULL,
    created_at REAL NOT NULL
);
"""


class MemberKeys(Protocol):
    """What the memory service needs of a key store: destroying a member's key."""

    async def delete(self, user_id: int) -> bool: ...


class KeyStore(MemberKeys, Protocol):
    """A member key store (``SqliteKeyStore``, ``bot.keys.pg_store.PostgresKeyStore``)."""

    @property
    def label(self) -> str: ...

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def cipher(self, user_id: int, *, create: bool = True) -> MemberCipher | None: ...

    async def has_key(self, user_id: int) -> bool: ...

    async def count(self) -> int: ...

    async def rotate(self, new_master_key: bytes) -> int: ...


class KeyStoreLocked(Exception):
    """The key store holds member keys but the master key is missing or is not the one they were wrapped with.
    The message is the one line the operator reads; nothing has been written."""


class CachingKeyStore(ABC):
    """What every key store shares: the unwrapped ciphers kept in an LRU, one key made per member at most.
    A backend supplies ``label``, ``_wrapped`` (the stored wrapped key) and ``_create`` (make and commit one)."""

    def __init__(self, master_key: bytes):
        self._master_key = master_key
        self._lock = asyncio.Lock()
        self._cache: OrderedDict[int, MemberCipher] = OrderedDict()

    @property
    @abstractmethod
    def label(self) -> str: ...

    @abstractmethod
    async def _wrapped(self, user_id: int) -> bytes | None: ...

    @abstractmethod
    async def _create(self, user_id: int) -> bytes:
        """Makes the member's key and commits it, unless another process has just done so; returns the stored
        one. Raises ``KeyStoreLocked`` (``rotated``) when the stored verifier is not this process's master key."""

    def rotated(self) -> KeyStoreLocked:
        """A rotation by another process since we opened would leave a new key wrapped by a retired master key:
        it is refused rather than written where the next start could not open it."""
        return KeyStoreLocked(
            f"the master key of the key store {self.label} was rotated since this process started: "
            f"restart with the new {MASTER_KEY_ENV}"
        )

    async def cipher(self, user_id: int, *, create: bool = True) -> MemberCipher | None:
        """The member's cipher; a new random key is made (and committed) when they have none and ``create`` is
        true. None when they have no key and ``create`` is false (a forgotten member stays unreadable)."""
        user_id = int(user_id)
        cached = self._cache.get(user_id)
        if cached is not None:
            self._cache.move_to_end(user_id)
            return cached
        async with self._lock:
            wrapped = await self._wrapped(user_id)
            if wrapped is None:
                if not create:
                    return None
                wrapped = await self._create(user_id)
            cipher = MemberCipher(user_id, unwrap_data_key(self._master_key, user_id, wrapped))
            self._cache[user_id] = cipher
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
            return cipher

    async def has_key(self, user_id: int) -> bool:
        async with self._lock:
            return await self._wrapped(int(user_id)) is not None


class SqliteKeyStore(CachingKeyStore):
    """Member data keys in their own SQLite file (``memory.key_store``)."""

    def __init__(self, path: Path | str, master_key: bytes):
        super().__init__(master_key)
        self.path = Path(path)
        self._db: aiosqlite.Connection | None = None

    @property
    def label(self) -> str:
        """How messages name this key store."""
        return str(self.path)

    # ---- lifecycle -------------------------------------------------------------------------------------

    async def open(self) -> None:
        await check_unlockable(self.path, self._master_key)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = await aiosqlite.connect(self.path, isolation_level=None)
        try:
            for pragma in ("PRAGMA busy_timeout = 5000", "PRAGMA secure_delete = ON", "PRAGMA journal_mode = TRUNCATE"):
                async with db.execute(pragma):
                    pass
            await db.executescript(_SCHEMA)
            await db.execute("BEGIN IMMEDIATE")
            async with db.execute("SELECT value FROM key_store_meta WHERE name = 'verifier'") as cur:
                row = await cur.fetchone()
            if row is None:
                await db.execute(
                    "INSERT INTO key_store_meta (name, value) VALUES ('verifier', ?)",
                    (make_verifier(self._master_key),),
                )
            await db.execute("COMMIT")
        except BaseException:
            await db.close()
            raise
        self._db = db

    async def close(self) -> None:
        async with self._lock:
            self._cache.clear()
            if self._db is not None:
                await self._db.close()
                self._db = None

    @property
    def db(self) -> aiosqlite.Connection:
        if self._db is None:
            raise RuntimeError("key store is not open")
        return self._db

    # ---- member keys -----------------------------------------------------------------------------------

    async def _create(self, user_id: int) -> bytes:
        await self.db.execute("BEGIN IMMEDIATE")
        try:
            async with self.db.execute("SELECT value FROM key_store_meta WHERE name = 'verifier'") as cur:
                verifier = await cur.fetchone()
            if verifier is None or not verifier_opens(self._master_key, bytes(verifier[0])):
                raise self.rotated()
            await self.db.execute(
                "INSERT OR IGNORE INTO member_keys (user_id, wrapped, created_at) VALUES (?, ?, ?)",
                (user_id, wrap_data_key(self._master_key, user_id, new_data_key()), time.time()),
            )
            wrapped = await self._wrapped(user_id)  # another process may have won: use its key
            await self.db.execute("COMMIT")
        except BaseException:
            await self.db.execute("ROLLBACK")
            raise
        assert wrapped is not None
        return wrapped

    async def delete(self, user_id: int) -> bool:
        """Destroys the member's key in its own committed transaction; True when there was one. From the moment
        this returns, nothing encrypted for them can be decrypted anywhere."""
        user_id = int(user_id)
        async with self._lock:
            self._cache.pop(user_id, None)
            cur = await self.db.execute("DELETE FROM member_keys WHERE user_id = ?", (user_id,))
            deleted = (cur.rowcount or 0) > 0
            await cur.close()
            return deleted

    async def count(self) -> int:
        async with self._lock, self.db.execute("SELECT COUNT(*) FROM member_keys") as cur:
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def rotate(self, new_master_key: bytes) -> int:
        """Rewraps every member key (and the verifier) under ``new_master_key`` in one transaction: all or none.
        The member keys themselves, and so all encrypted data, are unchanged. Returns how many were rewrapped."""
        async with self._lock:
            await self.db.execute("BEGIN IMMEDIATE")
            try:
                async with self.db.execute("SELECT user_id, wrapped FROM member_keys") as cur:
                    rows = list(await cur.fetchall())
                for user_id, wrapped in rows:
                    key = unwrap_data_key(self._master_key, user_id, wrapped)
                    await self.db.execute(
                        "UPDATE member_keys SET wrapped = ? WHERE user_id = ?",
                        (wrap_data_key(new_master_key, user_id, key), user_id),
                    )
                await self.db.execute(
                    "UPDATE key_store_meta SET value = ? WHERE name = 'verifier'", (make_verifier(new_master_key),)
                )
                await self.db.execute("COMMIT")
            except BaseException:
                await self.db.execute("ROLLBACK")
                raise
            self._master_key = new_master_key
            self._cache.clear()
            return len(rows)

    async def _wrapped(self, user_id: int) -> bytes | None:
        async with self.db.execute("SELECT wrapped FROM member_keys WHERE user_id = ?", (user_id,)) as cur:
            row = await cur.fetchone()
        return bytes(row[0]) if row else None


async def key_store_state(path: Path) -> tuple[bytes | None, int]:
    """(verifier, member keys) of an existing key store file, read without writing a byte; (None, 0) when there
    is no key store there."""
    if not await asyncio.to_thread(path.exists):
        return None, 0
    async with aiosqlite.connect(f"file:{path}?mode=ro", uri=True) as db:
        async with db.execute("SELECT name FROM sqlite_master WHERE name = 'key_store_meta'") as cur:
            if await cur.fetchone() is None:
                return None, 0
        async with db.execute("SELECT value FROM key_store_meta WHERE name = 'verifier'") as cur:
            row = await cur.fetchone()
        async with db.execute("SELECT COUNT(*) FROM member_keys") as cur:
            count = await cur.fetchone()
    return (bytes(row[0]) if row else None), (int(count[0]) if count else 0)


async def check_unlockable(path: Path, master_key: bytes | None) -> int:
    """Raises ``KeyStoreLocked`` when the key store at ``path`` holds encrypted members' keys and ``master_key``
    is missing or wrong; otherwise returns how many member keys it holds. Writes nothing."""
    verifier, count = await key_store_state(path)
    if verifier is None and count == 0:
        return 0
    problem = locked_message(str(path), master_key, verifier, count)
    if problem is not None:
        raise KeyStoreLocked(problem)
    return count


def locked_message(label: str, master_key: bytes | None, verifier: bytes | None, count: int) -> str | None:
    """The operator's one line when the key store ``label`` (holding ``count`` keys and ``verifier``) cannot be
    opened with ``master_key``; None when it can."""
    if master_key is None:
        return (
            f"{MASTER_KEY_ENV} is not set, but the key store {label} holds {count} members' keys: set "
            f"{MASTER_KEY_ENV} (in .env or the environment) to the master key this memory was encrypted with. "
            "Nothing was changed."
        )
    if verifier is None or not verifier_opens(master_key, verifier):
        return (
            f"{MASTER_KEY_ENV} is not the master key of the key store {label} ({count} members' keys): set it to "
            "the key this memory was encrypted with (after a rotation, the new one). Nothing was changed."
        )
    return None


__all__ = [
    "DecryptionFailed",
    "KeyStore",
    "KeyStoreLocked",
    "MemberKeys",
    "SqliteKeyStore",
    "check_unlockable",
    "key_store_state",
    "locked_message",
]
