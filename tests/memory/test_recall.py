"""A query-aware block (bot.memory.recall): the facts the member told it stay whatever they ask; the rest of the
budget goes to what the utterance names, with words the member says all the time left out; small talk gets what a
call start shows."""

from __future__ import annotations

import pytest

from bot.memory import recall
from bot.memory.recall import (
    CALL_WEIGHT,
    CALL_WINDOW,
    OPENING_SHARE,
    OPENING_WEIGHT,
    conversation_leads,
    in_conversations,
    in_openings,
    standout_positions,
)
from bot.memory.service import MemoryService
from bot.store.models import TurnRecord
from bot.store.repository import Store
from standins.factories import make_call
from tests.memory.test_context import DAY, T0, chatter, remember

USER = 9
PASSPORT = "My passport number is X1234567 and it expires in March 2031."
GARDEN = [("user" if i % 2 else "assistant", f"the garden bed {i} needs more garden compost") for i in range(120)]


async def block(memory: MemoryService, query: str | None) -> str:
    return (await memory.build_context(USER, query=query, budget_tokens=600))[1]["content"]


async def told(store: Store, text: str, at: float) -> None:
    assert await store.add_told_fact(USER, text, at) is not None


async def test_a_question_keeps_what_the_member_told_and_fills_the_rest_with_what_it_asks(
    store: Store, memory: MemoryService
) -> None:
    await told(store, PASSPORT, T0)
    await remember(store, memory, USER, GARDEN, T0 + DAY)
    await remember(store, memory, USER, chatter(80), T0 + 2 * DAY)
    assert PASSPORT in await block(memory, None)
    asked = await block(memory, "what did I say about the garden?")
    assert PASSPORT in asked, "a told fact is never dropped"
    assert asked.count("garden compost") >= 5, "the rest of the budget goes to what was asked"


async def test_small_talk_gets_what_a_call_start_shows(store: Store, memory: MemoryService) -> None:
    await told(store, PASSPORT, T0)
    await remember(store, memory, USER, GARDEN, T0 + DAY)
    await remember(store, memory, USER, chatter(80), T0 + 2 * DAY)
    start = await block(memory, None)
    for talk in ("hi", "thanks, bye", "good morning!", "haha, nice"):
        assert await block(memory, talk) == start, talk


async def test_a_word_the_member_says_all_the_time_selects_nothing(store: Store, memory: MemoryService) -> None:
    """Their own name in a question ("what did Robin say about the boat?") is in many of their lines: the lines
    about the boat come first, not the ones that merely name them."""
    greetings = [("assistant", f"Hey Robin, good to hear from you again, day {i}!") for i in range(60)]
    await remember(store, memory, USER, greetings, T0)
    boat = "I finally repainted the old boat blue last weekend."
    await remember(store, memory, USER, [("user", boat), ("assistant", "Lovely colour.")], T0 + DAY)
    await remember(store, memory, USER, chatter(80), T0 + 2 * DAY)
    asked = (await memory.build_context(USER, query="What did Robin paint on the boat?", budget_tokens=200))[1]
    assert boat in asked["content"]


async def test_the_core_kept_for_a_call_gives_the_same_block_as_building_afresh(store: Store) -> None:
    """On the live path the core is filled once per member index and restored for each later utterance."""
    from standins.factories import make_call

    first = MemoryService(store, budget_tokens=600, persona="p")
    await told(store, PASSPORT, T0)
    await remember(store, first, USER, GARDEN, T0 + DAY)
    await remember(store, first, USER, chatter(80), T0 + 2 * DAY)
    live = make_call(USER, state="active", started_at=T0 + 3 * DAY)
    await store.create_call(live)
    questions = ["what did I say about the garden?", "and my passport?", "what about compost?"]
    kept = [await first.build_context(USER, query=q, exclude_call_id=live.call_id) for q in questions]
    for question, block in zip(questions, kept, strict=True):
        fresh = MemoryService(store, budget_tokens=600, persona="p")
        assert await fresh.build_context(USER, query=question, exclude_call_id=live.call_id) == block
    assert all(PASSPORT in block[1]["content"] for block in kept), "the told fact, restored with the core"


def scored(call: str, seq: int, score: float) -> tuple[TurnRecord, float]:
    turn = TurnRecord(hash((call, seq)) & 0xFFFF, USER, call, None, seq, "user", f"{call} line {seq}", T0, "voice")
    return turn, score


def test_the_lines_of_the_call_where_two_lines_match_gain_over_a_call_where_one_does() -> None:
    alone, first, second = scored("c1", 4, 0.9), scored("c0", 7, 0.85), scored("c0", 12, 0.8)
    others = [scored(f"c{n}", 1, 0.3) for n in range(2, 6)]
    ranked = [alone, first, second, *others]
    leads = conversation_leads(ranked)
    assert max(leads, key=leads.__getitem__) == "c0" and set(leads) == {"c0", "c1"}
    assert leads["c0"] == CALL_WEIGHT * 0.9, "the leading call gains a fifth of the best line's score"
    assert [turn for turn, _ in in_conversations(ranked, leads)[:3]] == [first[0], second[0], alone[0]]
    assert conversation_leads(ranked[:4]) == {}, "among four calls with a match, one standing out says little"
    positions = standout_positions(ranked, leads)
    assert positions[0] == ("c0", 7 - CALL_WINDOW) and positions[-1] == ("c0", 12 + CALL_WINDOW)
    quiet = scored("c0", 9, 0.0)[0]
    assert (quiet, leads["c0"]) in in_conversations(ranked, leads, [quiet]), "a line near them that matched nothing"


async def test_a_question_gets_the_lines_around_what_it_matched_in_the_call_that_matches_best(
    store: Store, memory: MemoryService
) -> None:
    """Seven calls mention the kayak; one of them twice, and there the member says what came of it three lines
    later, in words the question does not use."""
    answer = "afterwards the whole street smelled of fresh bread from the bakery"
    trip = [
        ("user", "I finally booked the kayak trip for the long weekend"),
        *chatter(3),
        ("user", "The kayak trip was the best weekend of my year"),
        *chatter(2),
        ("user", answer),
        *chatter(60),
    ]
    await remember(store, memory, USER, trip, T0)
    for n in range(1, 7):
        said = [*chatter(40), ("user", f"my neighbour {n} sold me an old kayak paddle"), *chatter(40 + n)]
        await remember(store, memory, USER, said, T0 + n * DAY)
    asked = await block(memory, "How did my kayak trip go?")
    assert "kayak trip was the best weekend" in asked
    assert answer in asked, "the line near its two matches, in the call that matches best"
    live = make_call(USER, state="active", started_at=T0 + 9 * DAY)
    await store.create_call(live)
    during_call = await memory.build_context(
        USER, query="How did my kayak trip go?", budget_tokens=600, exclude_call_id=live.call_id
    )
    assert answer in during_call[1]["content"], "the same from the member's index during a call"


def test_a_line_that_matches_early_in_its_conversation_gains_the_most_at_its_first_line() -> None:
    first, early, later, quiet = scored("c0", 0, 0.5), scored("c1", 4, 0.5), scored("c1", 30, 0.6), scored("c0", 1, 0)
    unknown = scored("c9", 0, 0.55)
    raised = dict(
        (turn.turn_id, score)
        for turn, score in in_openings([later, unknown, first, early, quiet], {"c0": 40, "c1": 40})
    )
    assert raised[first[0].turn_id] == pytest.approx(0.5 + OPENING_WEIGHT * 0.6), "a fifth of the best, at the start"
    assert raised[early[0].turn_id] == pytest.approx(0.5 + OPENING_WEIGHT * 0.6 * (1 - 4 / (OPENING_SHARE * 40)))
    assert raised[later[0].turn_id] == 0.6, "past the first fifth of its conversation"
    assert raised[quiet[0].turn_id] == 0, "a line that matches nothing stays where it is"
    assert raised[unknown[0].turn_id] == 0.55, "a conversation whose length is not known"
    assert [turn for turn, _ in in_openings([later, first], {"c0": 40, "c1": 40})] == [first[0], later[0]]


@pytest.mark.parametrize("openings", [True, False], ids=["openings", "no openings"])
async def test_a_question_gets_the_line_that_opened_a_conversation_before_one_said_in_passing(
    store: Store, memory: MemoryService, monkeypatch: pytest.MonkeyPatch, openings: bool
) -> None:
    """A member began one call with news of their sourdough starter; weeks later, deep in another call, they
    mentioned a sourdough starter in passing, in a shorter line that matches the question as well. Asked how the
    starter is doing, a small block holds the line that opened the call (on the stored and the live path); without
    the openings rule, the line said in passing comes first."""
    if not openings:
        monkeypatch.setattr(recall, "OPENING_WEIGHT", 0.0)
    news = "Guess what, my sourdough starter finally bubbled right over the top of its jar"
    passing = "A friend at work asked me about my sourdough starter again today"
    await remember(store, memory, USER, [("user", news), *chatter(39)], T0)
    await remember(store, memory, USER, [*chatter(30), ("user", passing), *chatter(9)], T0 + 20 * DAY)
    live = make_call(USER, state="active", started_at=T0 + 21 * DAY)
    await store.create_call(live)
    question = "How is my sourdough starter doing?"
    stored = (await memory.build_context(USER, query=question, budget_tokens=120))[1]["content"]
    during_call = await memory.build_context(USER, query=question, budget_tokens=120, exclude_call_id=live.call_id)
    assert (news in stored, passing in stored) == (openings, not openings)
    assert news in during_call[1]["content"] if openings else passing in during_call[1]["content"]
