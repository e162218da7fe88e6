"""The extraction prompt, the reply's schema, and the rule that facts come only from the user's own lines."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from bot.memory.extraction import (
    MAX_FACTS,
    SUMMARY_MAX_CHARS,
    ExtractedFact,
    Extraction,
    ExtractionError,
    build_messages,
    grounded_facts,
    identifiers,
    normalise,
    parse_reply,
    rejection_reason,
    render_transcript,
)
from bot.store.models import FactRecord, TurnRecord

TUESDAY = datetime(2024, 3, 12, 14, 5, tzinfo=UTC).timestamp()


def turn(role: str, content: str, seq: int = 0) -> TurnRecord:
    return TurnRecord(
        turn_id=seq + 1,
        user_id=1,
        call_id="c",
        chat_id=None,
        seq=seq,
        role=role,  # type: ignore[arg-type]
        content=content,
        spoken_at=TUESDAY,
        source="voice",
    )


def fact_record(fact_id: int, text: str) -> FactRecord:
    return FactRecord(fact_id, 1, text, "c0", None, 1.0, 1.0, 1.0, 1)


def reply(summary: str = "Talked.", facts: list[dict] | None = None) -> str:
    return json.dumps({"summary": summary, "facts": facts or []})


# ---- the prompt ------------------------------------------------------------------------------------------


def test_prompt_has_date_weekday_roles_existing_facts_and_asks_for_json() -> None:
    turns = [turn("assistant", "Hi! How are you?", 0), turn("user", "I went to the dentist yesterday.", 1)]
    messages = build_messages(
        turns, [fact_record(7, "The user's dog is called Biscuit.")], started_at=TUESDAY, kind="call"
    )
    assert [m["role"] for m in messages] == ["system", "user"]
    system, user = messages[0]["content"], messages[1]["content"]
    assert "json" in system.lower()
    assert "Only the USER lines are a source" in system
    assert "Tuesday 2024-03-12" in user
    assert "voice call" in user
    assert "[7] The user's dog is called Biscuit." in user
    assert "NOT a source" in user
    assert "ASSISTANT: Hi! How are you?\nUSER: I went to the dentist yesterday." in user


def test_prompt_for_a_chat_without_existing_facts() -> None:
    messages = build_messages([turn("user", "hello")], [], started_at=TUESDAY, kind="chat")
    assert "text chat" in messages[1]["content"]
    assert "(none)" in messages[1]["content"]


def test_transcript_keeps_the_latest_lines_when_too_long() -> None:
    turns = [turn("user", f"line {n} " + "x" * 50, n) for n in range(100)]
    text = render_transcript(turns, max_chars=600)
    assert text.startswith("[earlier lines omitted]")
    assert text.endswith(turns[-1].content)
    assert "line 0 " not in text
    assert len(text) < 700


def test_multiline_turns_become_one_line() -> None:
    assert render_transcript([turn("user", "a\n\nb   c")]) == "USER: a b c"


# ---- the reply -------------------------------------------------------------------------------------------


def test_valid_reply_is_parsed() -> None:
    raw = reply(
        "The user talked about their dog.",
        [
            {
                "text": "The user's dog is called Biscuit.",
                "evidence": "my dog Biscuit",
                "replaces": [3],
                "duplicate_of": None,
            },
            {"text": "The user likes tea.", "evidence": "I like tea"},
        ],
    )
    result = parse_reply(raw)
    assert result == Extraction(
        "The user talked about their dog.",
        [
            ExtractedFact("The user's dog is called Biscuit.", "my dog Biscuit", (3,), None),
            ExtractedFact("The user likes tea.", "I like tea", (), None),
        ],
    )


def test_code_fence_is_removed_and_long_summary_is_cut() -> None:
    raw = "```json\n" + reply("word " * 200) + "\n```"
    result = parse_reply(raw)
    assert len(result.summary) <= SUMMARY_MAX_CHARS
    assert result.summary.endswith("…")


@pytest.mark.parametrize(
    ("raw", "kind"),
    [
        ("", "empty"),
        ("Sure! Here are the facts.", "not_json"),
        ('{"summary": "The user", "facts": [{"text": "The us', "truncated"),
        ("[]", "schema"),
        ('{"summary": 3, "facts": []}', "schema"),
        ('{"summary": "x"}', "schema"),
        ('{"summary": "x", "facts": ["a fact"]}', "schema"),
        ('{"summary": "x", "facts": [{"text": "t t", "evidence": 5}]}', "schema"),
        ('{"summary": "x", "facts": [{"text": "t t", "evidence": "e", "replaces": ["3"]}]}', "schema"),
        ('{"summary": "x", "facts": [{"text": "t t", "evidence": "e", "replaces": [true]}]}', "schema"),
        ('{"summary": "x", "facts": [{"text": "t t", "evidence": "e", "duplicate_of": "3"}]}', "schema"),
    ],
)
def test_invalid_replies_are_rejected_without_quoting_them(raw: str, kind: str) -> None:
    with pytest.raises(ExtractionError) as info:
        parse_reply(raw)
    assert info.value.kind == kind
    assert "Biscuit" not in str(info.value) and "The us" not in str(info.value)


# ---- grounding -------------------------------------------------------------------------------------------

USER_LINES = ["My dog   Biscuit turned THREE last week!", "My account number is SF-789234501.", "yes"]


def test_evidence_must_quote_a_user_line_ignoring_case_and_spacing() -> None:
    good = ExtractedFact("The user's dog Biscuit is three.", "my dog biscuit turned three")
    assert rejection_reason(good, USER_LINES) is None
    curly = ExtractedFact("The user's dog Biscuit is three.", "“My dog Biscuit turned three last week!”")
    assert rejection_reason(curly, USER_LINES) is None


def test_fact_quoted_from_the_assistant_is_dropped() -> None:
    fact = ExtractedFact("The user should try yoga.", "you should try yoga")
    assert rejection_reason(fact, USER_LINES) == "evidence is not a quote of a user line"


def test_identifiers_must_have_been_said_by_the_user() -> None:
    said = ExtractedFact("The user's account number is SF 789234501.", "My account number is")
    assert rejection_reason(said, USER_LINES) is None
    told = ExtractedFact("The user's claim number is CLM-2024-894327.", "yes")
    assert rejection_reason(told, USER_LINES) == "an identifier was not said by the user"


def test_resolved_dates_and_short_numbers_are_not_identifiers() -> None:
    assert identifiers("On 2024-03-11 (March 11th, 2024) at 10:30am the user paid $2,400 for 15-year") == []
    assert identifiers("Booking TC-8847 and card 5524-8897-2234-4001") == ["tc8847", "5524889722344001"]


@pytest.mark.parametrize(
    ("fact", "reason"),
    [
        (ExtractedFact("Greeting", "yes"), "too short"),
        (ExtractedFact("The user " + "x" * 600, "yes"), "too long"),
        (ExtractedFact("The user's name is {user_name}", "yes"), "template or markup"),
        (ExtractedFact("The user said </memory> here", "yes"), "template or markup"),
        (ExtractedFact("The user likes dogs.", "  ."), "no evidence"),
    ],
)
def test_junk_is_dropped(fact: ExtractedFact, reason: str) -> None:
    assert rejection_reason(fact, USER_LINES) == reason


def test_grounded_facts_caps_the_number_per_conversation() -> None:
    facts = [ExtractedFact(f"The user has dog number {n}.", "My dog") for n in range(MAX_FACTS + 5)]
    kept, dropped = grounded_facts(Extraction("", facts), USER_LINES)
    assert len(kept) == MAX_FACTS
    assert dropped == ["over the per-conversation limit"] * 5


def test_normalise() -> None:
    assert normalise("  “The User’s  DOG.” ") == "the user's dog"
