"""A throwaway PostgreSQL cluster for the test session: `initdb` in a temp directory, a Unix socket, a free port.

The cluster is Debian's `postgresql` package (`python3 tasks.py test` installs it when missing). As root the server
runs as the `postgres` user (PostgreSQL refuses to run as root). If it cannot start, the suite fails with a message
saying why; no test is skipped for want of PostgreSQL.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import asyncpg

T = TypeVar("T")

DEBIAN_BIN = Path("/usr/lib/postgresql")
START_TIMEOUT_SECONDS = 60


class PostgresUnavailable(RuntimeError):
    """The test cluster could not be set up; the message says what to install or check."""


def _bin_dir() -> Path:
    override = os.environ.get("PG_BIN")
    if override:
        return Path(override)
    versions = sorted(
        (p for p in DEBIAN_BIN.glob("*/bin") if (p / "initdb").exists()), key=lambda p: int(p.parent.name)
    )
    if versions:
        return versions[-1]
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    raise PostgresUnavailable(
        "PostgreSQL is not installed: run `python3 tasks.py test` (it installs Debian's postgresql package) or "
        "`apt-get install postgresql`; set PG_BIN to the folder holding initdb and pg_ctl if it is elsewhere"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _AdminConnection:
    """One connection to the cluster's ``postgres`` database, on an event loop of its own thread, so that sync code
    and code inside a running loop (an async fixture asking for ``postgres_url``) can both use it. CREATE and DROP
    DATABASE are then a round trip each instead of a psql process each (about 0.1 s less per test database)."""

    def __init__(self, url: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="postgres-admin", daemon=True)
        self._thread.start()
        try:
            self._connection: asyncpg.Connection = self._run(asyncpg.connect(url))
        except BaseException:
            self._stop_loop()
            raise

    def _run(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout=START_TIMEOUT_SECONDS)

    def execute(self, sql: str) -> None:
        self._run(self._connection.execute(sql))

    def close(self) -> None:
        try:
            self._run(self._connection.close())
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=START_TIMEOUT_SECONDS)
        self._loop.close()


class PostgresCluster:
    """One server process for the whole session; each test gets its own database (`new_database`)."""

    def __init__(self, options: str = "") -> None:
        self.options = options
        self.bin = _bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="pgtest-"))
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.port = _free_port()
        self.user = "postgres"
        self._run_as: list[str] = []
        self._names = itertools.count(1)
        self._admin: _AdminConnection | None = None
        if os.geteuid() == 0:
            try:
                account = pwd.getpwnam("postgres")
            except KeyError as exc:
                raise PostgresUnavailable(
                    "running as root needs the `postgres` user (Debian's package makes it)"
                ) from exc
            self._run_as = ["runuser", "-u", "postgres", "--"]
            os.chown(self.root, account.pw_uid, account.pw_gid)
        self.socket_dir.mkdir()
        if self._run_as:
            shutil.chown(self.socket_dir, "postgres", "postgres")

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self._run_as, *args], capture_output=True, text=True, timeout=START_TIMEOUT_SECONDS)

    def start(self) -> None:
        init = self._run(
            str(self.bin / "initdb"), "-D", str(self.data), "-U", self.user, "--auth=trust", "-E", "UTF8",
            "--locale=C", "--no-sync",
        )  # fmt: skip
        if init.returncode != 0:
            raise PostgresUnavailable(f"initdb failed:\n{init.stdout}\n{init.stderr}")
        self._start_server()

    def copy(self) -> PostgresCluster:
        """Another server started from a copy of this one's data directory, as a backup taken now would be
        (run CHECKPOINT first); the caller stops it."""
        other = PostgresCluster(self.options)
        copied = self._run("cp", "-a", str(self.data), str(other.data))
        if copied.returncode != 0:
            raise PostgresUnavailable(f"copying the data directory failed: {copied.stderr}")
        (other.data / "postmaster.pid").unlink(missing_ok=True)
        other._start_server()
        return other

    def _start_server(self) -> None:
        options = (
            f"-k {self.socket_dir} -p {self.port} -c listen_addresses='' -c fsync=off -c full_page_writes=off "
            f"-c max_connections=300 -c shared_buffers=32MB {self.options}"
        )
        started = self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.root / "server.log"),
            "-w", "-t", str(START_TIMEOUT_SECONDS), "start",
        )  # fmt: skip
        if started.returncode != 0:
            log = (self.root / "server.log").read_text(errors="replace") if (self.root / "server.log").exists() else ""
            raise PostgresUnavailable(f"the PostgreSQL test server did not start:\n{started.stderr}\n{log}")

    def stop(self) -> None:
        if self._admin is not None:
            admin, self._admin = self._admin, None
            admin.close()
        if (self.data / "postmaster.pid").exists():
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@/{database}?host={self.socket_dir}&port={self.port}"

    def psql(self, database: str, sql: str) -> str:
        result = subprocess.run(
            [str(self.bin / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", str(self.socket_dir),
             "-p", str(self.port), "-U", self.user, "-d", database, "-c", sql],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"psql failed: {result.stderr}")
        return result.stdout

    def _administer(self, sql: str) -> None:
        if self._admin is None:
            self._admin = _AdminConnection(self.url())
        self._admin.execute(sql)

    def new_database(self, template: str = "template0") -> str:
        """A fresh database, a copy of ``template`` (by default empty); returns its URL. The caller drops it
        (`drop_database`), or uses `database`. FILE_COPY copies the template's files (with fsync off, cheaper than
        writing them through the WAL); nobody may be connected to the template meanwhile."""
        name = f"t{os.getpid()}_{next(self._names)}"
        self._administer(f"CREATE DATABASE {name} TEMPLATE {template} STRATEGY FILE_COPY")
        return self.url(name)

    def drop_database(self, url: str) -> None:
        """Drop a database made by `new_database`, closing whatever connections a test left open to it."""
        self._administer(f"DROP DATABASE IF EXISTS {database_name(url)} WITH (FORCE)")

    @contextmanager
    def database(self, template: str = "template0") -> Iterator[str]:
        """A fresh database for the block (`new_database`), dropped after it: a session of hundreds of tests leaves
        no databases behind for the server's shutdown to remove."""
        url = self.new_database(template)
        try:
            yield url
        finally:
            self.drop_database(url)


def database_name(url: str) -> str:
    """The database of a test cluster's URL (postgresql://user@/NAME?host=...)."""
    return url.split("@/", 1)[1].split("?", 1)[0]


def running_cluster() -> Iterator[PostgresCluster]:
    cluster = PostgresCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
