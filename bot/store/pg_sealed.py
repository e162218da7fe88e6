"""PostgreSQL's side of member encryption (bot.keys.encrypted): the search configuration and sealing in place.

With member encryption the texts are sealed (bot.keys.sealed): their searchable part is keyed hashes of the
already stemmed terms. Migration 7 builds a sealed row's ``tsvector`` with the ``simple`` configuration (no
stemming of hashes); the queries of an encrypting store must use it too (``HASHED_SEARCH_CONFIG``). Plain
PostgreSQL keeps the ``memory`` configuration (English Snowball, like FTS5's porter)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import asyncpg

from bot.store.columns import RESEALED_TERMS

PLAIN_SEARCH_CONFIG = "memory"
HASHED_SEARCH_CONFIG = "simple"

_SOURCES = (
    ("turns", "turn_id", "content", "turns.content"),
    ("facts", "fact_id", "text", "facts.text"),
    ("calls", "call_id", "summary", "calls.summary"),
    ("chats", "chat_id", "summary", "chats.summary"),
)


async def reseal_texts(pool: asyncpg.Pool, reseal: Callable[[int, str, str], Awaitable[str | None]]) -> int:
    """Rewrites every member text through ``reseal(user_id, column, value)`` in one transaction (None leaves a
    value as it is), then rewrites the changed tables (``VACUUM (FULL)``, with the vectors the changes deleted) so
    the plain versions leave their table files. Returns how many values changed. What the WAL still holds is said
    in the operator guide (docs/operator-guide.md, "Member keys")."""
    changed_tables = []
    async with pool.acquire() as db:
        async with db.transaction():
            for table, key, column, name in _SOURCES:
                rows = await db.fetch(f"SELECT {key}, user_id, {column} FROM {table} WHERE {column} IS NOT NULL")
                updates = []
                for row in rows:
                    new = await reseal(int(row["user_id"]), name, str(row[column]))
                    if new is not None:
                        updates.append((new, row[key]))
                terms = RESEALED_TERMS if table == "turns" else ""
                await db.executemany(f"UPDATE {table} SET {column} = $1{terms} WHERE {key} = $2", updates)
                if updates:
                    changed_tables.append((table, len(updates)))
        rewritten = [table for table, _ in changed_tables]
        if {"turns", "facts"} & set(rewritten):
            rewritten.append("memory_vectors")  # a changed text's plain vector was deleted (migration 7's trigger)
        for table in rewritten:
            await db.execute(f"VACUUM (FULL) {table}")
    return sum(n for _, n in changed_tables)
