"""The memory-eval loader, on the project's own small evaluation set and on cases made up in a temporary folder."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from bench.memory_eval_cases import ENV_VAR, SHIPPED_FACT_FIXES, audit, fact_present, load_cases

MINI = Path(__file__).resolve().parent / "memory_eval_mini"
CASES = load_cases(MINI)


def test_the_small_set_loads_in_layer_order_with_its_own_gold() -> None:
    assert [c.test_id for c in CASES] == [
        "mini_layer1_01_library_card",
        "mini_layer1_02_bike_repair",
        "mini_layer2_01_two_dogs",
        "mini_layer2_02_phone_plans",
    ]
    assert Counter(case.layer for case in CASES) == {"layer1": 2, "layer2": 2}
    assert {case.gold_source for case in CASES} == {"shipped"}
    dogs = CASES[2]
    assert len(dogs.sessions) == 2 and dogs.sessions[1].timestamp == datetime(2025, 1, 21, 14, 0)
    assert dogs.sessions[0].messages[0] == {"role": "user", "content": "I'd like to book check-ups for my two dogs."}
    assert dogs.required_facts == ["Biscuit", "Pepper", "Dr. Alvarez", "salmon"]
    assert audit(CASES) == []


@pytest.mark.parametrize("case", CASES, ids=[c.test_id for c in CASES])
def test_case_shape(case) -> None:
    assert case.title and case.user_question
    timestamps = [session.timestamp for session in case.sessions]
    assert timestamps == sorted(timestamps)
    for session in case.sessions:
        for message in session.messages:
            assert message["role"] in {"user", "assistant"} and message["content"]


def write_case(root: Path, facts: list, text: str = "My code is ZX-81.", test_id: str = "tiny") -> None:
    (root / "layer1").mkdir(parents=True, exist_ok=True)
    (root / "layer1" / f"01_{test_id}.yaml").write_text(
        f"test_id: {test_id}\ncategory: layer1\ntitle: Tiny\nuser_question: What code?\n"
        "conversation_histories:\n- timestamp: '2024-01-02 03:04:05'\n  messages:\n"
        f"  - role: user\n    content: {text}\n",
        encoding="utf-8",
    )
    (root / "gold_facts.json").write_text(json.dumps({test_id: {"required_facts": facts}}))


def test_audit_names_gold_facts_missing_from_the_histories_and_stale_fixes(tmp_path: Path) -> None:
    write_case(tmp_path, ["ZX-81", ["ZX-82", "zx 82"]])
    [case] = load_cases(tmp_path)
    assert audit([case]) == [f"tiny: gold fact {['ZX-82', 'zx 82']!r} does not occur in its histories"]
    test_id, fixes = next(iter(SHIPPED_FACT_FIXES.items()))
    original = next(iter(fixes))
    write_case(
        tmp_path / "fixed", ["ZX-81", list(original)], text=f"My code is ZX-81, card {original[0]}.", test_id=test_id
    )
    [fixed] = load_cases(tmp_path / "fixed")
    assert audit([fixed]) == [f"{test_id}: SHIPPED_FACT_FIXES entry {original!r} is no longer needed"]


def test_fact_present() -> None:
    text = "Your claim number is CLM-2024-894327; the adjuster calls within 24-48 hours."
    assert fact_present("clm-2024-894327", text)
    assert fact_present(["24 to 48", "24-48"], text)
    assert not fact_present(["24 to 48", "two days"], text)
    assert not fact_present("CLM-2024-894328", text)
    assert not fact_present([], text)


def test_env_override_and_missing_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_case(tmp_path, ["ZX-81"])
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    [case] = load_cases()
    assert case.test_id == "tiny"
    assert case.gold_source == "shipped"
    assert case.sessions[0].timestamp == datetime(2024, 1, 2, 3, 4, 5)
    assert case.sessions[0].messages == [{"role": "user", "content": "My code is ZX-81."}]
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match=f"{tmp_path / 'nowhere'}.*{ENV_VAR}"):
        load_cases()


def test_a_case_without_gold_facts_is_refused(tmp_path: Path) -> None:
    write_case(tmp_path, ["ZX-81"])
    (tmp_path / "gold_facts.json").write_text("{}")
    with pytest.raises(ValueError, match="no gold facts for 'tiny'"):
        load_cases(tmp_path)
