"""Facts and the post-call extraction results (`FactStore`) on SQLite."""

from __future__ import annotations

from collections.abc import Sequence

from bot.store.columns import FACT_COLUMNS as _FACT_COLUMNS
from bot.store.models import (
    Conversation,
    FactRecord,
)
from bot.store.shared import SharedFacts
from bot.store.sqlite.base import _fact
from bot.store.sqlite.fences import memory_write_allowed
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
        column = None if convo is None else convo.column
        async with self._tx() as db:
            if not await memory_write_allowed(db, user_id, generation, convo):
                return None
            source = "" if column is None else f", source_{column}"
            cur = await db.execute(
                f"INSERT INTO facts (user_id, text, created_at, updated_at, confirmed_at, told{source}) "
                f"VALUES (?, ?, ?, ?, ?, 1{'' if convo is None else ', ?'})",
                (user_id, text, at, at, at, *(() if convo is None else (convo.ref_id,))),
            )
            new_id = int(cur.lastrowid or 0)
            if convo is not None:
                await db.execute(
                    f"INSERT INTO fact_sources (fact_id, {convo.column}) VALUES (?, ?)", (new_id, convo.ref_id)
                )
            for old_id in dict.fromkeys(supersedes):
                await db.execute(
                    "UPDATE facts SET superseded_by = ?, invalidated_at = ?, updated_at = ? WHERE fact_id = ? "
                    "AND fact_id != ? AND user_id = ? AND superseded_by IS NULL AND invalidated_at IS NULL",
                    (new_id, at, at, old_id, new_id, user_id),
                )
            return new_id

    # ---- post-call extraction results ------------------------------------------------------------------

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
        current = "user_id = ? AND superseded_by IS NULL AND invalidated_at IS NULL"
        async with self._tx() as db:
            cur = await db.execute(
                "UPDATE jobs SET state = 'done', updated_at = ? WHERE job_id = ? AND state = 'running' "
                "AND attempts = ?",
                (at, job_id, attempt),
            )
            if cur.rowcount != 1:
                return None
            if not await memory_write_allowed(db, user_id, generation, convo):
                return 0
            for fact_id in dict.fromkeys(confirmed):
                cur = await db.execute(
                    "UPDATE facts SET mentions = mentions + 1, confirmed_at = MAX(confirmed_at, ?), updated_at = ? "
                    f"WHERE fact_id = ? AND {current}",
                    (at, at, fact_id, user_id),
                )
                if cur.rowcount == 1:
                    await db.execute(
                        f"INSERT INTO fact_sources (fact_id, {column}) SELECT ?, ? WHERE NOT EXISTS "
                        f"(SELECT 1 FROM fact_sources WHERE fact_id = ? AND {column} = ?)",
                        (fact_id, ref, fact_id, ref),
                    )
            for text, replaces in new_facts:
                cur = await db.execute(
                    f"INSERT INTO facts (user_id, text, source_{column}, created_at, updated_at, confirmed_at) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (user_id, text, ref, at, at, at),
                )
                new_id = int(cur.lastrowid or 0)
                await db.execute(f"INSERT INTO fact_sources (fact_id, {column}) VALUES (?, ?)", (new_id, ref))
                for old_id in dict.fromkeys(replaces):
                    await db.execute(
                        f"UPDATE facts SET superseded_by = ?, invalidated_at = ?, updated_at = ? "
                        f"WHERE fact_id = ? AND fact_id != ? AND {current} AND told = 0",
                        (new_id, at, at, old_id, new_id, user_id),
                    )
            if summary is not None:
                await db.execute(f"UPDATE {table} SET summary = ? WHERE {column} = ?", (summary, ref))
            async with db.execute(
                f"SELECT COUNT(DISTINCT fact_id) FROM fact_sources WHERE {column} = ?", (ref,)
            ) as cur:
                row = await cur.fetchone()
            return int(row[0]) if row else 0
