"""The member key store in its own PostgreSQL database (``memory.key_store_url``), for a PostgreSQL memory database.

Same semantics as ``SqliteKeyStore``: each member's data key wrapped by the master key, a verifier checked before
anything is written, deletion of a member's key in its own committed transaction, rotation all or none.

Leaving no copy of a deleted key: PostgreSQL never overwrites a row in place (an UPDATE or DELETE leaves the old
version in the table file until it is vacuumed, and every change is in the write-ahead log), so after the DELETE
commits ``delete`` runs ``VACUUM (FULL)`` on the keys table (the table is rewritten into a new file; the old file
is truncated to zero), switches to a new WAL segment and forces a checkpoint, after which the segments holding the
key are no longer needed. PostgreSQL then removes them if the server runs with ``wal_recycle = off``; with the
default (``on``) it renames them for reuse and their bytes stay in ``pg_wal`` until overwritten. The switch and the
checkpoint need the ``pg_checkpoint`` role and EXECUTE on ``pg_switch_wal()`` (or a superuser); without them the
key is still deleted and unreadable through PostgreSQL, and a warning says what remains. Outside the data
directory nothing can be promised: WAL archives, replicas and backups of the key store keep it for as long as they
are kept (the operator guide says to keep them briefly), and the file system may keep freed blocks.
"""

from __future__ import annotations

import logging
import time

import asyncpg

from bot.keys.crypto import (
    make_verifier,
    new_data_key,
    unwrap_data_key,
    verifier_opens,
    wrap_data_key,
)
from bot.keys.store import CachingKeyStore, KeyStoreLocked, locked_message
from bot.store.copy import describe

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS key_store_meta (name TEXT PRIMARY KEY, value BYTEA NOT NULL);
CREATE TABLE IF NOT EXISTS member_keys (
    user_id BIGINT PRIMARY KEY,
    wrapped BYTEA NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE IF NOT EXISTS forgotten_keys (user_id BIGINT PRIMARY KEY, deleted_at DOUBLE PRECISION NOT NULL);
"""
_SCHEMA_LOCK = 0x6B657973  # serialises the first start of several processes on an empty key store


def describe_url(url: str) -> str:
    """The URL without its password, for messages."""
    return describe(url)


class PostgresKeyStore(CachingKeyStore):
    """Member data keys in their own PostgreSQL database (``memory.key_store_url``)."""

    def __init__(self, url: str, master_key: bytes):
        super().__init__(master_key)
        self.url = url
        self._pool: asyncpg.Pool | None = None

    def __repr__(self) -> str:
        return f"PostgresKeyStore({describe_url(self.url)!r})"

    @property
    def label(self) -> str:
        """How messages name this key store (no password)."""
        return describe_url(self.url)

    # ---- lifecycle -------------------------------------------------------------------------------------

    async def open(self) -> None:
        await check_unlockable_pg(self.url, self._master_key)
        pool = await asyncpg.create_pool(self.url, min_size=1, max_size=2)
        try:
            async with pool.acquire() as db, db.transaction():
                await db.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK)
                await db.execute(_SCHEMA)
                await db.execute(
                    "INSERT INTO key_store_meta (name, value) VALUES ('verifier', $1) ON CONFLICT (name) DO NOTHING",
                    make_verifier(self._master_key),
                )
        except BaseException:
            await pool.close()
            raise
        self._pool = pool

    async def close(self) -> None:
        async with self._lock:
            self._cache.clear()
            if self._pool is not None:
                pool, self._pool = self._pool, None
                await pool.close()

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("key store is not open")
        return self._pool

    # ---- member keys -----------------------------------------------------------------------------------

    async def _create(self, user_id: int) -> bytes:
        async with self.pool.acquire() as db, db.transaction():
            # Shares the verifier's row lock with rotate(): a key is never written under a retired master key.
            verifier = await db.fetchval("SELECT value FROM key_store_meta WHERE name = 'verifier' FOR SHARE")
            if verifier is None or not verifier_opens(self._master_key, bytes(verifier)):
                raise self.rotated()
            await db.execute(
                "INSERT INTO member_keys (user_id, wrapped, created_at) VALUES ($1, $2, $3) "
                "ON CONFLICT (user_id) DO NOTHING",
                user_id,
                wrap_data_key(self._master_key, user_id, new_data_key()),
                time.time(),
            )
            row = await db.fetchval("SELECT wrapped FROM member_keys WHERE user_id = $1", user_id)
        return bytes(row)  # another process may have won: its key is the one

    async def delete(self, user_id: int) -> bool:
        """Destroys the member's key in its own committed transaction; True when there was one. From the moment
        the DELETE commits nothing encrypted for them can be decrypted anywhere; then the table is rewritten and
        the WAL moved past it so the key's bytes leave the data directory (see the module's note). Records that
        the member was forgotten (``bot.keys.store``)."""
        user_id = int(user_id)
        async with self._lock:
            self._cache.pop(user_id, None)
            async with self.pool.acquire() as db, db.transaction():
                status = await db.execute("DELETE FROM member_keys WHERE user_id = $1", user_id)
                deleted = status.rsplit(" ", 1)[-1] != "0"
                if deleted:
                    await db.execute(
                        "INSERT INTO forgotten_keys (user_id, deleted_at) VALUES ($1, $2) "
                        "ON CONFLICT (user_id) DO UPDATE SET deleted_at = EXCLUDED.deleted_at",
                        user_id,
                        time.time(),
                    )
            if deleted:
                await self._purge_residue()
            return deleted

    async def _purge_residue(self) -> None:
        async with self.pool.acquire() as db:
            await db.execute("VACUUM (FULL) member_keys")
            try:
                await db.execute("SELECT pg_switch_wal()")
                await db.execute("CHECKPOINT")
            except asyncpg.InsufficientPrivilegeError as exc:
                log.warning(
                    "the key store %s could not switch the WAL or checkpoint (%s): a deleted member key stays in "
                    "its pg_wal until PostgreSQL reuses the segment; grant the key store's role pg_checkpoint and "
                    "EXECUTE on pg_switch_wal()",
                    self.label,
                    exc,
                )

    async def count(self) -> int:
        async with self._lock:
            return int(await self.pool.fetchval("SELECT COUNT(*) FROM member_keys"))

    async def rotate(self, new_master_key: bytes) -> int:
        """Rewraps every member key (and the verifier) under ``new_master_key`` in one transaction: all or none.
        The member keys themselves, and so all encrypted data, are unchanged. Returns how many were rewrapped."""
        async with self._lock:
            async with self.pool.acquire() as db, db.transaction():
                await db.execute("SELECT 1 FROM key_store_meta WHERE name = 'verifier' FOR UPDATE")
                rows = await db.fetch("SELECT user_id, wrapped FROM member_keys FOR UPDATE")
                rewrapped = [
                    (
                        int(r["user_id"]),
                        wrap_data_key(
                            new_master_key,
                            int(r["user_id"]),
                            unwrap_data_key(self._master_key, int(r["user_id"]), bytes(r["wrapped"])),
                        ),
                    )
                    for r in rows
                ]
                await db.executemany("UPDATE member_keys SET wrapped = $2 WHERE user_id = $1", rewrapped)
                await db.execute(
                    "UPDATE key_store_meta SET value = $1 WHERE name = 'verifier'", make_verifier(new_master_key)
                )
            self._master_key = new_master_key
            self._cache.clear()
            if rows:
                await self._purge_residue()  # the keys wrapped by the retired master key
            return len(rows)

    async def _wrapped(self, user_id: int) -> bytes | None:
        value = await self.pool.fetchval("SELECT wrapped FROM member_keys WHERE user_id = $1", user_id)
        return bytes(value) if value is not None else None


async def key_store_state_pg(url: str) -> tuple[bytes | None, int]:
    """(verifier, member keys) of a PostgreSQL key store, read without writing; (None, 0) when it has none."""
    db = await asyncpg.connect(url)
    try:
        if await db.fetchval("SELECT to_regclass('key_store_meta') IS NULL OR to_regclass('member_keys') IS NULL"):
            return None, 0
        verifier = await db.fetchval("SELECT value FROM key_store_meta WHERE name = 'verifier'")
        count = await db.fetchval("SELECT COUNT(*) FROM member_keys")
    finally:
        await db.close()
    return (bytes(verifier) if verifier is not None else None), int(count)


async def residue_warnings(url: str) -> list[str]:
    """What would leave a deleted member key readable in the key store server's data directory (for `check`)."""
    db = await asyncpg.connect(url)
    try:
        recycle = await db.fetchval("SHOW wal_recycle")
        allowed = await db.fetchval(
            "SELECT rolsuper OR (pg_has_role(current_user, 'pg_checkpoint', 'MEMBER') "
            "AND has_function_privilege('pg_switch_wal()', 'EXECUTE')) FROM pg_roles WHERE rolname = current_user"
        )
    finally:
        await db.close()
    warnings = []
    if recycle == "on":
        warnings.append(
            "the key store's server runs with wal_recycle = on: a deleted member key stays in its pg_wal until the "
            "segment is reused; set wal_recycle = off on that server"
        )
    if not allowed:
        warnings.append(
            "the key store's role cannot checkpoint or switch the WAL: grant it pg_checkpoint and EXECUTE on "
            "pg_switch_wal(), or a deleted member key stays in pg_wal for a while"
        )
    return warnings


async def check_unlockable_pg(url: str, master_key: bytes | None) -> int:
    """Like ``check_unlockable`` for a key store in PostgreSQL: raises ``KeyStoreLocked`` when it holds member
    keys and ``master_key`` is missing or wrong; otherwise returns how many it holds. Writes nothing."""
    verifier, count = await key_store_state_pg(url)
    if verifier is None and count == 0:
        return 0
    problem = locked_message(describe_url(url), master_key, verifier, count)
    if problem is not None:
        raise KeyStoreLocked(problem)
    return count


__all__ = ["PostgresKeyStore", "check_unlockable_pg", "describe_url", "key_store_state_pg", "residue_warnings"]
