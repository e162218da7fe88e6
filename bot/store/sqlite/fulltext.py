"""Full-text ranking over SQLite's FTS5 tables: safe queries and BM25 scored from the member's own rows."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiosqlite

from bot.store.ranking import IN_LANGUAGE, first_stage, rerank, term_postings
from bot.store.shared import Tx
from bot.store.sqlite.base import SqliteBase
from bot.store.sqlite.fences import SqliteTx
from bot.store.terms import query_lookups


def _varint(blob: bytes) -> int:
    """The first SQLite varint of ``blob`` (an FTS5 docsize record starts with the first column's size)."""
    value = 0
    for i, byte in enumerate(blob[:9]):
        if i == 8:
            return (value << 8) | byte
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value
    return value


class SqliteFullText(SqliteBase):
    """BM25 ranking over one member's rows of an FTS5 table, shared by turns and facts."""

    @asynccontextmanager
    async def _shared_transaction(self) -> AsyncIterator[Tx]:
        async with self._tx() as db:
            yield SqliteTx(db)

    _hashed_terms = False

    def search_hashed_terms(self) -> None:
        """Queries carry keyed hashes of stemmed terms (member encryption, ``bot.store.terms.query_lookups``):
        FTS5's tokenizer treats the stored hashes and the queried ones alike, so they still match."""
        self._hashed_terms = True

    async def _bm25(
        self,
        table: str,
        column: str,
        user_id: int,
        query: str,
        limit: int,
        *,
        records: str,
        excluded: tuple[str, Any] | None = None,
        language_table: str | None = None,
    ) -> list[tuple[aiosqlite.Row, float]]:
        """Okapi BM25 of ``query`` over one member's rows of an FTS5 table, best ``limit`` first, in two round
        trips to SQLite.

        FTS5's own bm25() counts each term's documents over the whole table (every member's lines) on every
        query, which costs tens of milliseconds on a large database; here the counts come from the member's own
        rows: one indexed lookup per query term (stemmed by the table's tokenizer) gives the rows holding it,
        as one comma-separated list per term (far cheaper than a result row per posting); ``excluded`` ("table
        WHERE ...", parameter) names rowids to leave out. Term frequency is taken as 1 (lines are short). Rows
        are first ordered by the sum of their terms' IDF; the best ``RERANK_DEPTH * limit`` are then read with
        ``records`` (a SELECT over json_each(?) of rowids whose last column is the FTS docsize record), scored
        with the length normalisation, and the best ``limit`` returned with their score.

        With ``language_table`` (the FTS5 table of the rows' language terms, ``bot.store.terms``) a term's rows
        are also those holding one of its stems in another language."""
        terms = query_lookups(query, hashed=self._hashed_terms)
        if not terms:
            return []
        owner = f"owner_key:u{int(user_id)}"
        selects = [f"SELECT -1, COUNT(*) FROM {table} WHERE {table} MATCH ?"]
        params: list[Any] = [owner]
        for i, (term, stems) in enumerate(terms):
            selects.append(f"SELECT {i}, group_concat(rowid) FROM {table} WHERE {table} MATCH ?")
            params.append(f'{owner} AND {column}:"{term}"')
            if language_table is not None and stems:
                either = " OR ".join(f'"{stem}"' for stem in stems)
                in_language = f"group_concat(rowid) FROM {language_table} WHERE {language_table} MATCH ?"
                selects.append(f"SELECT {IN_LANGUAGE + i}, {in_language}")
                params.append(f"{owner} AND language_terms:({either})")
        if excluded is not None:
            selects.append(f"SELECT -2, group_concat(rowid) FROM {excluded[0]}")
            params.append(excluded[1])
        rows = await self._all(" UNION ALL ".join(selects), params)
        total = next(int(r[1]) for r in rows if r[0] == -1)
        postings = term_postings((r[0], list(map(int, r[1].split(",")))) for r in rows if r[0] >= 0 and r[1])
        excluded_ids = [rowid for r in rows if r[0] == -2 and r[1] for rowid in map(int, r[1].split(","))]
        first = first_stage(total, postings, excluded_ids, limit)
        if not first:
            return []
        found = await self._all(records, (json.dumps(list(first)),))
        return rerank(first, [(int(r[0]), _varint(r[-1]), r) for r in found], limit)
