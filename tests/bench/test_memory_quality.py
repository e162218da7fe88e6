"""A quick run of the memory-quality benchmark on two cases, and its baselines."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator

import pytest

from bench.memory_eval_cases import load_cases
from bench.memory_quality import (
    RECIPE_HEADER,
    main,
    recent_fit_block,
    recipe_block,
    report,
    run,
)
from bot.llm.client import LLMClient
from bot.memory.tokens import estimate_message_tokens
from tests.fakes.llm_server import FakeLLM, running_fake_llm

CASES = load_cases()
TWO = [next(c for c in CASES if c.layer == "layer1"), next(c for c in CASES if c.layer == "layer2")]


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
    assert capped and estimate_message_tokens(block) <= 200
    assert block.splitlines()[-1].startswith("- user: message 29 ")
    recent = recent_fit_block(messages(300), 500)
    assert estimate_message_tokens(recent) <= 500
    assert recent.splitlines()[-1].startswith("- user: message 299 ")
    assert len(recent.splitlines()) > 20


async def test_quick_run_on_two_cases() -> None:
    results = await run(TWO, budget=1500)
    assert [r.case.test_id for r in results] == [c.test_id for c in TWO]
    for r in results:
        for m in (r.call_start, r.query_aware, r.recipe, r.recent_fit):
            assert 0.0 <= m.recall <= 1.0
            assert 0 < m.tokens <= 1500
        assert r.facts_stored == 0
    text = report(results, budget=1500, extraction=False)
    assert re.search(r"^layer1 +1 \|", text, re.MULTILINE)
    assert re.search(r"^layer2 +1 \|", text, re.MULTILINE)
    assert "layer2 query-aware / recipe recall" in text
    assert "gold facts shipped" in text and "gold facts derived" in text


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeLLM]:
    async with running_fake_llm() as fake:
        yield fake


def remember_user_lines_with_numbers(body: dict) -> str:
    """A stand-in extractor: every user line that contains a digit becomes a fact quoting it."""
    prompt = body["messages"][-1]["content"]
    lines = [line[len("USER: ") :] for line in prompt.splitlines() if line.startswith("USER: ")]
    facts = [{"text": f"The user said: {line}", "evidence": line} for line in lines if any(c.isdigit() for c in line)]
    return json.dumps({"summary": "A service call.", "facts": facts[:10]})


async def test_extraction_on_runs_the_post_call_processor(fake_llm: FakeLLM) -> None:
    fake_llm.set_responder(remember_user_lines_with_numbers)
    async with LLMClient(base_url=fake_llm.base_url, model="fake-model", max_retries=0) as llm:
        results = await run(TWO, budget=1500, llm=llm)
    sessions = sum(len(c.sessions) for c in TWO)
    assert len(fake_llm.requests) == sessions
    assert all(r.facts_stored > 0 for r in results)
    assert all("<memory>" not in json.dumps(request) for request in fake_llm.requests)
    assert "extraction on" in report(results, budget=1500, extraction=True)


def test_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--cases", "2", "--budget", "800", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "2 cases, budget 800 tokens, extraction off" in out
    assert TWO[0].test_id in out
