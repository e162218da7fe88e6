"""Dense retrieval's vectors (`VectorStore`, see `bot.store.vectors`) on PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence

from bot.store.columns import FACT_COLUMNS, TURN_COLUMNS
from bot.store.models import FactRecord, TurnRecord
from bot.store.postgres.base import PostgresBase
from bot.store.shared import SharedVectors
from bot.store.vectors import (
    FACT_NAMES,
    TURN_NAMES,
    EmbedItem,
    ItemKind,
    fact_record,
    turn_record,
)

_UNEMBEDDED = """
    SELECT kind, item_id, text FROM (
        SELECT 'fact' AS kind, f.fact_id AS item_id, f.text AS text, 0 AS rank, f.confirmed_at AS at
        FROM facts f LEFT JOIN memory_vectors v ON v.fact_id = f.fact_id AND v.model = $1
        WHERE f.user_id = $2 AND f.superseded_by IS NULL AND f.invalidated_at IS NULL AND v.fact_id IS NULL
        UNION ALL
        SELECT 'turn', t.turn_id, t.content, 1, t.spoken_at
        FROM turns t LEFT JOIN memory_vectors v ON v.turn_id = t.turn_id AND v.model = $1
        WHERE t.user_id = $2 AND v.turn_id IS NULL AND t.content <> ''
    ) AS pending ORDER BY rank, at DESC, item_id DESC LIMIT $3
"""
_PUT = {
    "turn": """
        INSERT INTO memory_vectors (user_id, turn_id, model, vector)
        SELECT $1, t.turn_id, $3, v.vector
        FROM unnest($2::bigint[], $4::bytea[]) AS v(item_id, vector)
        JOIN turns t ON t.turn_id = v.item_id AND t.user_id = $1
        ON CONFLICT (turn_id) WHERE turn_id IS NOT NULL DO UPDATE SET model = excluded.model, vector = excluded.vector
    """,
    "fact": """
        INSERT INTO memory_vectors (user_id, fact_id, model, vector)
        SELECT $1, f.fact_id, $3, v.vector
        FROM unnest($2::bigint[], $4::bytea[]) AS v(item_id, vector)
        JOIN facts f ON f.fact_id = v.item_id AND f.user_id = $1
        ON CONFLICT (fact_id) WHERE fact_id IS NOT NULL DO UPDATE SET model = excluded.model, vector = excluded.vector
    """,
}
"""One statement per kind for a whole batch (a round trip per vector cost more than embedding the line); a line
or fact forgotten meanwhile joins nothing and gets no vector."""


class PostgresVectors(PostgresBase, SharedVectors):
    """Implements `bot.store.vectors.VectorStore`: dense retrieval's embeddings of lines and facts."""

    async def unembedded(self, user_id: int, model: str, limit: int) -> list[EmbedItem]:
        rows = await self._all(_UNEMBEDDED, model, user_id, limit)
        return [EmbedItem(row["kind"], int(row["item_id"]), user_id, str(row["text"])) for row in rows]

    async def put_vectors(self, user_id: int, model: str, vectors: Sequence[tuple[ItemKind, int, bytes]]) -> int:
        latest: dict[tuple[ItemKind, int], bytes] = {(kind, item_id): blob for kind, item_id, blob in vectors}
        stored = 0
        async with self._tx() as db:
            for kind in ("turn", "fact"):
                ids = [item_id for k, item_id in latest if k == kind]
                if ids:
                    blobs = [latest[(kind, item_id)] for item_id in ids]
                    status = await db.execute(_PUT[kind], user_id, ids, model, blobs)
                    stored += int(status.rsplit(" ", 1)[-1])
        return stored

    async def count_vectors(self, user_id: int | None = None) -> int:
        rows = await self._all("SELECT COUNT(*) FROM memory_vectors WHERE $1::BIGINT IS NULL OR user_id = $1", user_id)
        return int(rows[0][0])

    async def turns_by_id(self, user_id: int, turn_ids: Sequence[int]) -> list[TurnRecord]:
        if not turn_ids:
            return []
        rows = await self._all(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE user_id = $1 AND turn_id = ANY($2::BIGINT[])",
            user_id,
            list(turn_ids),
        )
        return [turn_record([row[name] for name in TURN_NAMES]) for row in rows]

    async def facts_by_id(self, user_id: int, fact_ids: Sequence[int]) -> list[FactRecord]:
        if not fact_ids:
            return []
        rows = await self._all(
            f"SELECT {FACT_COLUMNS} FROM facts WHERE user_id = $1 AND fact_id = ANY($2::BIGINT[])",
            user_id,
            list(fact_ids),
        )
        return [fact_record([row[name] for name in FACT_NAMES]) for row in rows]
