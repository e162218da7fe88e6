"""Dense retrieval's vectors (`VectorStore`, see `bot.store.vectors`) on SQLite."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from bot.store.columns import FACT_COLUMNS, TURN_COLUMNS
from bot.store.models import FactRecord, TurnRecord
from bot.store.shared import SharedVectors
from bot.store.sqlite.base import SqliteBase
from bot.store.vectors import EmbedItem, ItemKind, fact_record, turn_record

_UNEMBEDDED = """
    SELECT kind, item_id, text FROM (
        SELECT 'fact' AS kind, f.fact_id AS item_id, f.text AS text, 0 AS rank, f.confirmed_at AS at
        FROM facts f LEFT JOIN memory_vectors v ON v.fact_id = f.fact_id AND v.model = ?
        WHERE f.user_id = ? AND f.superseded_by IS NULL AND f.invalidated_at IS NULL AND v.fact_id IS NULL
        UNION ALL
        SELECT 'turn', t.turn_id, t.content, 1, t.spoken_at
        FROM turns t LEFT JOIN memory_vectors v ON v.turn_id = t.turn_id AND v.model = ?
        WHERE t.user_id = ? AND v.turn_id IS NULL AND t.content <> ''
    ) ORDER BY rank, at DESC, item_id DESC LIMIT ?
"""
_PUT = {
    "turn": """
        INSERT INTO memory_vectors (user_id, turn_id, model, vector)
        SELECT ?1, ?2, ?3, ?4 WHERE EXISTS (SELECT 1 FROM turns WHERE turn_id = ?2 AND user_id = ?1)
        ON CONFLICT (turn_id) WHERE turn_id IS NOT NULL DO UPDATE SET model = excluded.model, vector = excluded.vector
    """,
    "fact": """
        INSERT INTO memory_vectors (user_id, fact_id, model, vector)
        SELECT ?1, ?2, ?3, ?4 WHERE EXISTS (SELECT 1 FROM facts WHERE fact_id = ?2 AND user_id = ?1)
        ON CONFLICT (fact_id) WHERE fact_id IS NOT NULL DO UPDATE SET model = excluded.model, vector = excluded.vector
    """,
}


def _put_vectors(conn: sqlite3.Connection, user_id: int, model: str, vectors: list[tuple[ItemKind, int, bytes]]) -> int:
    stored = 0
    for kind, put in _PUT.items():
        rows = [(user_id, item_id, model, blob) for of, item_id, blob in vectors if of == kind]
        if rows:
            stored += max(conn.executemany(put, rows).rowcount, 0)
    return stored


class SqliteVectors(SqliteBase, SharedVectors):
    """Implements `bot.store.vectors.VectorStore`: dense retrieval's embeddings of lines and facts."""

    async def unembedded(self, user_id: int, model: str, limit: int) -> list[EmbedItem]:
        rows = await self._all(_UNEMBEDDED, (model, user_id, model, user_id, limit))
        return [EmbedItem(row[0], int(row[1]), user_id, str(row[2])) for row in rows]

    async def put_vectors(self, user_id: int, model: str, vectors: Sequence[tuple[ItemKind, int, bytes]]) -> int:
        """One transaction in one trip to the database thread, a statement per kind of item (``executemany``)."""
        return await self._atomic(_put_vectors, user_id, model, list(vectors))

    async def count_vectors(self, user_id: int | None = None) -> int:
        rows = await self._all("SELECT COUNT(*) FROM memory_vectors WHERE ?1 IS NULL OR user_id = ?1", (user_id,))
        return int(rows[0][0])

    async def turns_by_id(self, user_id: int, turn_ids: Sequence[int]) -> list[TurnRecord]:
        if not turn_ids:
            return []
        marks = ", ".join("?" * len(turn_ids))
        rows = await self._all(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE user_id = ? AND turn_id IN ({marks})", (user_id, *turn_ids)
        )
        return [turn_record(tuple(row)) for row in rows]

    async def facts_by_id(self, user_id: int, fact_ids: Sequence[int]) -> list[FactRecord]:
        if not fact_ids:
            return []
        marks = ", ".join("?" * len(fact_ids))
        rows = await self._all(
            f"SELECT {FACT_COLUMNS} FROM facts WHERE user_id = ? AND fact_id IN ({marks})", (user_id, *fact_ids)
        )
        return [fact_record(tuple(row)) for row in rows]
