"""`python -m bot copy-db --from URL --to URL`: move a whole database between backends (SQLite <-> PostgreSQL).

Rows are copied table by table with their ids; derived data (full-text indexes) is rebuilt by the target. The copy
is proven by comparing every member's export on both sides; any difference fails the command.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bot.store.postgres import PostgresStore
from bot.store.repository import Store
from bot.store.sqlite import SqliteStore

# Parents before children (foreign keys); tables added later that are not listed are copied after these.
TABLE_ORDER = [
    "users",
    "guild_settings",
    "calls",
    "chats",
    "turns",
    "facts",
    "fact_sources",
    "live_turns",
    "jobs",
    "notices",
    "meta",
]
# Rows of these tables point at rows of the same table; the column is filled in after every row exists.
SELF_REFERENCES = {"facts": "superseded_by"}
SKIPPED = {"schema_migrations", "memory_versions"}  # memory_versions: the target's triggers count anew
BATCH = 500


class CopyFailed(Exception):
    """The copy could not be made or proven; the message says why."""


def store_for_url(url: str) -> Store:
    """`postgresql://…` (or `postgres://…`) is PostgreSQL; `sqlite:///path`, `sqlite:path` or a plain path is SQLite."""
    if url.startswith(("postgresql://", "postgres://")):
        return PostgresStore(url)
    if url.startswith("sqlite:"):
        url = url.removeprefix("sqlite:").removeprefix("//")
    if "://" in url:
        raise CopyFailed(f"unknown database URL {url!r}: use postgresql://… or sqlite:///path/to/bot.db")
    return SqliteStore(Path(url))


def describe(url: str) -> str:
    """The URL without its password, for messages."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
    return url


class _Tables(Protocol):
    async def tables(self) -> list[str]: ...
    async def columns(self, table: str) -> list[str]: ...
    async def count(self, table: str) -> int: ...
    async def read(self, table: str, columns: Sequence[str]) -> list[tuple[Any, ...]]: ...
    async def write(self, table: str, columns: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> None: ...
    async def set_column(self, table: str, key: str, column: str, pairs: Sequence[tuple[Any, Any]]) -> None: ...
    async def finish(self) -> None: ...


class _SqliteTables:
    def __init__(self, store: SqliteStore):
        self.db = store.db

    async def tables(self) -> list[str]:
        rows = await self.db.execute_fetchall(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL%' "
            "AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '%_fts_%'"
        )
        return [r[0] for r in rows]

    async def columns(self, table: str) -> list[str]:
        # table_xinfo lists generated columns too (hidden = 2 or 3): those are not copied.
        rows = await self.db.execute_fetchall(f"PRAGMA table_xinfo({table})")
        return [r[1] for r in rows if r[6] == 0]

    async def count(self, table: str) -> int:
        rows = list(await self.db.execute_fetchall(f"SELECT COUNT(*) FROM {table}"))
        return int(rows[0][0])

    async def read(self, table: str, columns: Sequence[str]) -> list[tuple[Any, ...]]:
        without_rowid = list(
            await self.db.execute_fetchall("SELECT wr FROM pragma_table_list WHERE name = ?", (table,))
        )
        order = "" if without_rowid and without_rowid[0][0] else " ORDER BY rowid"
        rows = await self.db.execute_fetchall(f"SELECT {', '.join(columns)} FROM {table}{order}")
        return [tuple(r) for r in rows]

    async def write(self, table: str, columns: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> None:
        marks = ", ".join("?" * len(columns))
        await self.db.execute("BEGIN IMMEDIATE")
        await self.db.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows)
        await self.db.execute("COMMIT")

    async def set_column(self, table: str, key: str, column: str, pairs: Sequence[tuple[Any, Any]]) -> None:
        await self.db.execute("BEGIN IMMEDIATE")
        await self.db.executemany(f"UPDATE {table} SET {column} = ? WHERE {key} = ?", [(v, k) for k, v in pairs])
        await self.db.execute("COMMIT")

    async def finish(self) -> None:
        return None


class _PostgresTables:
    def __init__(self, store: PostgresStore):
        self.pool = store.pool
        self._types: dict[str, dict[str, str]] = {}

    async def tables(self) -> list[str]:
        rows = await self.pool.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
            "AND table_type = 'BASE TABLE'"
        )
        return [r[0] for r in rows]

    async def columns(self, table: str) -> list[str]:
        rows = await self.pool.fetch(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = 'public' "
            "AND table_name = $1 AND is_generated = 'NEVER' ORDER BY ordinal_position",
            table,
        )
        self._types[table] = {r[0]: r[1] for r in rows}
        return [r[0] for r in rows]

    async def count(self, table: str) -> int:
        return int(await self.pool.fetchval(f"SELECT COUNT(*) FROM {table}"))

    async def read(self, table: str, columns: Sequence[str]) -> list[tuple[Any, ...]]:
        keys = await self._key(table)
        order = f" ORDER BY {', '.join(keys)}" if keys else ""
        rows = await self.pool.fetch(f"SELECT {', '.join(columns)} FROM {table}{order}")
        return [tuple(r) for r in rows]

    async def write(self, table: str, columns: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> None:
        if table not in self._types:
            await self.columns(table)
        types = [self._types[table][c] for c in columns]
        converted = [tuple(_to_pg(v, t) for v, t in zip(row, types, strict=True)) for row in rows]
        marks = ", ".join(f"${i}" for i in range(1, len(columns) + 1))
        async with self.pool.acquire() as db, db.transaction():
            await db.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", converted)

    async def set_column(self, table: str, key: str, column: str, pairs: Sequence[tuple[Any, Any]]) -> None:
        async with self.pool.acquire() as db, db.transaction():
            await db.executemany(f"UPDATE {table} SET {column} = $2 WHERE {key} = $1", pairs)

    async def finish(self) -> None:
        """Identity columns continue after the copied ids."""
        rows = await self.pool.fetch(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public' "
            "AND is_identity = 'YES'"
        )
        for table, column in rows:
            await self.pool.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), "
                f"COALESCE((SELECT MAX({column}) FROM {table}), 0) + 1, false)"
            )

    async def _key(self, table: str) -> list[str]:
        rows = await self.pool.fetch(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = $1::regclass AND i.indisprimary",
            table,
        )
        return [r[0] for r in rows]


def _to_pg(value: Any, data_type: str) -> Any:
    if value is None:
        return None
    if data_type == "boolean":
        return bool(value)
    if data_type in ("bigint", "integer", "smallint"):
        return int(value)
    if data_type == "double precision":
        return float(value)
    return value


def _tables_of(store: Store) -> _Tables:
    if isinstance(store, SqliteStore):
        return _SqliteTables(store)
    if isinstance(store, PostgresStore):
        return _PostgresTables(store)
    raise CopyFailed(f"cannot copy from or to {type(store).__name__}")


@dataclass(frozen=True)
class CopyReport:
    rows: dict[str, int]
    members: int


async def copy_database(source: Store, target: Store, *, verify: bool = True) -> CopyReport:
    """Copy every row of `source` into the empty `target` (both open and migrated), then prove it by comparing
    every member's export (`verify`; only a benchmark's bulk fill skips it)."""
    if await source.schema_version() != await target.schema_version():
        raise CopyFailed(
            f"the databases are at different schema versions ({await source.schema_version()} and "
            f"{await target.schema_version()}): run the newer bot's `migrate` command on both first"
        )
    src, dst = _tables_of(source), _tables_of(target)
    target_tables = set(await dst.tables()) - SKIPPED
    for table in sorted(target_tables):
        if await dst.count(table):
            raise CopyFailed(f"the target database is not empty (table {table} has rows): copy into a new database")
    present = [t for t in await src.tables() if t in target_tables]
    ordered = [t for t in TABLE_ORDER if t in present] + sorted(set(present) - set(TABLE_ORDER))
    copied: dict[str, int] = {}
    for table in ordered:
        target_columns = set(await dst.columns(table))
        columns = [c for c in await src.columns(table) if c in target_columns]
        rows = await src.read(table, columns)
        later = SELF_REFERENCES.get(table)
        if later in columns:
            index = columns.index(later)
            key = columns[0]
            pending = [(row[0], row[index]) for row in rows if row[index] is not None]
            rows = [(*row[:index], None, *row[index + 1 :]) for row in rows]
        for start in range(0, len(rows), BATCH):
            await dst.write(table, columns, rows[start : start + BATCH])
        if later in columns:
            await dst.set_column(table, key, later, pending)
        copied[table] = len(rows)
    await dst.finish()
    members = await _member_ids(src) if verify else []
    for user_id in members:
        before, after = await source.export_user(user_id), await target.export_user(user_id)
        before.pop("exported_at", None)
        after.pop("exported_at", None)
        if before != after:
            raise CopyFailed(f"the copy differs from the source for member {user_id}; the target is incomplete")
    return CopyReport(rows=copied, members=len(members))


async def _member_ids(tables: _Tables) -> list[int]:
    ids: set[int] = set()
    for table in ("users", "calls", "chats", "turns", "facts"):
        for (user_id,) in await tables.read(table, ["user_id"]):
            ids.add(int(user_id))
    return sorted(ids)
