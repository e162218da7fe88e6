"""Full-text ranking over PostgreSQL's tsvector columns: the first stage of BM25 from the member's own rows."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager

from bot.store.pg_sealed import HASHED_SEARCH_CONFIG, PLAIN_SEARCH_CONFIG, reseal_texts
from bot.store.postgres.base import PostgresBase
from bot.store.postgres.fences import PostgresTx
from bot.store.ranking import IN_LANGUAGE, first_stage, term_postings
from bot.store.shared import Tx
from bot.store.terms import query_lookups


class PostgresFullText(PostgresBase):
    """The BM25 first stage shared by turns and facts (scored as on SQLite: bot.store.ranking)."""

    @asynccontextmanager
    async def _shared_transaction(self) -> AsyncIterator[Tx]:
        async with self._tx() as db:
            yield PostgresTx(db)

    _search_config = PLAIN_SEARCH_CONFIG

    def search_hashed_terms(self) -> None:
        """Queries carry keyed hashes of stemmed terms (member encryption): match them unstemmed."""
        self._search_config = HASHED_SEARCH_CONFIG

    async def reseal_texts(self, reseal: Callable[[int, str, str], Awaitable[str | None]]) -> int:
        """Encrypts an existing database in place (bot.keys.encrypted); see bot.store.pg_sealed."""
        return await reseal_texts(self.pool, reseal)

    async def _first_stage(
        self,
        table: str,
        key: str,
        user_id: int,
        query: str,
        limit: int,
        excluded: Sequence[int],
        *,
        language_terms: bool = False,
    ) -> dict[int, float]:
        """One round trip: the member's row count and, per query term, the member's rows holding it; with
        ``language_terms`` (rows that have them, migration 17) also those holding one of its stems in another
        language (``bot.store.terms``)."""
        hashed = self._search_config == HASHED_SEARCH_CONFIG
        terms = query_lookups(query, hashed=hashed)
        if not terms:
            return {}
        current = " AND t.superseded_by IS NULL AND t.invalidated_at IS NULL" if table == "facts" else ""
        owner = "to_tsquery('simple', $3)"
        sql = (
            f"SELECT 0 AS i, NULL::bigint[] AS ids, (SELECT COUNT(*) FROM {table} WHERE user_id = $1) AS n "
            f"UNION ALL SELECT q.i, array_agg(t.{key}), 0 FROM unnest($2::text[]) WITH ORDINALITY AS q(term, i) "
            f"JOIN {table} t ON t.search @@ ({owner} && phraseto_tsquery($4::regconfig, q.term)){current} "
            "GROUP BY q.i"
        )
        params: list[object] = [user_id, [term for term, _ in terms], f"u{int(user_id)}", self._search_config]
        either = [" | ".join(stems) for _, stems in terms]
        if language_terms and any(either):
            sql += (
                f" UNION ALL SELECT q.i + {IN_LANGUAGE}, array_agg(t.{key}), 0 "
                f"FROM unnest($5::text[]) WITH ORDINALITY AS q(stems, i) JOIN {table} t "
                "ON t.language_terms IS NOT NULL AND (to_tsvector('simple', t.language_terms) "
                "|| to_tsvector('simple', 'u' || t.user_id::text)) "
                f"@@ ({owner} && to_tsquery('simple', q.stems)) WHERE q.stems <> '' GROUP BY q.i"
            )
            params.append(either)
        rows = await self._all(sql, *params)
        total = next(int(r["n"]) for r in rows if r["i"] == 0)
        postings = term_postings((r["i"], r["ids"]) for r in rows if r["i"] != 0 and r["ids"])
        return first_stage(total, postings, excluded, limit)
