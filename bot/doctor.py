"""What `check` inspects and `run` requires before it starts: the same findings, so they cannot disagree.

Nothing here changes anything: the database is opened read-only (never created or migrated), a folder it would
be created in gets an empty probe folder removed at once, and the web address is only resolved and bound for a
moment. Each finding is one line an operator can act on.
"""

from __future__ import annotations

import errno
import os
import socket
import sqlite3
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from bot.config import Settings
from bot.invocation import bot_command
from bot.store.migrations import LATEST_VERSION, MIGRATIONS

Level = Literal["ok", "warning", "FAIL", "running"]


@dataclass(frozen=True)
class Finding:
    level: Level
    text: str

    @property
    def failed(self) -> bool:
        return self.level == "FAIL"


class StartupProblem(Exception):
    """A known reason the bot cannot start; the message is the one line to print (no traceback). ``exit_status``
    2 is a setting or a file to fix, which restarting cannot (systemd's unit does not restart on 2)."""

    def __init__(self, text: str, *, exit_status: int = 1) -> None:
        super().__init__(text)
        self.exit_status = exit_status


UNUSABLE_DATABASE_EXIT = 2


def _ok(text: str) -> Finding:
    return Finding("ok", text)


def _fail(text: str) -> Finding:
    return Finding("FAIL", text)


def inspect_database(path: Path) -> Finding:
    """The database file as `migrate` would find it, read without writing anything."""
    where = f"memory.database_path {path}"
    problem = database_folder_problem(path)
    if problem is not None:
        return _fail(problem)
    if path.is_dir():
        return _fail(f"{where} is a directory: point it at a file, e.g. {path / 'bot.db'}")
    if not path.exists():
        return _ok(f"{path} does not exist yet: `migrate` (or starting the bot) creates it at schema {LATEST_VERSION}")
    if not os.access(path, os.R_OK | os.W_OK):
        return _fail(f"{where} is not readable and writable by this user")
    try:
        version = _read_schema_version(path)
    except sqlite3.DatabaseError as exc:
        return _fail(
            f"{where} is not a usable SQLite database ({exc}): restore a backup with "
            f"`{bot_command('restore FILE')}`, or move the file away to start empty"
        )
    if version > LATEST_VERSION:
        return _fail(too_new_text(path, version))
    pending = [f"{number} {name}" for number, name, _sql in MIGRATIONS if number > version]
    if pending:
        return _ok(f"{path} is at schema {version}: `migrate` (or starting the bot) would apply {', '.join(pending)}")
    return _ok(f"{path} is reachable and migrated (schema {version})")


def too_new_text(path: Path, version: int) -> str:
    return (
        f"the database {path} has schema version {version}, but this bot only knows up to {LATEST_VERSION}: "
        "upgrade the bot, or point memory.database_path at another file"
    )


def database_folder_problem(path: Path) -> str | None:
    """Why the SQLite file cannot be created at ``path`` (None when it exists or can be): a folder on its way is a
    file or a link to nowhere, cannot be looked into, or the nearest existing folder takes no new entries. That last
    is tried for real, with an empty probe folder removed at once: permission bits do not tell (root ignores them,
    a read-only mount or an NFS share refuses root anyway)."""
    where = f"memory.database_path (MEMORY_DATABASE_PATH) {path}"
    target = path.absolute()
    for folder in target.parents:
        try:
            info = folder.stat()
        except (FileNotFoundError, NotADirectoryError):
            if folder.is_symlink():
                return f"{where}: the folder {folder} is a link to {os.readlink(folder)}, which does not exist"
            continue
        except OSError as exc:
            return f"{where}: this user cannot look into {folder} ({exc.strerror})"
        if not stat.S_ISDIR(info.st_mode):
            return f"{where}: {folder} is a file, not a folder, so the database cannot be created under it"
        if folder == target.parent and target.exists():
            return None
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".memory-call-bot-check-", dir=folder))
        except OSError as exc:
            return f"{where} cannot be created: nothing can be created in {folder} ({exc.strerror})"
        return None
    return None


def _read_schema_version(path: Path) -> int:
    db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=5)
    try:
        row = db.execute("PRAGMA quick_check").fetchone()
        if row is None or row[0] != "ok":
            raise sqlite3.DatabaseError(f"integrity check: {row[0] if row else 'no answer'}")
        exists = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'")
        if exists.fetchone() is None:
            return 0
        found = db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()
        return int(found[0]) if found else 0
    finally:
        db.close()


def inspect_listen_address(host: str, port: int) -> Finding:
    """Can the call page server listen on web.host:web.port? Resolves and binds for a moment."""
    where = f"web.host:web.port (WEB_HOST, WEB_PORT) {host}:{port}"
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError):
        return _fail(f"web.host (WEB_HOST) {host!r} does not resolve to an address: use e.g. 0.0.0.0 or 127.0.0.1")
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp does
        sock.bind(address)
        sock.listen(1)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return _fail(f"{where} is already in use (another copy of the bot?): stop it or choose another port")
        if exc.errno == errno.EADDRNOTAVAIL:
            return _fail(f"{where}: {host} is not an address of this machine")
        if exc.errno == errno.EACCES:
            return _fail(f"{where}: not allowed to listen there (ports below 1024 need privileges)")
        return _fail(f"{where}: cannot listen ({exc.strerror or exc})")
    finally:
        sock.close()
    return _ok(f"the call page server can listen on {host}:{port}")


RUNNING_BOT_TIMEOUT_SECONDS = 3.0


async def inspect_running_bot(who: str, host: str, port: int) -> Finding | None:
    """The bot that runs on this database (``who``, as its lock names it), as its /healthz at web.host:web.port
    answers; None when nothing there answers as this bot (then the port's finding stands)."""
    import httpx

    address = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    url = f"http://{f'[{address}]' if ':' in address else address}:{port}/healthz"
    try:
        async with httpx.AsyncClient(timeout=RUNNING_BOT_TIMEOUT_SECONDS, trust_env=False) as http:
            health = (await http.get(url)).json()
    except (httpx.HTTPError, ValueError):
        return None
    if not isinstance(health, dict) or "version" not in health or "status" not in health:
        return None
    said = f"{who} (version {health['version']}) runs and answers on {host}:{port}: /healthz says {health['status']}"
    problems = health.get("problems")
    if health["status"] == "ok" or not isinstance(problems, list):
        return Finding("running", said)
    return Finding("warning", f"{said}: {'; '.join(str(p) for p in problems)}")


def startup_findings(settings: Settings) -> list[Finding]:
    """Everything local that would stop `run`: the database and the web server's address."""
    return [
        inspect_configured_database(settings),
        inspect_listen_address(settings.web.host, settings.web.port),
    ]


PG_CHECK_TIMEOUT_SECONDS = 5.0


async def inspect_postgres(url: str) -> Finding:
    """The PostgreSQL database as `migrate` would find it: reached, logged into and its schema read, nothing
    written. The URL's password never appears in the finding."""
    import asyncpg

    from bot.store.copy import describe
    from bot.store.pg_migrations import PG_LATEST_VERSION

    where = f"memory.database_url {describe(url)}"
    try:
        connection = await asyncpg.connect(url, timeout=PG_CHECK_TIMEOUT_SECONDS)
    except (OSError, TimeoutError) as exc:
        return _fail(f"{where}: cannot reach the PostgreSQL server ({type(exc).__name__}); is it running there?")
    except asyncpg.PostgresError as exc:
        return _fail(f"{where}: PostgreSQL refused the connection: {exc}")
    try:
        version = None
        if await connection.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL"):
            version = await connection.fetchval("SELECT COALESCE(MAX(version), 0) FROM schema_migrations")
    except asyncpg.PostgresError as exc:
        return _fail(f"{where}: connected, but cannot read the schema: {exc}")
    finally:
        await connection.close()
    if version is None:
        return _ok(f"{where} is reachable and empty: `migrate` (or starting the bot) creates the schema")
    if version > PG_LATEST_VERSION:
        return _fail(
            f"{where} has schema version {version}, but this bot only knows up to {PG_LATEST_VERSION}: "
            "upgrade the bot, or point memory.database_url at another database"
        )
    if version < PG_LATEST_VERSION:
        return _ok(f"{where} is at schema {version}; the bot migrates it to {PG_LATEST_VERSION} when it starts")
    return _ok(f"{where} is reachable, at schema {version}")


def inspect_configured_database(settings: Settings) -> Finding:
    """The SQLite file, or for PostgreSQL (`memory.database_url`) a note: the server is reached at start-up."""
    if settings.memory.database_url is not None:
        return _ok("memory.database_url: PostgreSQL; connected and migrated when the bot (or `migrate`) starts")
    return inspect_database(settings.memory.database_path)
