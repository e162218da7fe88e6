"""Relative dates in remembered lines are resolved against the day they were said (bot.memory.dates), so a "when"
question asked months later can be answered from the memory block; and a question that names a day or a month gets
what was said then."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bot.memory.dates import MAX_PERIODS, named_periods, resolved
from bot.memory.service import MemoryService
from bot.store.repository import Store
from standins.factories import make_call
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


def day(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("text", "periods"),
    [
        ("What did Caroline share on October 13, 2023?", [("2023-10-13", "2023-10-14")]),
        ("What news did Evan share on 9th December 2023?", [("2023-12-09", "2023-12-10")]),
        ("the picture from December 1,2023", [("2023-12-01", "2023-12-02")]),
        ("on 7 July, 2023 and on the 2nd of Feb 2024", [("2023-07-07", "2023-07-08"), ("2024-02-02", "2024-02-03")]),
        ("what did I say on 2024-02-29?", [("2024-02-29", "2024-03-01")]),
        ("Which country was Evan visiting in May 2023?", [("2023-05-01", "2023-06-01")]),
        ("anything from December 2023?", [("2023-12-01", "2024-01-01")]),
    ],
)
def test_the_days_and_months_a_question_names(text: str, periods: list[tuple[str, str]]) -> None:
    widened = sorted((day(start) - DAY, day(end) + DAY) for start, end in periods)
    assert sorted(named_periods(text)) == widened, "a day either side"


@pytest.mark.parametrize("text", ["in 2022", "on 2023-02-30", "may I ask about March?", "at 13:00 on the 13th", ""])
def test_no_day_or_month_of_a_year_named_means_no_period(text: str) -> None:
    assert named_periods(text) == []


def test_the_past_a_question_names_relative_to_now() -> None:
    def periods(text: str) -> list[tuple[str, str]]:
        return [
            (datetime.fromtimestamp(start, UTC).date().isoformat(), datetime.fromtimestamp(end, UTC).date().isoformat())
            for start, end in named_periods(text, TUESDAY)
        ]

    assert periods("what did I tell you yesterday?") == [("2025-03-03", "2025-03-04")]
    assert periods("and last week?") == [("2025-02-24", "2025-03-03")]
    assert periods("3 days ago, and last Friday") == [("2025-03-01", "2025-03-02"), ("2025-02-28", "2025-03-01")]
    assert periods("last month or last year") == [("2025-02-01", "2025-03-01"), ("2024-01-01", "2025-01-01")]
    assert periods("what is on tomorrow, and next week?") == [], "nothing was said in the future"
    assert named_periods("what did I tell you yesterday?") == [], "relative to nothing without now"


async def test_a_question_naming_yesterday_gets_what_was_said_then(
    store: Store, memory: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = TUESDAY
    memory.context.clock = lambda: now
    said_yesterday = ("user", "Finished the blue one at last, hanging it above the fireplace.")
    for n in range(10, 2, -1):
        await remember(store, memory, USER, chatter(6), now - n * DAY)
    await remember(store, memory, USER, [said_yesterday, ("assistant", "It will look lovely there.")], now - DAY)
    await remember(store, memory, USER, chatter(120), now - 3600)

    async def asked() -> str:
        query = "What did I tell you yesterday?"
        return (await memory.build_context(USER, query=query, budget_tokens=300))[1]["content"]

    assert said_yesterday[1] in await asked()
    monkeypatch.setattr("bot.memory.context.named_periods", lambda text, now: [])
    assert said_yesterday[1] not in await asked(), "without the period, the question matches nothing: a call start"


async def test_a_question_naming_a_day_gets_what_was_said_that_day(
    store: Store, memory: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """None of the question's words are in that day's lines: the day is what it asks about."""
    said_that_day = ("user", "Finished the blue one at last, hanging it above the fireplace.")
    for n in range(12):
        await remember(store, memory, USER, chatter(6), day("2023-10-01") + n * DAY)
    await remember(store, memory, USER, [said_that_day, ("assistant", "It will look lovely there.")], day("2023-10-13"))
    await remember(store, memory, USER, chatter(120), day("2023-11-20"))

    async def asked(during: str | None = None) -> str:
        query = "What did I tell you on October 13, 2023?"
        return (await memory.build_context(USER, query=query, budget_tokens=300, exclude_call_id=during))[1]["content"]

    assert said_that_day[1] in await asked()
    live = make_call(USER, state="active", started_at=day("2023-12-01"))
    await store.create_call(live)
    assert said_that_day[1] in await asked(live.call_id), "a voice turn (the member's index) finds it too"
    monkeypatch.setattr("bot.memory.context.named_periods", lambda text, now: [])
    assert said_that_day[1] not in await asked(), "without the date, the question matches nothing: a call start"


def test_an_utterance_is_read_for_its_first_few_periods_only() -> None:
    many = " ".join(f"on {n} May 2023," for n in range(1, 29))
    assert len(named_periods(many, TUESDAY)) == MAX_PERIODS


async def test_a_day_older_than_the_latest_lines_is_read_from_the_store(store: Store, memory: MemoryService) -> None:
    """The call start reads the latest 400 lines; a day long before them is read for the question that names it,
    from the store for a chat message and from the member's index for a voice turn."""
    said_then = ("user", "We picked the name Juniper for the boat, painted in green.")
    await remember(store, memory, USER, [said_then, ("assistant", "A fine name.")], day("2021-03-02"))
    for n in range(5):
        await remember(store, memory, USER, chatter(100), day("2023-01-01") + n * DAY)
    live = make_call(USER, state="active", started_at=day("2023-02-01"))
    await store.create_call(live)
    query = "What did I tell you on 2 March 2021?"
    for during in (None, live.call_id):
        block = (await memory.build_context(USER, query=query, budget_tokens=300, exclude_call_id=during))[1]
        assert said_then[1] in block["content"], during
