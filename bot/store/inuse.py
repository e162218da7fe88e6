"""Which bot processes use a database, so the commands that replace or rewrite it refuse while one does.

A running bot holds a shared lock on its database for as long as it runs; `restore`, `copy-db` into a database,
`rotate-master-key` and encrypting a database in place take the exclusive lock for as long as they write, so they
refuse while any bot runs (naming it) and a bot does not start while they write.

Locks rather than a table of running processes refreshed by each one: the operating system (SQLite) or the server
(PostgreSQL) drops a lock the moment its process or connection dies, so a killed bot leaves nothing stale to age
out, nothing is written while the bot runs (a full disk cannot make it look stopped), no migration is needed, and
the lock is there even when the database file itself is damaged (the usual reason to restore).

- SQLite: a POSIX record lock (``fcntl``) on ``<database>.lock`` beside the file, which no command deletes. Bots in
  containers sharing the volume see each other's locks (one kernel). A process never conflicts with its own locks,
  so a bot encrypting in place converts its shared lock to exclusive and back, atomically.
- PostgreSQL: a session advisory lock, held on one connection of the bot's own (its ``application_name`` names
  the process). Advisory locks belong to one database, so bots of other databases on the server do not count.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import struct
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Protocol

import asyncpg

from bot.store.private import FILE_MODE, private_folder

log = logging.getLogger(__name__)

PG_LOCK_KEYS = (0x4D43_4231, 1)
"""The advisory lock's two int4 keys ("MCB1", 1); pg_locks shows them as classid and objid (objsubid 2)."""
PG_WATCH_SECONDS = 10.0
STOP_HINT = (
    "stop it first (`systemctl stop memory-call-bot`, or `docker compose --env-file .env -f deploy/compose.yaml stop "
    "bot`), then run this again"
)


class DatabaseInUse(Exception):
    """A bot process (or a command rewriting it) uses the database; the message names it and what to do."""


class DatabaseUse(Protocol):
    label: str

    async def hold(self) -> None:
        """Held by a running bot until ``release``: raises ``DatabaseInUse`` while a command rewrites it."""

    async def release(self) -> None: ...

    def alone(self, doing: str) -> contextlib.AbstractAsyncContextManager[None]:
        """Exclusive use while the block runs; raises ``DatabaseInUse`` naming the bot process that uses it."""

    async def running(self) -> str | None:
        """The bot process that runs on the database now, as its lock names it (None when none does); takes
        nothing and creates nothing (what `check` asks)."""


def lock_path(database: Path) -> Path:
    return database.with_name(database.name + ".lock")


def process_name() -> str:
    return f"memory-call-bot pid {os.getpid()} on {socket.gethostname()}"


class SqliteUse:
    def __init__(self, database: Path):
        self.database = database
        self.path = lock_path(database)
        self.label = f"memory.database_path {database}"
        self._held: int | None = None

    def _open(self) -> int:
        private_folder(self.path.parent)
        return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)

    async def hold(self) -> None:
        fd = self._open()
        try:
            fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _holder(fd)
            os.close(fd)
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            raise DatabaseInUse(
                f"{self.label} is being replaced or rewritten by a command{holder}: wait for it to finish, "
                "then start the bot again"
            ) from None
        self._held = fd
        _say_who(fd)

    async def release(self) -> None:
        if self._held is not None:
            os.close(self._held)  # closing drops the process's lock
            self._held = None

    @contextlib.asynccontextmanager
    async def alone(self, doing: str) -> AsyncIterator[None]:
        fd = self._held if self._held is not None else self._open()
        try:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                raise DatabaseInUse(
                    f"cannot {doing} while a bot process{_holder(fd)} uses {self.label}: {STOP_HINT}. Nothing was "
                    "changed."
                ) from None
            yield
        finally:
            if fd == self._held:
                fcntl.lockf(fd, fcntl.LOCK_SH)  # back to shared, atomically (a POSIX lock's conversion)
            else:
                os.close(fd)

    async def running(self) -> str | None:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            kind, pid = _conflicting(fd)
            if kind != fcntl.F_RDLCK:  # nobody, or a command rewriting the database (exclusive)
                return None
            said = os.pread(fd, 1024, 0).decode("utf-8", "replace")
        finally:
            os.close(fd)
        try:
            who = json.loads(said)
            named, named_pid = str(who["name"]), int(who["pid"])
        except (ValueError, KeyError, TypeError):
            return f"process {pid}" if pid > 0 else "a bot process"
        if pid > 0 and pid != named_pid:  # the lock file names another bot (of the same database) than the kernel
            return f"process {pid}"
        return named


def _say_who(fd: int) -> None:
    """Writes into the held lock file which bot holds it, for `check` (``running``); the lock itself is the truth:
    a stopped bot's words stay, but no lock goes with them. Another bot sharing the file overwrites them."""
    who = json.dumps({"name": process_name(), "pid": os.getpid(), "since": time.time()}).encode()
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, who, 0)
    except OSError as exc:  # a full disk: the lock still holds, only its words are missing
        log.debug("cannot write who holds %s: %s", fd, exc)


def _conflicting(fd: int) -> tuple[int, int]:
    """(kind, pid) of one lock that conflicts with an exclusive one (Linux's F_GETLK): F_UNLCK when none, the
    pid 0 when its process is in another pid namespace (e.g. another container)."""
    request = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    try:
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, request)
        kind, _whence, _start, _length, pid = struct.unpack("hhqqi4x", answer)
    except (OSError, struct.error):
        return fcntl.F_UNLCK, 0
    return int(kind), int(pid)


def _holder(fd: int) -> str:
    """`` (process N)``: one process holding a lock that conflicts with an exclusive one (Linux's F_GETLK; the
    pid is 0 when that process is in another pid namespace, e.g. another container, then nothing is said)."""
    kind, pid = _conflicting(fd)
    return f" (process {pid})" if kind != fcntl.F_UNLCK and pid > 0 else ""


class PostgresUse:
    def __init__(self, url: str, label: str):
        self.url = url
        self.label = label
        self._connection: asyncpg.Connection | None = None
        self._watch: asyncio.Task[None] | None = None

    async def _connect(self, role: str) -> asyncpg.Connection:
        return await asyncpg.connect(self.url, server_settings={"application_name": f"{process_name()} ({role})"})

    async def _lock_shared(self) -> asyncpg.Connection:
        connection = await self._connect("running bot")
        if not await connection.fetchval("SELECT pg_try_advisory_lock_shared($1, $2)", *PG_LOCK_KEYS):
            holders = await _pg_holders(connection)
            await connection.close()
            raise DatabaseInUse(
                f"{self.label} is being replaced or rewritten by a command{holders}: wait for it to finish, "
                "then start the bot again"
            )
        return connection

    async def hold(self) -> None:
        self._connection = await self._lock_shared()
        self._watch = asyncio.create_task(self._keep(), name="database-in-use")

    async def _keep(self) -> None:
        """The lock goes with its connection (a server restart, a network cut): take it again on a new one."""
        while True:
            await asyncio.sleep(PG_WATCH_SECONDS)
            if self._connection is not None and not self._connection.is_closed():
                continue
            try:
                self._connection = await self._lock_shared()
                log.info("the lock that shows this bot uses %s is held again", self.label)
            except Exception as exc:
                log.warning("cannot show other commands that this bot uses %s (retrying): %s", self.label, exc)

    async def release(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None
        if self._connection is not None:
            await self._connection.close()
            self._connection = None

    @contextlib.asynccontextmanager
    async def alone(self, doing: str) -> AsyncIterator[None]:
        own = self._connection is None
        connection = await self._connect(doing) if own else self._connection
        assert connection is not None
        try:
            # The same session's shared lock never conflicts with its exclusive one: only other sessions count.
            if not await connection.fetchval("SELECT pg_try_advisory_lock($1, $2)", *PG_LOCK_KEYS):
                raise DatabaseInUse(
                    f"cannot {doing} while a bot process{await _pg_holders(connection)} uses {self.label}: "
                    f"{STOP_HINT}. Nothing was changed."
                )
            try:
                yield
            finally:
                if not own:
                    await connection.fetchval("SELECT pg_advisory_unlock($1, $2)", *PG_LOCK_KEYS)
        finally:
            if own:
                await connection.close()

    async def running(self) -> str | None:
        connection = await self._connect("check")
        try:
            names = await _pg_holder_names(connection, mode="ShareLock")
        finally:
            await connection.close()
        bots = [name.removesuffix(" (running bot)") for name in names if name.endswith(" (running bot)")]
        return ", ".join(bots) if bots else None


async def _pg_holders(connection: asyncpg.Connection) -> str:
    """`` (memory-call-bot pid N on HOST (running bot), …)``: the application names of the other sessions holding
    the lock, as far as this role may see them."""
    names = await _pg_holder_names(connection)
    return f" ({', '.join(names)})" if names else ""


async def _pg_holder_names(connection: asyncpg.Connection, *, mode: str | None = None) -> list[str]:
    rows = await connection.fetch(
        "SELECT a.application_name FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE l.locktype = 'advisory' AND l.granted AND l.pid <> pg_backend_pid() AND l.classid = $1::bigint::oid "
        "AND l.objid = $2::bigint::oid AND l.objsubid = 2 AND ($3::text IS NULL OR l.mode = $3) AND l.database = "
        "(SELECT oid FROM pg_database WHERE datname = current_database())",
        *PG_LOCK_KEYS,
        mode,
    )
    return sorted({str(r["application_name"]) for r in rows if r["application_name"]})


def use_for_url(url: str) -> DatabaseUse:
    """As ``bot.store.copy.store_for_url`` reads URLs."""
    from bot.store.copy import describe

    if url.startswith(("postgresql://", "postgres://")):
        return PostgresUse(url, describe(url))
    path = url.removeprefix("sqlite:").removeprefix("//") if url.startswith("sqlite:") else url
    return SqliteUse(Path(path))
