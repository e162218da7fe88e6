"""The hard cases of the memory-quality benchmark (bench/memory_hard_cases.py): built as described, and scored."""

from __future__ import annotations

from pathlib import Path

from bench.memory_hard_cases import SESSIONS, hard_cases
from bench.memory_quality import HARD_COLUMNS, evaluate_hard, evidence_recall, hard_report
from bot.memory.embedded import EmbeddedEmbedder


def test_each_case_hides_its_evidence_in_an_early_call_of_a_long_history() -> None:
    cases = hard_cases()
    assert {case.kind for case in cases} == {"paraphrase", "distractor", "multi-hop", "temporal"}
    assert hard_cases() == cases, "seeded: the same cases every run"
    for case in cases:
        said = [[m["content"] for m in messages] for _, messages in case.sessions]
        assert len(said) == SESSIONS and sum(map(len, said)) > 700
        for line in case.evidence:
            assert line in said[1], f"{case.case_id}: evidence in the second call"
        times = [at for at, _ in case.sessions]
        assert times == sorted(times)


async def test_a_paraphrase_is_found_by_meaning_and_not_by_words(tmp_path: Path) -> None:
    (job,) = [case for case in hard_cases() if case.case_id == "job"]
    scores = await evaluate_hard(job, tmp_path, 1500, EmbeddedEmbedder())
    assert set(scores) == set(HARD_COLUMNS)
    assert scores["query_aware"] == 1.0 and scores["query_lexical"] == 0.0 and scores["recent_fit"] == 0.0
    assert evidence_recall(job, "x " + job.evidence[0].upper()) == 1.0
    assert "paraphrase       1 |" in hard_report([job], [scores], 1500)
