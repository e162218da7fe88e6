"""Member-scoped Okapi BM25, shared by both backends so a search ranks the same on SQLite and PostgreSQL.

Each backend finds, for every query term (``bot.store.terms.search_words``), the member's rows holding it (stemmed
by its index) and the member's row count; `first_stage` sums the terms' IDF per row (term frequency taken as 1:
lines are short) and keeps the best `RERANK_DEPTH * limit`; the backend reads those rows with their length, and
`rerank` applies BM25's length normalisation."""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

BM25_K1 = 1.2
BM25_B = 0.75
RERANK_DEPTH = 2

Row = TypeVar("Row")


IN_LANGUAGE = 1000
"""Added to a query term's number for the rows a backend finds by the term's stems in other languages (a query has
at most ``bot.store.terms.MAX_QUERY_TERMS`` terms)."""


def term_postings(found: Iterable[tuple[int, Sequence[int]]]) -> list[Sequence[int]]:
    """Each query term's rows from a backend's (term number, rows) answers, those found in another language
    (numbered from ``IN_LANGUAGE``) merged into the term's: a row counts once per term."""
    holding: dict[int, Sequence[int]] = {}
    for number, rows in found:
        term = number % IN_LANGUAGE
        holding[term] = list({*holding[term], *rows}) if term in holding else rows
    return list(holding.values())


def idf(total: int, frequency: int) -> float:
    """BM25's inverse document frequency (the variant that stays positive)."""
    return math.log(1 + (total - frequency + 0.5) / (frequency + 0.5))


def first_stage(total: int, postings: Iterable[Sequence[int]], excluded: Iterable[int], limit: int) -> dict[int, float]:
    """Row id -> summed IDF of the query terms it holds, for the best `RERANK_DEPTH * limit` rows."""
    score: dict[int, float] = {}
    get = score.get
    for rowids in postings:
        weight = idf(total, len(rowids))
        for rowid in rowids:
            score[rowid] = get(rowid, 0.0) + weight
    for rowid in excluded:
        score.pop(rowid, None)
    best = heapq.nlargest(RERANK_DEPTH * limit, score, key=score.__getitem__)
    return {rowid: score[rowid] for rowid in best}


def rerank(first: dict[int, float], rows: Sequence[tuple[int, int, Row]], limit: int) -> list[tuple[Row, float]]:
    """`rows` are (row id, length in tokens, row) of the first stage's rows; the best `limit` with their score."""
    if not rows:
        return []
    average = sum(length for _, length, _ in rows) / len(rows) or 1.0
    scored = []
    for rowid, length, row in rows:
        norm = 1 - BM25_B + BM25_B * length / average
        scored.append((first[rowid] * (BM25_K1 + 1) / (1 + BM25_K1 * norm), rowid, row))
    scored.sort(key=lambda s: (-s[0], -s[1]))
    return [(row, value) for value, _, row in scored[:limit]]


def rank_arrays(
    postings: Sequence[NDArray[np.int32]], lengths: NDArray[np.float64], limit: int
) -> list[tuple[int, float]]:
    """`first_stage` then `rerank` over rows held in memory (``bot.memory.index``), in numpy: ``postings`` are the
    row numbers holding each query term, ``lengths`` every row's length in tokens (the row count is its size).
    (row number, score) of the best ``limit``, best first; later rows first among equals, as in `rerank`."""
    total = len(lengths)
    found = [rows for rows in postings if len(rows)]
    if not found or not total:
        return []
    scores = np.zeros(total)
    for rows in found:
        scores[rows] += idf(total, len(rows))  # a term's rows are distinct: no repeated index
    hit = np.flatnonzero(scores)
    depth = RERANK_DEPTH * limit
    if len(hit) > depth:
        hit = _best(hit, scores[hit], depth)
    first, length = scores[hit], lengths[hit]
    norm = 1 - BM25_B + BM25_B * length / (float(length.mean()) or 1.0)
    final = first * (BM25_K1 + 1) / (1 + BM25_K1 * norm)
    best = np.lexsort((-hit, -final))[:limit]
    return [(int(hit[i]), float(final[i])) for i in best]


def _best(rows: NDArray[np.intp], scores: NDArray[np.float64], depth: int) -> NDArray[np.intp]:
    """The ``depth`` best of ``rows`` (ascending) by score, earlier rows first among equals (the first stage's
    cut), in no particular order: a partition around the ``depth``-th best score, not a sort of every hit (a
    query of common words hits most of a member's lines)."""
    cut = len(scores) - depth
    kth = np.partition(scores, cut)[cut]
    above = rows[scores > kth]
    tied = rows[scores == kth][: depth - len(above)]
    return np.concatenate((above, tied))
