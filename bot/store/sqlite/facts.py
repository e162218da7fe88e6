"""Facts and the post-call extraction results (`FactStore`) on SQLite."""

from __future__ import annotations

from bot.store.columns import FACT_COLUMNS as _FACT_COLUMNS
from bot.store.models import (
    Conversation,
    FactRecord,
)
from bot.store.shared import SharedFacts
from bot.store.sqlite.base import _fact
from bot.store.sqlite.fulltext import SqliteFullText


class SqliteFacts(SqliteFullText, SharedFacts):
    """Implements `bot.store.repository.FactStore`: facts, their sources and supersession, and the post-call
    extraction results written in one transaction."""

    async def rank_facts(self, user_id: int, query: str, limit: int) -> list[tuple[FactRecord, float]]:
        """The member's current facts matching any word of ``query`` (porter-stemmed), best BM25 first."""
        columns = ", ".join("f." + c.strip() for c in _FACT_COLUMNS.split(","))
        ranked = await self._bm25(
            "facts_fts",
            "text",
            user_id,
            query,
            limit,
            records=f"SELECT {columns}, d.sz FROM facts f JOIN facts_fts_docsize d ON d.id = f.fact_id "
            "WHERE f.fact_id IN (SELECT value FROM json_each(?)) "
            "AND f.superseded_by IS NULL AND f.invalidated_at IS NULL",
        )
        return [(FactRecord(*tuple(row)[:-1]), score) for row, score in ranked]

    async def facts_from(self, convo: Conversation) -> list[FactRecord]:
        column, ref = convo.column, convo.ref_id
        rows = await self._all(
            f"SELECT DISTINCT {', '.join('f.' + c.strip() for c in _FACT_COLUMNS.split(','))} FROM fact_sources s "
            f"JOIN facts f ON f.fact_id = s.fact_id WHERE s.{column} = ? ORDER BY f.fact_id",
            (ref,),
        )
        return [_fact(r) for r in rows]

    # ---- post-call extraction results ------------------------------------------------------------------
