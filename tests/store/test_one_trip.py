"""The private parts of aiosqlite that bot/store/sqlite/one_trip.py relies on, as the pinned version has them.

These fail when aiosqlite changes under the pin (or the pin moves without a look at them): the installed version is
the pinned one, ``Connection._execute`` queues a function with its arguments and awaits its result, and
``Connection._conn`` is the ``sqlite3.Connection`` the database thread runs statements on."""

from __future__ import annotations

import asyncio
import inspect
import re
import sqlite3
import threading
import tomllib
from importlib.metadata import version
from pathlib import Path

import aiosqlite
import pytest

from bot.store.sqlite.one_trip import on_thread

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_the_installed_aiosqlite_is_the_pinned_one() -> None:
    dependencies = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    pins = [d for d in dependencies if re.match(r"aiosqlite\b", d)]
    assert pins == [f"aiosqlite=={version('aiosqlite')}"], pins


def test_the_private_attributes_have_the_shape_on_thread_uses() -> None:
    execute = aiosqlite.Connection._execute
    assert inspect.iscoroutinefunction(execute)
    parameters = inspect.signature(execute).parameters
    assert [(p.name, p.kind) for p in parameters.values()] == [
        ("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        ("fn", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        ("args", inspect.Parameter.VAR_POSITIONAL),
        ("kwargs", inspect.Parameter.VAR_KEYWORD),
    ]
    assert isinstance(inspect.getattr_static(aiosqlite.Connection, "_conn"), property)


async def test_work_runs_on_the_database_thread_in_order_with_the_public_calls(tmp_path: Path) -> None:
    async with aiosqlite.connect(tmp_path / "one.db", isolation_level=None) as db:
        db.row_factory = aiosqlite.Row
        await db.execute("CREATE TABLE t (n INTEGER)")
        seen: list[tuple[int, type]] = []

        def work(conn: sqlite3.Connection, first: int, *, then: int) -> list[int]:
            seen.append((threading.get_ident(), type(conn)))
            conn.execute("INSERT INTO t VALUES (?)", (first,))
            conn.execute("INSERT INTO t VALUES (?)", (then,))
            return [row["n"] for row in conn.execute("SELECT n FROM t ORDER BY n")]

        inserted = asyncio.ensure_future(db.execute("INSERT INTO t VALUES (0)"))
        await asyncio.sleep(0)  # the insert is queued to the thread before the work: it runs first
        assert await on_thread(db, work, 1, then=2) == [0, 1, 2]
        await inserted
        assert seen == [(seen[0][0], sqlite3.Connection)] and seen[0][0] != threading.get_ident()

        def fails(conn: sqlite3.Connection) -> None:
            conn.execute("SELECT * FROM missing")

        with pytest.raises(sqlite3.OperationalError):
            await on_thread(db, fails)
