"""Relative dates in remembered lines are resolved against the day they were said (bot.memory.dates), so a "when"
question asked months later can be answered from the memory block."""

from __future__ import annotations

from datetime import UTC, datetime

from bot.memory.dates import resolved
from bot.memory.service import MemoryService
from bot.store.repository import Store
from tests.memory.test_context import DAY, chatter, remember

TUESDAY = datetime(2025, 3, 4, 15, 0, tzinfo=UTC).timestamp()
USER = 11


def test_phrases_are_resolved_against_the_day_they_were_said() -> None:
    assert resolved("I started the new job yesterday", TUESDAY) == "(yesterday = 2025-03-03)"
    assert resolved("We flew in last night and leave next Friday", TUESDAY) == (
        "(last night = 2025-03-03; next friday = 2025-03-07)"
    )
    assert resolved("three days ago I saw Dr Patel, and 2 weeks ago too", TUESDAY) == (
        "(3 days ago = 2025-03-01; 2 weeks ago = 2025-02-18)"
    )
    assert resolved("last week was hard, next month better", TUESDAY) == (
        "(last week = the week of 2025-02-24; next month = 2025-04)"
    )
    assert resolved("Last Tuesday I called, last year too", TUESDAY) == "(last tuesday = 2025-02-25; last year = 2024)"
    assert resolved("next month", datetime(2025, 12, 31, tzinfo=UTC).timestamp()) == "(next month = 2026-01)"


def test_a_line_with_no_relative_date_gets_no_note() -> None:
    assert resolved("the last bus left at nine", TUESDAY) == ""
    assert resolved("I work at the bakery on Rye Street", TUESDAY) == ""


async def test_a_when_question_months_later_sees_the_day_it_happened(store: Store, memory: MemoryService) -> None:
    await remember(store, memory, USER, [("user", "I started at the Rye Street bakery yesterday!")], TUESDAY)
    await remember(store, memory, USER, chatter(40), TUESDAY + 120 * DAY)
    for query in ("When did I start at the bakery?", None):
        block = (await memory.build_context(USER, query=query, budget_tokens=400))[1]["content"]
        assert '"I started at the Rye Street bakery yesterday!" (yesterday = 2025-03-03)' in block
