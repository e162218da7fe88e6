"""BM25 over rows held in memory (numpy) ranks exactly as the backends' two stages do."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from bot.store.ranking import first_stage, rank_arrays, rerank


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
