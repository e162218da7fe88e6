"""Whose lines an utterance is about (bot.memory.speakers): the names the two sides call each other are found in
the member's own lines, and a question naming one side gets that side's own lines, the other side's hits leading
to them."""

from __future__ import annotations

import pytest

from bot.memory import speakers
from bot.memory.service import MemoryService
from bot.memory.speakers import address_words, named_side
from bot.store.models import Role, TurnRecord
from bot.store.repository import Store
from standins.factories import make_call
from tests.memory.test_context import DAY, T0, chatter, remember

USER = 9


def lines(*said: tuple[Role, str]) -> list[TurnRecord]:
    return [TurnRecord(seq + 1, USER, "c", None, seq, role, text, T0, "voice") for seq, (role, text) in enumerate(said)]


def test_the_names_are_the_words_each_side_addresses_the_other_by() -> None:
    history = lines(
        *[("assistant", f"Thanks, Caroline! Day {i} sounds lovely.") for i in range(3)],
        ("assistant", "Hey Caroline, how was the hike?"),
        *[("user", f"Wow, Mel, that is great news number {i}.") for i in range(3)],
        *[(role, "Thanks, that helps.") for role in ("user", "assistant")],
        *[("assistant", f"Exactly, and the river was high on day {i}.") for i in range(4)],
        *[("user", "Sure, Perfect!") for _ in range(3)],
        ("assistant", "That was perfect timing."),
    )
    assert address_words(history) == {"caroline": "user", "mel": "assistant"}


def test_a_word_both_sides_use_in_address_or_used_rarely_names_nobody() -> None:
    history = lines(
        *[("assistant", f"Oh, Robin! Day {i}.") for i in range(4)],
        *[("user", f"Oh, Robin, day {i}.") for i in range(4)],
        ("assistant", "Thanks, Sam."),
        ("assistant", "Bye, Sam!"),
        ("user", "ok"),
    )
    assert address_words(history) == {}


@pytest.mark.parametrize(
    ("terms", "side"),
    [
        ("caroline research", "user"),
        ("mel paint sunrise", "assistant"),
        ("caroline mel meet", None),
        ("garden compost", None),
    ],
)
def test_an_utterance_is_about_the_side_it_names_alone(terms: str, side: Role | None) -> None:
    assert named_side(terms, {"caroline": "user", "mel": "assistant"}) == side


RESEARCH: list[tuple[Role, str]] = [
    ("user", "I spent the week researching adoption agencies that welcome single parents."),
    ("user", "My research right now is all about counselling courses near home."),
]


def history_about_research() -> list[list[tuple[Role, str]]]:
    """Calls where the agent keeps asking Caroline about her research, and two where she tells it in her own words."""
    words = ["soup", "train", "rain", "tea", "park", "movie", "lunch", "music", "river", "coffee", "cloud", "book"]
    asking: list[list[tuple[Role, str]]] = [
        [
            ("assistant", f"Oh, Caroline, your {word} research and {other} research sound fun!"),
            ("user", "Not yet, Mel."),
        ]
        for word, other in zip(words, reversed(words), strict=True)
    ]
    answers: list[list[tuple[Role, str]]] = [
        [("assistant", "What is new?"), said, ("assistant", "Well done.")] for said in RESEARCH
    ]
    return [*asking[:6], answers[0], *asking[6:], answers[1]]


QUESTION = "What did Caroline research?"


async def test_a_question_naming_the_member_gets_their_own_lines_not_the_agents_questions(
    store: Store, memory: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    for day, call in enumerate(history_about_research()):
        await remember(store, memory, USER, call, T0 + day * DAY)
    await remember(store, memory, USER, chatter(200), T0 + 20 * DAY)

    async def asked() -> str:
        messages = await memory.build_context(USER, query=QUESTION, budget_tokens=260)
        return messages[1]["content"]

    focused = await asked()
    assert all(text in focused for _, text in RESEARCH), focused
    assert focused.count("research sound fun") <= speakers.KEEP_TOP, "the agent's questions lead, they do not fill"
    live = make_call(USER, state="active", started_at=T0 + 30 * DAY)
    await store.create_call(live)
    during_call = await memory.build_context(USER, query=QUESTION, budget_tokens=260, exclude_call_id=live.call_id)
    assert during_call[1]["content"] == focused, "a voice turn (the member's index) builds the same block"

    monkeypatch.setattr("bot.memory.context.named_side", lambda terms, address: None)
    unfocused = await asked()
    assert not all(text in unfocused for _, text in RESEARCH), "without the rule the agent's questions crowd them out"
