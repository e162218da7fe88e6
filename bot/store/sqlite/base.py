"""The SQLite backend's foundation (aiosqlite): one file, WAL mode, foreign keys and secure_delete on.

One connection serves the process; an asyncio lock makes every operation (and every transaction) run alone,
so coroutines never see each other's half-written state. Conditional UPDATEs make call state transitions safe
across processes sharing the file too. Here: the connection, migrations, transaction helpers, storage-error
mapping and row mappers; each aggregate's mixin (accounts, guild_settings, conversations, facts, jobs,
privacy) builds on `SqliteBase`, and `bot.store.sqlite.SqliteStore` composes them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import aiosqlite

from bot.store.columns import fact_record, turn_record
from bot.store.health import WriteHealth
from bot.store.migration_repairs import REPAIRS
from bot.store.migrations import LATEST_VERSION, MIGRATIONS
from bot.store.models import (
    FactRecord,
    GuildSettings,
    TurnRecord,
)
from bot.store.private import private_file, tighten
from bot.store.repository import SchemaTooNew, StorageFull
from bot.store.shared import SqlBase, sqlite_sql
from bot.store.specifics import SPECIFICS_PAGE, stored_specifics
from bot.store.sqlite import trips
from bot.store.sqlite.one_trip import T, on_thread
from bot.store.sqlite.trips import in_transaction

log = logging.getLogger(__name__)
CHECKPOINT_SECONDS = 1.0
"""How often the WAL is copied into the database file (see ``WalCheckpoints``)."""


class WalCheckpoints(threading.Thread):
    """Every ``seconds``, copy what the WAL holds into the database file, on a connection and thread of their own.

    SQLite would otherwise do it inside the commit that fills the WAL past 1,000 pages: a pause of several
    milliseconds (an fsync) in one write in a few hundred, which whoever waits on that write, or on the writes
    queued behind it, waits out. A PASSIVE checkpoint never waits for a writer or a reader, and once it has caught
    up, the next write starts the WAL from its beginning again, so the file does not grow. A plain thread with the
    stdlib driver: nothing of it depends on the event loop the store was opened in."""

    def __init__(self, path: Path, seconds: float, busy_timeout_ms: int) -> None:
        super().__init__(name=f"wal-checkpoints:{path.name}", daemon=True)
        self.path = path
        self.seconds = seconds
        self._busy_timeout_ms = busy_timeout_ms
        self._stopping = threading.Event()

    def run(self) -> None:
        db = sqlite3.connect(self.path, isolation_level=None)
        try:
            db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
            failing = False
            while not self._stopping.wait(self.seconds):
                try:
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error as exc:  # e.g. a full disk: the WAL keeps the data; try again next time
                    if not failing:  # once per episode, not every second it lasts
                        log.warning(
                            "checkpointing %s failed (%s); trying again every %g s until it works", self.path, exc,
                            self.seconds,
                        )  # fmt: skip
                    failing = True
                else:
                    if failing:
                        log.info("checkpointing %s works again", self.path)
                    failing = False
        finally:
            db.close()

    def stop(self) -> None:
        self._stopping.set()


class SqliteBase(SqlBase):
    """The connection and what every aggregate builds on (implements `StoreLifecycle`): open with the pragmas,
    migrate, the lock that makes each operation run alone, transactions and one-trip reads and writes; and a
    read-only second connection for the few reads that must not queue behind writes (``_read_one``)."""

    greatest = "MAX"

    def __init__(
        self, path: Path | str, *, busy_timeout_ms: int = 5000, checkpoint_seconds: float = CHECKPOINT_SECONDS
    ):
        self.path = Path(path)
        self._busy_timeout_ms = busy_timeout_ms
        self._db: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()
        self._reader: aiosqlite.Connection | None = None
        self._reader_lock = asyncio.Lock()
        self.checkpoint_seconds = checkpoint_seconds
        self._checkpoints: WalCheckpoints | None = None
        self.write_health = WriteHealth()

    async def open(self) -> None:
        if self.path.parent and str(self.path) != ":memory:":
            private_file(self.path)
            for sidecar in ("-wal", "-shm"):
                tighten(self.path.with_name(self.path.name + sidecar))
        db = await aiosqlite.connect(self.path, isolation_level=None)
        db.row_factory = aiosqlite.Row
        try:
            for pragma in (
                f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}",
                "PRAGMA journal_mode = WAL",
                "PRAGMA foreign_keys = ON",
                "PRAGMA secure_delete = ON",
                "PRAGMA synchronous = NORMAL",
                "PRAGMA wal_autocheckpoint = 0",  # checkpoints run beside the writes (WalCheckpoints)
            ):
                async with db.execute(pragma):
                    pass  # some pragmas return a row; closing the cursor ends the statement
            self._db = db
            await self._migrate()
            await self.count_specifics(_plain_specifics)
            if str(self.path) != ":memory:":  # a second connection to ":memory:" would be another database
                self._reader = await self._open_reader()
                self._checkpoints = WalCheckpoints(self.path, self.checkpoint_seconds, self._busy_timeout_ms)
                self._checkpoints.start()
        except BaseException:
            self._db = None
            await db.close()
            raise

    async def _open_reader(self) -> aiosqlite.Connection:
        """``_read_one``'s connection: read-only, with its own database thread."""
        reader = await aiosqlite.connect(self.path, isolation_level=None)
        reader.row_factory = aiosqlite.Row
        try:
            for pragma in (f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}", "PRAGMA query_only = ON"):
                async with reader.execute(pragma):
                    pass
        except BaseException:
            await reader.close()
            raise
        return reader

    async def close(self) -> None:
        if self._checkpoints is not None:
            self._checkpoints.stop()
            await asyncio.to_thread(self._checkpoints.join)
            self._checkpoints = None
        if self._reader is not None:
            async with self._reader_lock:
                await self._reader.close()
                self._reader = None
        if self._db is not None:
            async with self._lock:
                await self._db.close()
                self._db = None

    @staticmethod
    def _now() -> float:
        return time.time()

    @property
    def db(self) -> aiosqlite.Connection:
        if self._db is None:
            raise RuntimeError("store is not open")
        return self._db

    async def _migrate(self) -> None:
        await self.db.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
            "applied_at REAL NOT NULL)"
        )
        current = await self.schema_version()
        if current > LATEST_VERSION:
            raise SchemaTooNew(
                f"the database {self.path} has schema version {current}, but this bot only knows up to "
                f"{LATEST_VERSION}: upgrade the bot, or point memory.database_path at another file"
            )
        for version, name, sql in MIGRATIONS:
            if version <= current:
                continue
            repairs = [(needed, _split_sql(repair)) for needed, repair in REPAIRS.get(version, [])]
            await self._atomic(trips.apply_migration, version, name, _split_sql(sql), repairs, time.time())

    async def count_specifics(self, count: Callable[[int, str], Awaitable[int | None]]) -> int:
        """Fills in ``turns.specifics`` where it is missing (lines written before migration 10) with
        ``count(user_id, content)``, leaving it missing where that gives None, a page of lines at a time (a large
        upgraded database is not read into memory at once). Returns how many were filled."""
        filled, after = 0, 0
        while rows := await self._all(
            "SELECT turn_id, user_id, content FROM turns WHERE specifics IS NULL AND turn_id > ? "
            "ORDER BY turn_id LIMIT ?",
            (after, SPECIFICS_PAGE),
        ):
            after = rows[-1][0]
            pairs = []
            for turn_id, user_id, content in rows:
                value = await count(user_id, content)
                if value is not None:
                    pairs.append((value, turn_id))
            if pairs:
                async with self._transaction():
                    await self.db.executemany("UPDATE turns SET specifics = ? WHERE turn_id = ?", pairs)
            filled += len(pairs)
        return filled

    async def schema_version(self) -> int:
        async with self.db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations") as cur:
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def ping(self) -> None:
        async with self._lock, self.db.execute("SELECT 1") as cur:
            await cur.fetchone()

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        with self.write_health.write(), _storage_errors():
            await self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                if self.db.in_transaction:  # SQLite may already have rolled back (e.g. on a full disk)
                    await self.db.execute("ROLLBACK")
                raise
            else:
                await self.db.execute("COMMIT")

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[aiosqlite.Connection]:
        async with self._lock, self._transaction() as db:
            yield db

    async def _atomic(self, work: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``work(conn, *args, **kwargs)`` (see bot.store.sqlite.trips) in one transaction, in ONE trip to the
        database thread (``bot.store.sqlite.one_trip``), however many statements it runs."""
        with self.write_health.write(), _storage_errors():
            async with self._lock:
                return await on_thread(self.db, in_transaction, work, *args, **kwargs)

    async def _alone(self, work: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``work(conn, *args, **kwargs)`` in ONE trip to the database thread, outside any transaction: for
        reads, and for single statements that are atomic on their own."""
        with _storage_errors():
            async with self._lock:
                return await on_thread(self.db, work, *args, **kwargs)

    async def _all(self, sql: str, params: Iterable[Any] = ()) -> list[aiosqlite.Row]:
        """One round trip to the database thread (execute, fetch and close together)."""
        async with self._lock:
            return list(await self.db.execute_fetchall(sql, tuple(params)))

    async def _write(self, sql: str, params: Iterable[Any] = ()) -> int:
        """A single-statement write: atomic on its own, so no explicit transaction; returns the rows changed.
        One trip to the database thread (execute and close together)."""
        with self.write_health.write(), _storage_errors():
            async with self._lock:
                return await on_thread(self.db, trips.changes, sql, tuple(params))

    async def _read_one(self, sql: str, params: Iterable[Any] = ()) -> aiosqlite.Row | None:
        """A one-statement read on the reader connection, for the reads a member waits on while writes queue on
        the main one (a voice turn's key check, while other calls' lines are being stored): it waits for no
        write of this process, and sees every committed one (WAL: each read starts from the latest commit)."""
        reader = self._reader
        if reader is None:
            return await self._one(sql, params)
        with _storage_errors():
            async with self._reader_lock:
                rows = await reader.execute_fetchall(sql, tuple(params))
        return next(iter(rows), None)

    async def _one(self, sql: str, params: Iterable[Any] = ()) -> aiosqlite.Row | None:
        rows = await self._all(sql, params)
        return rows[0] if rows else None

    async def _scalar(self, sql: str, params: Iterable[Any] = ()) -> Any:
        row = await self._one(sql, params)
        return None if row is None else row[0]

    # ---- the primitives of the queries written once (``bot.store.shared``) ----------------------------

    async def _rows(self, sql: str, *params: Any) -> list[Any]:
        return await self._all(sqlite_sql(sql), params)

    async def _row(self, sql: str, *params: Any) -> Any | None:
        return await self._one(sqlite_sql(sql), params)

    async def _changed(self, sql: str, *params: Any) -> int:
        return await self._write(sqlite_sql(sql), params)


# ---- helpers ---------------------------------------------------------------------------------------------


@contextmanager
def _storage_errors() -> Iterator[None]:
    """A full disk (SQLITE_FULL) crosses the store boundary as StorageFull, which callers can act on."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(exc):
            raise StorageFull(str(exc)) from exc
        raise


async def _plain_specifics(_user_id: int, content: str) -> int | None:
    return stored_specifics(None, content)


def _split_sql(script: str) -> list[str]:
    """Split a migration into statements, keeping trigger bodies (BEGIN ... END;) whole."""
    statements, current = [], []
    in_trigger = False
    for line in script.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("--"):
            continue
        current.append(line)
        upper = stripped.upper()
        if upper.startswith("CREATE TRIGGER"):
            in_trigger = True
        if in_trigger:
            if upper == "END;":
                statements.append("\n".join(current))
                current, in_trigger = [], False
        elif stripped.endswith(";"):
            statements.append("\n".join(current))
            current = []
    if current:
        statements.append("\n".join(current))
    return statements


async def _changes(db: aiosqlite.Connection, sql: str, params: tuple[Any, ...]) -> int:
    cur = await db.execute(sql, params)
    return max(cur.rowcount, 0)


def _to_db(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, dict | list):
        return json.dumps(value)
    return value


def _guild(guild_id: int, row: aiosqlite.Row | None) -> GuildSettings:
    if row is None:
        return GuildSettings(guild_id=guild_id)
    return GuildSettings(
        guild_id=guild_id,
        calls_enabled=bool(row["calls_enabled"]),
        persona=row["persona"],
        greeting=row["greeting"],
        max_call_minutes=row["max_call_minutes"],
        calls_per_member_per_day=row["calls_per_member_per_day"],
        retention_days=row["retention_days"],
        language=row["language"],
        personal_greetings=bool(row["personal_greetings"]),
    )


def _turn(row: aiosqlite.Row) -> TurnRecord:
    return turn_record(row)


def _fact(row: aiosqlite.Row) -> FactRecord:
    return fact_record(row)
