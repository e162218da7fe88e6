"""The member's word weights of the embedded model (bot.memory.salience): a word the member says in every line
weighs little, so a question is nearest the line that shares what is particular in it; lines are stored weighed by
the member's lines as they were, and the utterance by their lines as they are."""

from __future__ import annotations

import numpy as np
import pytest

from bot.memory.dense import DenseRetriever, MemberEmbedder
from bot.memory.embedded import EMBEDDED_MODEL, EmbeddedEmbedder, shared_model
from bot.memory.salience import SALIENCE_LINES, Salience, member_salience
from bot.memory.service import MemoryService
from bot.store.models import TurnRecord
from bot.store.repository import Store
from bot.store.vectors import unpack
from standins.factories import make_call
from tests.memory.test_context import DAY, T0, chatter
from tests.memory.test_postcall import USER, ended_call

POTTERY = [f"My pottery class {i} was fun, the pottery teacher showed us pottery again" for i in range(40)]
PUPPY = "I adopted a puppy from the shelter last week"
QUESTION = "How is my new dog doing with the pottery?"


def unit(vector: np.ndarray) -> np.ndarray:
    return vector / np.linalg.norm(vector)


def test_a_word_in_every_line_weighs_less_than_a_rare_one_and_numbers_weigh_least() -> None:
    salience = Salience.of([*POTTERY, PUPPY])
    assert salience.lines == 41
    assert salience.weight("pottery") < salience.weight("puppy") < salience.weight("kiln")
    assert salience.weight("Puppy's") == salience.weight("puppy"), "a word is weighed by its first part"
    assert salience.weight("2031") == salience.weight("?") <= salience.weight("pottery")
    assert Salience.of([]).weight("anything") > 0, "with no lines yet every word still counts"


def test_with_the_members_weights_a_question_is_nearest_the_line_that_shares_what_is_particular_in_it() -> None:
    model = shared_model()
    salience = Salience.of([*POTTERY, PUPPY])

    def nearness(line: str, weights: Salience | None) -> float:
        return float(unit(model.embed_one(line, weights)) @ unit(model.embed_one(QUESTION, weights)))

    assert nearness(POTTERY[3], None) > nearness(PUPPY, None), "a plain mean: the word said everywhere decides"
    assert nearness(PUPPY, salience) > nearness(POTTERY[3], salience)


def test_the_weights_are_counted_once_per_member_index() -> None:
    lines = [TurnRecord(n + 1, USER, "c", None, n, "user", text, 0.0, "voice") for n, text in enumerate(POTTERY)]
    kept: dict[str, object] = {}
    first = member_salience(lines, kept)
    assert member_salience(lines[:1], kept) is first and first.lines == len(POTTERY)
    assert member_salience(lines * 20).lines == SALIENCE_LINES, "only the latest lines are counted"


async def test_lines_are_stored_weighed_by_the_members_latest_lines(store: Store, memory: MemoryService) -> None:
    mixed = "The pottery teacher adopted a puppy from the shelter"
    said = [("user", text) for text in POTTERY] + [("user", mixed)]
    await ended_call(store, memory, said, queue=False)
    await MemberEmbedder(store, EmbeddedEmbedder()).embed_member(USER)
    stored = {v.item_id: unpack(v.vector) for v in await store.member_vectors(USER, EMBEDDED_MODEL)}
    recent = await store.recent_turns_of(USER, SALIENCE_LINES)
    (line,) = [turn for turn in recent if turn.content == mixed]
    model = shared_model()
    weighed = model.embed_one(mixed, Salience.of(turn.content for turn in recent))
    assert np.allclose(stored[line.turn_id], weighed, atol=1e-5)
    assert not np.allclose(stored[line.turn_id], model.embed_one(mixed), atol=1e-3), "pottery weighs less"


@pytest.mark.parametrize("weighed", [True, False], ids=["weighed", "plain mean"])
async def test_a_question_in_other_words_finds_the_line_among_the_words_the_member_says_all_the_time(
    store: Store, memory: MemoryService, monkeypatch: pytest.MonkeyPatch, weighed: bool
) -> None:
    """A member who talks of pottery in every call once said, among pottery, that they were given a puppy; later
    they ask after their new dog, in words that line does not use, while other lines say "new". With the weights the
    block built for the question holds that line, on the stored and the live path; with a plain mean of its words
    (what the model did before), the pottery decides its meaning and the lines that say "new" come first."""
    if not weighed:
        monkeypatch.setattr(EmbeddedEmbedder, "weighs_words", property(lambda _: False))
    gift = "My pottery teacher gave me a puppy from the pottery shelter after pottery class"
    pottery = [("user" if n % 2 else "assistant", line) for n, line in enumerate(POTTERY)]
    await ended_call(store, memory, [*pottery[:20], ("user", gift), *pottery[20:]], started_at=T0, queue=False)
    said_new = [
        ("user", "My new neighbour is doing fine"),
        ("assistant", "Your new bike sounds great"),
        ("user", "The new cafe opened near the river"),
    ]
    await ended_call(store, memory, [*chatter(30), *said_new, *chatter(30)], started_at=T0 + DAY, queue=False)
    embedder = EmbeddedEmbedder()
    await MemberEmbedder(store, embedder).embed_member(USER)
    memory.context.dense = DenseRetriever(store, embedder)
    live = make_call(USER, state="active", started_at=T0 + 2 * DAY)
    await store.create_call(live)
    question = "How is my new dog?"
    stored = await memory.build_context(USER, query=question, budget_tokens=400)
    during_call = await memory.build_context(USER, query=question, budget_tokens=400, exclude_call_id=live.call_id)
    assert (gift in stored[1]["content"]) is weighed
    assert (gift in during_call[1]["content"]) is weighed, "the same from the member's index during a call"
