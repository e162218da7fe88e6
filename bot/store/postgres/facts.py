"""Facts and the post-call extraction results (`FactStore`) on PostgreSQL."""

from __future__ import annotations

from bot.store.columns import FACT_COLUMNS as _FACT_COLUMNS
from bot.store.models import (
    Conversation,
    FactRecord,
)
from bot.store.postgres.base import _fact, _prefixed
from bot.store.postgres.fulltext import PostgresFullText
from bot.store.ranking import rerank
from bot.store.shared import SharedFacts
from bot.store.terms import token_count


class PostgresFacts(PostgresFullText, SharedFacts):
    """Implements `bot.store.repository.FactStore`: facts, their sources and supersession, and the post-call
    extraction results written in one transaction."""

    async def rank_facts(self, user_id: int, query: str, limit: int) -> list[tuple[FactRecord, float]]:
        """The member's current facts matching any word of ``query`` (stemmed), best BM25 first."""
        first = await self._first_stage("facts", "fact_id", user_id, query, limit, ())
        if not first:
            return []
        rows = await self._all(
            f"SELECT {_FACT_COLUMNS} FROM facts WHERE fact_id = ANY($1::bigint[]) "
            "AND superseded_by IS NULL AND invalidated_at IS NULL",
            list(first),
        )
        found = [(int(r["fact_id"]), token_count(r["text"]), _fact(r)) for r in rows]
        return rerank(first, found, limit)

    async def facts_from(self, convo: Conversation) -> list[FactRecord]:
        column, ref = convo.column, convo.ref_id
        rows = await self._all(
            f"SELECT DISTINCT {_prefixed(_FACT_COLUMNS, 'f')} FROM fact_sources s "
            f"JOIN facts f ON f.fact_id = s.fact_id WHERE s.{column} = $1 ORDER BY f.fact_id",
            ref,
        )
        return [_fact(r) for r in rows]

    # ---- post-call extraction results ------------------------------------------------------------------
