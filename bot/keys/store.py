"""The member key store: each member's data key, wrapped by the master key, kept apart from the memory database.

A backup of the memory database holds no keys; once a member's key is deleted here, every copy of their data,
however old, is unreadable. Deleting leaves no copy in this store's files either: ``secure_delete`` overwrites the
freed bytes and the rollback journal is truncated when each transaction commits (``journal_mode = TRUNCATE``), so
the wrapped key is in neither file afterwards.

Opening checks the master key before anything is written: with a key store that already holds member keys, a
missing or wrong ``MEMORY_MASTER_KEY`` raises ``KeyStoreLocked`` and the file is left byte for byte as it was.

``forgotten_keys`` records whose key a forget deleted (the member ID and when, nothing else; the memory database
keeps the same IDs in its fences): their encrypted rows, if any are left (a forget interrupted between the key
and the rows, until it is finished; a backup of the memory database restored), are forgotten data, not keys
lost with a missing key store (``bot.keys.lost``).
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
from bot.store.private import private_file

CACHE_SIZE = 4096
"""Members kept in the key cache (an LRU); a deleted member's cipher is dropped at once in the deleting process,
and at the next generation seen or write in every other (``CachingKeyStore``)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS key_store_meta (name TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS member_keys (
    user_id INTEGER PRIMARY KEY,
    wrapped BLOB NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS forgotten_keys (user_id INTEGER PRIMARY KEY, deleted_at REAL NOT NULL);
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

    async def cipher(
        self, user_id: int, *, create: bool = True, generation: int | None = None, fresh: bool = False
    ) -> MemberCipher | None: ...

    def observe(self, user_id: int, generation: int) -> None: ...

    async def has_key(self, user_id: int) -> bool: ...

    async def count(self) -> int: ...

    async def rotate(self, new_master_key: bytes) -> int: ...


class KeyStoreLocked(Exception):
    """The key store holds member keys but the master key is missing or is not the one they were wrapped with.
    The message is the one line the operator reads; nothing has been written."""


class _Slot:
    """A member's place in the key cache: their cipher as last read from the key store (None: read it again), and
    the newest memory generation (``Store.memory_generation``) seen for them before that read (-1: none)."""

    __slots__ = ("cipher", "generation")

    def __init__(self, cipher: MemberCipher | None, generation: int):
        self.cipher = cipher
        self.generation = generation


class CachingKeyStore(ABC):
    """What every key store shares: the unwrapped ciphers kept in an LRU, one key made per member at most.
    A backend supplies ``label``, ``_wrapped`` (the stored wrapped key) and ``_create`` (make and commit one).

    Several processes share one key store (the bot and a shell's ``forget-user``, two bot processes), and a
    forget deletes the key in one of them only. The cache is tied to the member's memory generation, which a
    forget moves in the memory database before the key is deleted, and again after (``bot.memory.forget_all``):

    - a write passes the generation its fence checks (``cipher(generation=...)``); the cached cipher serves it
      only when it was read from the key store after that generation was seen, else the key is read again.
      Between the forget's first move and its last, every write of the member is refused by its own transaction
      (the forget is recorded as under way, also when the process forgetting was killed); a key read after the
      last move was seen is never the deleted one (the key went before it), and a write fenced by an older
      generation is refused, so nothing is ever sealed, and kept, under a deleted key;
    - every generation the encrypting layer reads on the way (``observe``) drops a cipher read before it, so
      reads in the other processes take the key afresh too (``bot.keys.reading`` also reads it again when a
      value does not open with the cached one)."""

    def __init__(self, master_key: bytes):
        self._master_key = master_key
        self._lock = asyncio.Lock()
        self._cache: OrderedDict[int, _Slot] = OrderedDict()

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

    def observe(self, user_id: int, generation: int) -> None:
        """The member's memory generation was just read from the memory database: a cached cipher read before a
        newer generation is dropped (a forget elsewhere may have deleted its key)."""
        user_id = int(user_id)
        slot = self._cache.get(user_id)
        if slot is None:
            self._cache[user_id] = _Slot(None, generation)
            self._trim()
        elif generation > slot.generation:
            slot.cipher, slot.generation = None, generation

    def _cached(self, user_id: int, generation: int | None) -> MemberCipher | None:
        slot = self._cache.get(user_id)
        if slot is None or slot.cipher is None or (generation is not None and slot.generation < generation):
            return None
        self._cache.move_to_end(user_id)
        return slot.cipher

    def _trim(self) -> None:
        while len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)

    async def cipher(
        self, user_id: int, *, create: bool = True, generation: int | None = None, fresh: bool = False
    ) -> MemberCipher | None:
        """The member's cipher; a new random key is made (and committed) when they have none and ``create`` is
        true. None when they have no key and ``create`` is false (a forgotten member stays unreadable).

        ``generation``: the member's memory generation a write's fence checks (read by the writer before it
        started); the cipher is one read from the key store after that generation was seen. ``fresh``: read
        from the key store now, whatever is cached (a write without a fence, a value the cached key did not
        open)."""
        user_id = int(user_id)
        if generation is not None:
            self.observe(user_id, generation)
        cached = None if fresh else self._cached(user_id, generation)
        if cached is not None:
            return cached
        async with self._lock:
            cached = None if fresh else self._cached(user_id, generation)
            if cached is not None:
                return cached
            slot = self._cache.get(user_id)
            seen = slot.generation if slot is not None else -1
            wrapped = await self._wrapped(user_id)
            if wrapped is None:
                if slot is not None:
                    slot.cipher = None
                if not create:
                    return None
                wrapped = await self._create(user_id)
            cipher = MemberCipher(user_id, unwrap_data_key(self._master_key, user_id, wrapped))
            slot = self._cache.get(user_id)
            if slot is None:
                self._cache[user_id] = _Slot(cipher, seen)
                self._trim()
            elif slot.generation == seen:  # else a newer generation was seen meanwhile: used once, not kept
                slot.cipher = cipher
                self._cache.move_to_end(user_id)
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
        private_file(self.path)
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
        """Destroys the member's key in its own committed transaction, recording that it was forgotten
        (see the module's note); True when there was one. From the moment this returns, nothing encrypted for them
        can be decrypted anywhere."""
        user_id = int(user_id)
        async with self._lock:
            self._cache.pop(user_id, None)
            await self.db.execute("BEGIN IMMEDIATE")
            try:
                cur = await self.db.execute("DELETE FROM member_keys WHERE user_id = ?", (user_id,))
                deleted = (cur.rowcount or 0) > 0
                await cur.close()
                if deleted:
                    await self.db.execute(
                        "INSERT OR REPLACE INTO forgotten_keys (user_id, deleted_at) VALUES (?, ?)",
                        (user_id, time.time()),
                    )
                await self.db.execute("COMMIT")
            except BaseException:
                await self.db.execute("ROLLBACK")
                raise
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
