"""bench/locomo.py on a conversation of our own in LoCoMo's shape (the real data is never copied here): it imports
the sessions through `import-history`, builds each block through `context`'s path, and scores evidence lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.locomo import Conversation, Question, evidence_found, load, main


def conversation_file(folder: Path) -> Path:
    filler = [f"We talked about the {word} for a while." for word in ("weather", "traffic", "news", "lunch")] * 6
    sessions: dict[str, object] = {"speaker_a": "Robin", "speaker_b": "Sam"}
    lines = []
    for n in range(1, 4):
        turns = [
            {"speaker": "Robin" if i % 2 == 0 else "Sam", "dia_id": f"D{n}:{i + 1}", "text": f"Hey Robin! {text}"}
            for i, text in enumerate(filler)
        ]
        sessions[f"session_{n}"] = turns
        sessions[f"session_{n}_date_time"] = f"1:56 pm on {n} May, 2023"
        lines += turns
    sessions["session_2"][5]["text"] = "I repainted my old sailing boat a deep sea green last weekend."  # type: ignore[index]
    sessions["qa"] = [
        {"question": "What colour did Robin paint the boat?", "answer": "green", "evidence": ["D2:6"], "category": 4},
        {"question": "Adversarial?", "answer": "", "evidence": ["D1:1"], "category": 5},
    ]
    path = folder / "1.json"
    path.write_text(json.dumps(sessions))
    return path


def test_evidence_counts_only_whole_lines_in_order_whatever_the_punctuation(tmp_path: Path) -> None:
    convo = Conversation("x", [], {"D1:1": ("Robin", "It's a deep-sea green!")}, [])
    question = Question("?", 4, ("D1:1",))
    assert evidence_found('- them: "It\'s a deep sea green"', question, convo) == (1, 1)
    assert evidence_found('- them: "a deep sea green"', question, convo) == (0, 1), "cut short"
    assert evidence_found("green deep sea a it s", question, convo) == (0, 1), "out of order"


def test_a_line_said_over_two_lines_counts_as_the_block_quotes_it() -> None:
    """The block quotes each line as a JSON string: a line break in it is the two characters \\n, not a word."""
    convo = Conversation("x", [], {"D1:1": ("Evan", "\nThis is a painting I finished.\nIt shows C:\\new")}, [])
    question = Question("?", 4, ("D1:1",))
    quoted = "- them: " + json.dumps(convo.lines["D1:1"][1])
    assert "\\nThis" in quoted
    assert evidence_found(quoted, question, convo) == (1, 1)


def test_a_run_imports_the_sessions_and_prints_every_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    conversation_file(data)
    assert [q.category for q in load(data / "1.json").questions] == [4], "categories 1-4 only"
    assert main(["--data", str(data), "--budgets", "300"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.strip().startswith("budget"))
    assert header.split()[2:] == ["bm25", "call-start", "query-aware", "small-talk"]
    row = next(line for line in out.splitlines() if line.strip().startswith("300 all"))
    assert row.split()[4] == "1.000", "the boat line is found for the question that names Robin"
