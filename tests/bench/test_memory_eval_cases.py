"""The memory-eval benchmark loader and its gold facts (shipped and hand-derived)."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from bench.memory_eval_cases import (
    DERIVED_GOLD_PATH,
    ENV_VAR,
    SHIPPED_FACT_FIXES,
    EvalCase,
    default_root,
    fact_present,
    load_cases,
)

CASES = load_cases()
CASE_IDS = [case.test_id for case in CASES]


def test_all_forty_cases_load() -> None:
    assert len(CASES) == 40
    assert len(set(CASE_IDS)) == 40
    assert Counter(case.layer for case in CASES) == {"layer1": 20, "layer2": 20}
    assert Counter(case.gold_source for case in CASES) == {"shipped": 6, "derived": 34}


def test_derived_gold_covers_exactly_the_cases_without_shipped_gold() -> None:
    derived = json.loads(DERIVED_GOLD_PATH.read_text(encoding="utf-8"))
    shipped = json.loads((default_root() / "gold_facts.json").read_text(encoding="utf-8"))
    assert "verbatim" in derived["_comment"]
    derived_ids = set(derived) - {"_comment"}
    shipped_ids = set(shipped) - {"_comment"}
    assert derived_ids.isdisjoint(shipped_ids)
    assert derived_ids | shipped_ids == set(CASE_IDS)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_case_shape(case: EvalCase) -> None:
    assert case.title and case.user_question
    assert len(case.sessions) >= (2 if case.layer == "layer2" else 1)
    timestamps = [session.timestamp for session in case.sessions]
    assert all(isinstance(ts, datetime) for ts in timestamps)
    assert timestamps == sorted(timestamps)
    for session in case.sessions:
        assert session.messages
        for message in session.messages:
            assert message["role"] in {"user", "assistant"}
            assert isinstance(message["content"], str) and message["content"]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_every_required_fact_occurs_in_the_histories(case: EvalCase) -> None:
    assert len(case.required_facts) >= 2
    if case.gold_source == "derived":
        assert len(case.required_facts) <= 5
    text = case.history_text
    missing = [fact for fact in case.required_facts if not fact_present(fact, text)]
    assert missing == []


def test_shipped_fact_fixes_are_still_needed_and_only_add_forms() -> None:
    shipped = json.loads((default_root() / "gold_facts.json").read_text(encoding="utf-8"))
    by_id = {case.test_id: case for case in CASES}
    for test_id, fixes in SHIPPED_FACT_FIXES.items():
        text = by_id[test_id].history_text
        for original, added in fixes.items():
            assert list(original) in shipped[test_id]["required_facts"]
            assert not fact_present(list(original), text), "fixed upstream: drop the entry"
            assert [*original, *added] in by_id[test_id].required_facts


def test_fact_present() -> None:
    text = "Your claim number is CLM-2024-894327; the adjuster calls within 24-48 hours."
    assert fact_present("clm-2024-894327", text)
    assert fact_present(["24 to 48", "24-48"], text)
    assert not fact_present(["24 to 48", "two days"], text)
    assert not fact_present("CLM-2024-894328", text)
    assert not fact_present([], text)


def test_env_override_and_missing_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "layer1").mkdir()
    (tmp_path / "layer1" / "01_tiny.yaml").write_text(
        "test_id: tiny\ncategory: layer1\ntitle: Tiny\nuser_question: What code?\n"
        "conversation_histories:\n- timestamp: '2024-01-02 03:04:05'\n  messages:\n"
        "  - role: user\n    content: My code is ZX-81.\n",
        encoding="utf-8",
    )
    (tmp_path / "gold_facts.json").write_text(json.dumps({"tiny": {"required_facts": ["ZX-81"]}}))
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    [case] = load_cases()
    assert case.test_id == "tiny"
    assert case.gold_source == "shipped"
    assert case.sessions[0].timestamp == datetime(2024, 1, 2, 3, 4, 5)
    assert case.sessions[0].messages == [{"role": "user", "content": "My code is ZX-81."}]
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match=ENV_VAR):
        load_cases()
