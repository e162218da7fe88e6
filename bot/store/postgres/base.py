"""The PostgreSQL backend's foundation (asyncpg with a connection pool): the pool, migrations, transaction
helpers and row mappers. Each aggregate's mixin (accounts, guild_settings, conversations, facts, jobs,
privacy) builds on `PostgresBase`, and `bot.store.postgres.PostgresStore` composes them.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from bot.store.columns import GUILD_SETTING_NAMES as _GUILD_SETTING_NAMES
from bot.store.columns import fact_record, turn_record
from bot.store.health import WriteHealth
from bot.store.models import (
    FactRecord,
    GuildSettings,
    TurnRecord,
)
from bot.store.pg_migrations import PG_LATEST_VERSION, PG_MIGRATIONS
from bot.store.repository import SchemaTooNew, StorageFull
from bot.store.shared import SqlBase
from bot.store.specifics import SPECIFICS_PAGE, stored_specifics

_OPEN = "('starting', 'active', 'ending')"
# Serialises migrations when several processes start at once on an empty database.
_MIGRATION_LOCK = 0x6D656D6F7279

Connection: TypeAlias = "PoolConnectionProxy[asyncpg.Record]"


def _prefixed(columns: str, alias: str) -> str:
    return ", ".join(f"{alias}.{c.strip()}" for c in columns.split(","))


def _count(status: str) -> int:
    """Rows changed, from a command status such as 'UPDATE 3' or 'INSERT 0 1'."""
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0


async def _keep_session(connection: asyncpg.Connection) -> None:
    """The pool's reset when a connection comes back: nothing beyond what asyncpg always does (roll back a
    transaction left open). The store sets no session state, holds no session-level advisory locks (only
    transaction-level ones), opens no cursors outside transactions and never LISTENs, so asyncpg's default reset
    query (``SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL``) would only add a round trip
    to every operation."""


class PostgresBase(SqlBase):
    """The connection pool and what every aggregate builds on (implements `StoreLifecycle`): open, migrate
    (serialised across processes), transactions and one-trip reads and writes."""

    greatest = "GREATEST"

    def __init__(self, url: str, *, min_connections: int = 2, max_connections: int = 10):
        self.url = url
        self._min = min_connections
        self._max = max_connections
        self._pool: asyncpg.Pool | None = None
        self.write_health = WriteHealth()

    def __repr__(self) -> str:  # never show a password from the URL
        return f"PostgresStore({re.sub(r'//[^@/]*@', '//***@', self.url)!r})"

    async def open(self) -> None:
        pool = await asyncpg.create_pool(self.url, min_size=self._min, max_size=self._max, reset=_keep_session)
        self._pool = pool
        try:
            await self._migrate()
            await self.count_specifics(_plain_specifics)
        except BaseException:
            self._pool = None
            await pool.close()
            raise

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("store is not open")
        return self._pool

    async def _migrate(self) -> None:
        async with self.pool.acquire() as db, db.transaction():
            await db.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
            await db.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                "applied_at DOUBLE PRECISION NOT NULL)"
            )
            current = int(await db.fetchval("SELECT COALESCE(MAX(version), 0) FROM schema_migrations"))
            if current > PG_LATEST_VERSION:
                raise SchemaTooNew(
                    f"the PostgreSQL database has schema version {current}, but this bot only knows up to "
                    f"{PG_LATEST_VERSION}: upgrade the bot, or point memory.database_url at another database"
                )
            for version, name, sql in PG_MIGRATIONS:
                if version <= current:
                    continue
                await db.execute(sql)
                await db.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
                    version,
                    name,
                    time.time(),
                )

    async def count_specifics(self, count: Callable[[int, str], Awaitable[int | None]]) -> int:
        """Fills in ``turns.specifics`` where it is missing (lines written before migration 10) with
        ``count(user_id, content)``, leaving it missing where that gives None, a page of lines at a time (a large
        upgraded database is not read into memory at once). Returns how many were filled."""
        filled, after = 0, 0
        while rows := await self.pool.fetch(
            "SELECT turn_id, user_id, content FROM turns WHERE specifics IS NULL AND turn_id > $1 "
            "ORDER BY turn_id LIMIT $2",
            after,
            SPECIFICS_PAGE,
        ):
            after = rows[-1][0]
            pairs = []
            for turn_id, user_id, content in rows:
                value = await count(int(user_id), content)
                if value is not None:
                    pairs.append((value, turn_id))
            if pairs:
                async with self._tx() as db:
                    await db.executemany("UPDATE turns SET specifics = $1 WHERE turn_id = $2", pairs)
            filled += len(pairs)
        return filled

    async def schema_version(self) -> int:
        return int(await self.pool.fetchval("SELECT COALESCE(MAX(version), 0) FROM schema_migrations"))

    async def ping(self) -> None:
        await self.pool.fetchval("SELECT 1")

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[Connection]:
        with self.write_health.write(), _storage_errors():
            async with self.pool.acquire() as db, db.transaction():
                yield db

    async def _all(self, sql: str, *params: Any) -> list[asyncpg.Record]:
        return list(await self.pool.fetch(sql, *params))

    async def _one(self, sql: str, *params: Any) -> asyncpg.Record | None:
        row: asyncpg.Record | None = await self.pool.fetchrow(sql, *params)
        return row

    async def _write(self, sql: str, *params: Any) -> int:
        with self.write_health.write(), _storage_errors():
            return _count(await self.pool.execute(sql, *params))

    # ---- the primitives of the queries written once (``bot.store.shared``) ----------------------------

    async def _rows(self, sql: str, *params: Any) -> list[Any]:
        return await self._all(sql, *params)

    async def _row(self, sql: str, *params: Any) -> Any | None:
        return await self._one(sql, *params)

    async def _changed(self, sql: str, *params: Any) -> int:
        return await self._write(sql, *params)


@contextmanager
def _storage_errors() -> Iterator[None]:
    """A full disk on the server (SQLSTATE 53100, disk_full) crosses the store boundary as StorageFull, as SQLite's
    does, so a call still ends and is stored once there is space."""
    try:
        yield
    except asyncpg.DiskFullError as exc:
        raise StorageFull(str(exc)) from exc


# ---- helpers ---------------------------------------------------------------------------------------------


def _to_db(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(value)
    return value


def _guild(row: asyncpg.Record) -> GuildSettings:
    return GuildSettings(**{name: row[name] for name in ("guild_id", *sorted(_GUILD_SETTING_NAMES))})


async def _plain_specifics(_user_id: int, content: str) -> int | None:
    return stored_specifics(None, content)


def _turn(row: asyncpg.Record) -> TurnRecord:
    return turn_record(row)


def _fact(row: asyncpg.Record) -> FactRecord:
    return fact_record(row)
