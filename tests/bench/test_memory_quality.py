"""The memory-quality benchmark's code, on the project's own small evaluation set (tests/bench/memory_eval_mini)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench import memory_eval_cases
from bench.memory_eval_cases import ENV_VAR, load_cases
from bench.memory_quality import (
    RECIPE_HEADER,
    against_call_start,
    bm25_block,
    bm25_scores,
    main,
    recent_fit_block,
    recipe_block,
    report,
    run,
    targets,
)
from bot.llm.client import LLMClient
from bot.memory.tokens import message_tokens
from standins.llm_server import FakeLLM

MINI = Path(__file__).resolve().parent / "memory_eval_mini"
CASES = load_cases(MINI)


def messages(n: int) -> list[dict[str, str]]:
    return [{"role": "user" if i % 2 else "assistant", "content": f"message {i} " + "x" * 40} for i in range(n)]


def test_recipe_baseline_is_the_last_twenty_messages_as_role_lines() -> None:
    block, capped = recipe_block(messages(30), 1500)
    lines = block.splitlines()
    assert lines[0] == RECIPE_HEADER
    assert len(lines) == 21 and not capped
    assert lines[1].startswith("- assistant: message 10 ") and lines[-1].startswith("- user: message 29 ")


def test_baselines_respect_the_budget() -> None:
    block, capped = recipe_block(messages(30), 200)
    assert capped and message_tokens(block) <= 200
    assert block.splitlines()[-1].startswith("- user: message 29 ")
    recent = recent_fit_block(messages(300), 500)
    assert 0.95 * 500 <= message_tokens(recent) <= 500
    assert recent.splitlines()[-1].startswith("- user: message 299 ")
    assert len(recent.splitlines()) > 20


def test_plain_bm25_prefers_rare_matching_words_and_keeps_conversation_order() -> None:
    lines = [
        {"role": "user", "content": "the the the the"},
        {"role": "assistant", "content": "your parcel number is PX-7"},
        {"role": "user", "content": "the weather is nice"},
        {"role": "user", "content": "where is my parcel"},
    ]
    scores = bm25_scores("where is the parcel", [m["content"] for m in lines])
    assert scores[3] == max(scores) and scores[1] > 0
    only_parcel = bm25_scores("parcel", [m["content"] for m in lines])
    assert only_parcel[0] == only_parcel[2] == 0.0 and only_parcel[1] > 0 and only_parcel[3] > 0
    tight = bm25_block(lines, "where is the parcel", message_tokens("- user: where is my parcel") + 1)
    assert tight == "- user: where is my parcel"
    roomy = bm25_block(lines, "parcel", 200)
    assert roomy.splitlines() == ["- assistant: your parcel number is PX-7", "- user: where is my parcel"]


async def test_run_on_the_small_set_measures_every_column_at_every_budget() -> None:
    results = await run(CASES, budgets=(150, 1500))
    assert [(r.budget, r.case.test_id) for r in results] == [(b, c.test_id) for b in (150, 1500) for c in CASES]
    for r in results:
        for m in r.measures.values():
            assert 0.0 <= m.recall <= 1.0
            assert 0 < m.tokens <= r.budget
        assert r.facts_stored == 0
    roomy = [r for r in results if r.budget == 1500]
    # The whole small set fits 1,500 tokens: every builder that reads all lines finds every fact.
    assert all(r.measures[c].recall == 1.0 for r in roomy for c in ("call_start", "query_aware", "recent_fit"))
    tight = [r for r in results if r.budget == 150]
    # At 150 tokens no case fits whole, so every builder is filled close to the budget (lines are ~20 tokens).
    assert all(r.measures[c].tokens >= 0.85 * 150 for r in tight for c in ("call_start", "query_aware"))
    text = report(results, extraction=False)
    assert re.search(r"^ +150 layer1 +2 \|", text, re.MULTILINE)
    assert re.search(r"^ +1500 layer2 +2 \|", text, re.MULTILINE)
    assert "targets at 1500 tokens, layer 2:" in text
    assert [t[0] for t in targets(results)] == ["query-aware - bm25-all", "query-aware", "call-start - recent-fit"]
    assert "gold facts shipped (4)" in text
    gaps = dict(against_call_start(results))
    assert list(gaps) == [150, 1500] and list(gaps[1500]) == ["layer1", "layer2", "all"]
    assert gaps[1500] == {"layer1": 0.0, "layer2": 0.0, "all": 0.0}, "both find every fact at 1,500"
    assert re.search(r"^ +1500  layer1 \+0\.000  layer2 \+0\.000  all \+0\.000  \(met\)$", text, re.MULTILINE)


def remember_user_lines_with_numbers(body: dict) -> str:
    """A stand-in extractor: every user line that contains a digit becomes a fact quoting it."""
    prompt = body["messages"][-1]["content"]
    lines = [line[len("USER: ") :] for line in prompt.splitlines() if line.startswith("USER: ")]
    facts = [{"text": f"The user said: {line}", "evidence": line} for line in lines if any(c.isdigit() for c in line)]
    return json.dumps({"summary": "A service call.", "facts": facts[:10]})


async def test_extraction_on_runs_the_post_call_processor(fake_llm: FakeLLM) -> None:
    fake_llm.set_responder(remember_user_lines_with_numbers)
    two = CASES[:1] + CASES[-1:]
    async with LLMClient(base_url=fake_llm.base_url, model="fake-model", max_retries=0) as llm:
        results = await run(two, budgets=(1500,), llm=llm)
    sessions = sum(len(c.sessions) for c in two)
    assert len(fake_llm.requests) == sessions
    assert all(r.facts_stored > 0 for r in results)
    assert all("<memory>" not in json.dumps(request) for request in fake_llm.requests)
    assert "extraction on" in report(results, extraction=True)


def test_command_line_reads_cases_from_the_folder_given(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--cases", str(MINI), "--limit", "2", "--budgets", "800", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert f"cases: {MINI} (from --cases)" in out
    assert "2 cases, budgets 800 tokens (o200k), extraction off" in out
    assert CASES[0].test_id in out


def test_command_line_reads_the_environment_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_VAR, str(MINI))
    assert main(["--limit", "1", "--budgets", "500"]) == 0
    assert f"cases: {MINI} (from ${ENV_VAR})" in capsys.readouterr().out


def test_command_line_says_where_it_looked_when_the_cases_are_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "from-env"))
    assert main(["--cases", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert f"not found at {tmp_path / 'nowhere'} (from --cases)" in err and ENV_VAR in err
    assert main([]) == 2
    assert f"not found at {tmp_path / 'from-env'} (from ${ENV_VAR})" in capsys.readouterr().err
    monkeypatch.delenv(ENV_VAR)
    monkeypatch.setattr(memory_eval_cases, "DEFAULT_ROOT", tmp_path / "beside")
    assert main([]) == 2
    assert f"not found at {tmp_path / 'beside'} (from the default beside the repository)" in capsys.readouterr().err


def test_the_default_folder_is_the_shared_one_beside_the_repository() -> None:
    repository = Path(__file__).resolve().parents[2]
    assert repository.parent / "shared" / "benchmarks" / "memory-eval" == memory_eval_cases.DEFAULT_ROOT
