"""BM25 over rows held in memory (numpy) ranks exactly as the backends' two stages do."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from bot.store.ranking import IN_LANGUAGE, first_stage, idf, rank_arrays, rerank, term_postings


@given(
    st.lists(st.integers(1, 40), min_size=1, max_size=60),
    st.lists(st.sets(st.integers(0, 59), max_size=30), max_size=6),
    st.integers(1, 80),
)
def test_in_memory_bm25_gives_the_two_stage_scores(lengths: list[int], terms: list[set[int]], limit: int) -> None:
    postings = [sorted(r for r in rows if r < len(lengths)) for rows in terms]
    expected_first = first_stage(len(lengths), postings, (), limit)
    expected = rerank(expected_first, [(row, lengths[row], row) for row in expected_first], limit)
    got = rank_arrays([np.array(p, dtype=np.int32) for p in postings], np.array(lengths, dtype=np.float64), limit)
    assert len(got) == len(expected)
    hits = set().union(*map(set, postings)) if postings else set()
    if len(hits) <= 2 * limit:  # no cut at the first stage: the same rows with the same scores
        assert sorted(got) == sorted(expected) or np.allclose(
            [score for _, score in sorted(got)], [score for _, score in sorted(expected)]
        )
        assert [row for row, _ in sorted(got)] == [row for row, _ in sorted(expected)]
    # Scores fall from best to worst either way.
    assert [score for _, score in got] == sorted((score for _, score in got), reverse=True)


@given(
    st.lists(st.integers(1, 5), min_size=1, max_size=300),
    st.lists(st.sets(st.integers(0, 299), min_size=1, max_size=200), min_size=1, max_size=4),
    st.integers(1, 20),
)
def test_the_first_stage_cut_keeps_the_best_scores_and_the_earliest_rows_among_equals(
    lengths: list[int], terms: list[set[int]], limit: int
) -> None:
    """When a query hits more rows than the first stage keeps (common words hit most of a member's lines), the
    rows kept are those with the best summed IDF, the earliest first among equal sums, as a sort would keep."""
    postings = [sorted(r for r in rows if r < len(lengths)) for rows in terms]
    total = len(lengths)
    summed: dict[int, float] = {}
    for rows in postings:
        if rows:
            weight = idf(total, len(rows))
            for row in rows:
                summed[row] = summed.get(row, 0.0) + weight
    kept = sorted(summed, key=lambda row: (-summed[row], row))[: 2 * limit]
    got = rank_arrays([np.array(p, dtype=np.int32) for p in postings], np.array(lengths, dtype=np.float64), limit)
    expected = rerank({row: summed[row] for row in kept}, [(row, lengths[row], row) for row in kept], limit)
    assert {row for row, _ in got} <= set(kept)
    assert np.allclose([score for _, score in got], [score for _, score in expected])


def test_among_rows_that_tie_at_the_cut_the_earliest_are_kept() -> None:
    """Ten rows of the same length hold the one query term: the first stage keeps the first four (2 x limit),
    and the final order puts the later of equals first, as the backends' `rerank` does."""
    got = rank_arrays([np.arange(10, dtype=np.int32)], np.full(10, 3.0), 2)
    assert [row for row, _ in got] == [3, 2]


def test_a_term_s_rows_found_in_another_language_count_once_with_its_own() -> None:
    found = [(0, [1, 2]), (1, [3]), (IN_LANGUAGE, [2, 5]), (IN_LANGUAGE + 2, [7])]
    assert sorted(sorted(rows) for rows in term_postings(found)) == [[1, 2, 5], [3], [7]]
