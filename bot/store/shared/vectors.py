"""Dense retrieval's reads of a member's vectors, the same query on both backends."""

from __future__ import annotations

from bot.store.shared.base import (
    SqlBase,
)
from bot.store.vectors import StoredVector, stored_vector


class SharedVectors(SqlBase):
    """Dense retrieval's reads of a member's vectors, the same query on both backends."""

    async def member_vectors(self, user_id: int, model: str, *, after_id: int = 0) -> list[StoredVector]:
        rows = await self._rows(
            "SELECT vector_id, turn_id, fact_id, vector FROM memory_vectors WHERE user_id = $1 AND model = $2 "
            "AND vector_id > $3 ORDER BY vector_id",
            user_id,
            model,
            after_id,
        )
        return [stored_vector(user_id, *row) for row in rows]

    async def vectors_stamp(self, user_id: int, model: str) -> tuple[int, int]:
        row = await self._row(
            "SELECT COUNT(*), COALESCE(SUM(vector_id), 0) FROM memory_vectors WHERE user_id = $1 AND model = $2",
            user_id,
            model,
        )
        assert row is not None  # an aggregate always yields a row
        return int(row[0]), int(row[1])
