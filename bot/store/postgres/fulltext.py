"""Full-text ranking over PostgreSQL's tsvector columns: the first stage of BM25 from the member's own rows."""

from __future__ import annotations

from collections.abc import Sequence

from bot.store.postgres.base import PostgresBase
from bot.store.ranking import first_stage, fts_terms


class PostgresFullText(PostgresBase):
    """The BM25 first stage shared by turns and facts (scored as on SQLite: bot.store.ranking)."""

    async def _first_stage(
        self, table: str, key: str, user_id: int, query: str, limit: int, excluded: Sequence[int]
    ) -> dict[int, float]:
        """One round trip: the member's row count and, per query term, the member's rows holding it."""
        terms = fts_terms(query)
        if not terms:
            return {}
        current = " AND t.superseded_by IS NULL AND t.invalidated_at IS NULL" if table == "facts" else ""
        rows = await self._all(
            f"SELECT 0 AS i, NULL::bigint[] AS ids, (SELECT COUNT(*) FROM {table} WHERE user_id = $1) AS n "
            f"UNION ALL SELECT q.i, array_agg(t.{key}), 0 FROM unnest($2::text[]) WITH ORDINALITY AS q(term, i) "
            f"JOIN {table} t ON t.search @@ (to_tsquery('simple', $3) && phraseto_tsquery('memory', q.term)){current} "
            "GROUP BY q.i",
            user_id,
            terms,
            f"u{int(user_id)}",
        )
        total = next(int(r["n"]) for r in rows if r["i"] == 0)
        postings = [list(r["ids"]) for r in rows if r["i"] != 0 and r["ids"]]
        return first_stage(total, postings, excluded, limit)
