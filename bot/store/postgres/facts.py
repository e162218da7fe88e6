"""Facts and the post-call extraction results (`FactStore`) on PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence

from bot.store.columns import FACT_COLUMNS as _FACT_COLUMNS
from bot.store.models import (
    Conversation,
    FactRecord,
)
from bot.store.postgres.base import _count, _fact, _prefixed
from bot.store.postgres.fences import memory_write_allowed
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

    async def add_told_fact(
        self,
        user_id: int,
        text: str,
        at: float,
        *,
        convo: Conversation | None = None,
        supersedes: Sequence[int] = (),
        generation: int | None = None,
    ) -> int | None:
        async with self._tx() as db:
            if not await memory_write_allowed(db, user_id, generation, convo):
                return None
            source = "" if convo is None else f", source_{convo.column}"
            new_id = await db.fetchval(
                f"INSERT INTO facts (user_id, text, created_at, updated_at, confirmed_at, told{source}) "
                f"VALUES ($1, $2, $3, $3, $3, TRUE{'' if convo is None else ', $4'}) RETURNING fact_id",
                user_id,
                text,
                at,
                *(() if convo is None else (convo.ref_id,)),
            )
            if convo is not None:
                await db.execute(
                    f"INSERT INTO fact_sources (fact_id, {convo.column}) VALUES ($1, $2)", new_id, convo.ref_id
                )
            for old_id in dict.fromkeys(supersedes):
                await db.execute(
                    "UPDATE facts SET superseded_by = $2, invalidated_at = $3, updated_at = $3 WHERE fact_id = $1 "
                    "AND fact_id != $2 AND user_id = $4 AND superseded_by IS NULL AND invalidated_at IS NULL",
                    old_id,
                    new_id,
                    at,
                    user_id,
                )
            return int(new_id)

    async def apply_extraction(
        self,
        job_id: int,
        attempt: int,
        user_id: int,
        at: float,
        convo: Conversation,
        *,
        new_facts: Sequence[tuple[str, Sequence[int]]] = (),
        confirmed: Sequence[int] = (),
        summary: str | None = None,
        generation: int | None = None,
    ) -> int | None:
        column, ref = convo.column, convo.ref_id
        table = convo.table
        current = "user_id = $3 AND superseded_by IS NULL AND invalidated_at IS NULL"
        async with self._tx() as db:
            status = await db.execute(
                "UPDATE jobs SET state = 'done', updated_at = $1 WHERE job_id = $2 AND state = 'running' "
                "AND attempts = $3",
                at,
                job_id,
                attempt,
            )
            if _count(status) != 1:
                return None
            if not await memory_write_allowed(db, user_id, generation, convo):
                return 0
            for fact_id in dict.fromkeys(confirmed):
                status = await db.execute(
                    "UPDATE facts SET mentions = mentions + 1, confirmed_at = GREATEST(confirmed_at, $2), "
                    f"updated_at = $2 WHERE fact_id = $1 AND {current}",
                    fact_id,
                    at,
                    user_id,
                )
                if _count(status) == 1:
                    await db.execute(
                        f"INSERT INTO fact_sources (fact_id, {column}) SELECT $1, $2 WHERE NOT EXISTS "
                        f"(SELECT 1 FROM fact_sources WHERE fact_id = $1 AND {column} = $2)",
                        fact_id,
                        ref,
                    )
            for text, replaces in new_facts:
                new_id = await db.fetchval(
                    f"INSERT INTO facts (user_id, text, source_{column}, created_at, updated_at, confirmed_at) "
                    "VALUES ($1, $2, $3, $4, $4, $4) RETURNING fact_id",
                    user_id,
                    text,
                    ref,
                    at,
                )
                await db.execute(f"INSERT INTO fact_sources (fact_id, {column}) VALUES ($1, $2)", new_id, ref)
                for old_id in dict.fromkeys(replaces):
                    await db.execute(
                        "UPDATE facts SET superseded_by = $2, invalidated_at = $4, updated_at = $4 "
                        f"WHERE fact_id = $1 AND fact_id != $2 AND {current} AND NOT told",
                        old_id,
                        new_id,
                        user_id,
                        at,
                    )
            if summary is not None:
                await db.execute(f"UPDATE {table} SET summary = $2 WHERE {column} = $1", ref, summary)
            return int(await db.fetchval(f"SELECT COUNT(DISTINCT fact_id) FROM fact_sources WHERE {column} = $1", ref))
