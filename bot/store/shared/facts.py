"""The facts' reads and writes that are the same on both backends (the ranking is each backend's own)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from bot.store.columns import FACT_COLUMNS, fact_record
from bot.store.models import (
    Conversation,
    FactRecord,
)
from bot.store.shared.base import (
    SqlBase,
)


class SharedFacts(SqlBase):
    """The facts' reads that are the same query on both backends (the ranking is each backend's own)."""

    if TYPE_CHECKING:  # each backend ranks with its own full-text index

        async def rank_facts(self, user_id: int, query: str, limit: int) -> list[tuple[FactRecord, float]]: ...

    async def get_fact(self, fact_id: int) -> FactRecord | None:
        row = await self._row(f"SELECT {FACT_COLUMNS} FROM facts WHERE fact_id = $1", fact_id)
        return None if row is None else fact_record(row)

    async def list_facts(
        self,
        user_id: int,
        *,
        include_superseded: bool = False,
        superseded_only: bool = False,
        offset: int = 0,
        limit: int = 100,
    ) -> list[FactRecord]:
        order = "confirmed_at DESC, mentions DESC, fact_id DESC"
        if superseded_only:
            where = "AND (superseded_by IS NOT NULL OR invalidated_at IS NOT NULL)"
        elif include_superseded:
            where = ""
            order = "(superseded_by IS NOT NULL OR invalidated_at IS NOT NULL), " + order  # current ones first
        else:  # a walk of the `facts_current` index, in its order
            where = "AND superseded_by IS NULL AND invalidated_at IS NULL"
        rows = await self._rows(
            f"SELECT {FACT_COLUMNS} FROM facts WHERE user_id = $1 {where} ORDER BY {order} LIMIT $2 OFFSET $3",
            user_id,
            limit,
            offset,
        )
        return [fact_record(r) for r in rows]

    async def count_facts(self, user_id: int, *, include_superseded: bool = False) -> int:
        where = "" if include_superseded else "AND superseded_by IS NULL AND invalidated_at IS NULL"
        return int(await self._value(f"SELECT COUNT(*) FROM facts WHERE user_id = $1 {where}", user_id))

    async def search_facts(self, user_id: int, query: str, limit: int) -> list[FactRecord]:
        return [fact for fact, _ in await self.rank_facts(user_id, query, limit)]

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
        async with self._shared_transaction() as tx:
            if not await tx.write_allowed(user_id, generation, convo):
                return None
            source, value = ("", "") if convo is None else (f", source_{convo.column}", ", $4")
            new_id = int(
                await tx.value(
                    f"INSERT INTO facts (user_id, text, created_at, updated_at, confirmed_at, told{source}) "
                    f"VALUES ($1, $2, $3, $3, $3, TRUE{value}) RETURNING fact_id",
                    user_id,
                    text,
                    at,
                    *(() if convo is None else (convo.ref_id,)),
                )
            )
            if convo is not None:
                await tx.changed(
                    f"INSERT INTO fact_sources (fact_id, {convo.column}) VALUES ($1, $2)", new_id, convo.ref_id
                )
            for old_id in dict.fromkeys(supersedes):
                await tx.changed(
                    "UPDATE facts SET superseded_by = $2, invalidated_at = $3, updated_at = $3 WHERE fact_id = $1 "
                    "AND fact_id != $2 AND user_id = $4 AND superseded_by IS NULL AND invalidated_at IS NULL",
                    old_id,
                    new_id,
                    at,
                    user_id,
                )
            return new_id

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
        current = "user_id = $3 AND superseded_by IS NULL AND invalidated_at IS NULL"
        async with self._shared_transaction() as tx:
            finished = await tx.changed(
                "UPDATE jobs SET state = 'done', updated_at = $1 WHERE job_id = $2 AND state = 'running' "
                "AND attempts = $3",
                at,
                job_id,
                attempt,
            )
            if finished != 1:
                return None
            if not await tx.write_allowed(user_id, generation, convo):
                return 0
            for fact_id in dict.fromkeys(confirmed):
                mentioned = await tx.changed(
                    f"UPDATE facts SET mentions = mentions + 1, confirmed_at = {self.greatest}(confirmed_at, $2), "
                    f"updated_at = $2 WHERE fact_id = $1 AND {current}",
                    fact_id,
                    at,
                    user_id,
                )
                if mentioned == 1:
                    await tx.changed(
                        f"INSERT INTO fact_sources (fact_id, {column}) SELECT $1, $2 WHERE NOT EXISTS "
                        f"(SELECT 1 FROM fact_sources WHERE fact_id = $1 AND {column} = $2)",
                        fact_id,
                        ref,
                    )
            for text, replaces in new_facts:
                new_id = int(
                    await tx.value(
                        f"INSERT INTO facts (user_id, text, source_{column}, created_at, updated_at, confirmed_at) "
                        "VALUES ($1, $2, $3, $4, $4, $4) RETURNING fact_id",
                        user_id,
                        text,
                        ref,
                        at,
                    )
                )
                await tx.changed(f"INSERT INTO fact_sources (fact_id, {column}) VALUES ($1, $2)", new_id, ref)
                for old_id in dict.fromkeys(replaces):
                    await tx.changed(
                        "UPDATE facts SET superseded_by = $2, invalidated_at = $4, updated_at = $4 "
                        f"WHERE fact_id = $1 AND fact_id != $2 AND {current} AND NOT told",
                        old_id,
                        new_id,
                        user_id,
                        at,
                    )
            if summary is not None:
                await tx.changed(f"UPDATE {convo.table} SET summary = $2 WHERE {column} = $1", ref, summary)
            return int(await tx.value(f"SELECT COUNT(DISTINCT fact_id) FROM fact_sources WHERE {column} = $1", ref))
