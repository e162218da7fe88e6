"""Query-aware recall keeps the call start's core (bot.memory.recall): knowing what was just said never loses the
member's most salient lines to lines that merely share its words."""

from __future__ import annotations

from bot.memory.service import MemoryService
from bot.store.repository import Store
from tests.memory.test_context import DAY, T0, chatter, remember

USER = 9
PASSPORT = "My passport number is X1234567 and it expires in March 2031."
GARDEN = [("user" if i % 2 else "assistant", f"the garden bed {i} needs more garden compost") for i in range(120)]


async def block(memory: MemoryService, query: str | None) -> str:
    return (await memory.build_context(USER, query=query, budget_tokens=600))[1]["content"]


async def test_a_question_keeps_the_salient_lines_the_call_start_shows(store: Store, memory: MemoryService) -> None:
    await remember(store, memory, USER, [("user", PASSPORT), ("assistant", "Noted, thank you.")], T0)
    await remember(store, memory, USER, GARDEN, T0 + DAY)
    await remember(store, memory, USER, chatter(80), T0 + 2 * DAY)
    assert PASSPORT in await block(memory, None)
    asked = await block(memory, "what did I say about the garden?")
    assert PASSPORT in asked, "the call start's core stays"
    assert asked.count("garden compost") >= 5, "the rest of the budget goes to what was asked"


async def test_the_core_kept_for_a_call_gives_the_same_block_as_building_afresh(store: Store) -> None:
    """On the live path the core is filled once per member index and restored for each later utterance."""
    from standins.factories import make_call

    first = MemoryService(store, budget_tokens=600, persona="p")
    await remember(store, first, USER, [("user", PASSPORT), ("assistant", "Noted, thank you.")], T0)
    await remember(store, first, USER, GARDEN, T0 + DAY)
    await remember(store, first, USER, chatter(80), T0 + 2 * DAY)
    live = make_call(USER, state="active", started_at=T0 + 3 * DAY)
    await store.create_call(live)
    questions = ["what did I say about the garden?", "and my passport?", "what about compost?"]
    kept = [await first.build_context(USER, query=q, exclude_call_id=live.call_id) for q in questions]
    for question, block in zip(questions, kept, strict=True):
        fresh = MemoryService(store, budget_tokens=600, persona="p")
        assert await fresh.build_context(USER, query=question, exclude_call_id=live.call_id) == block
    assert all(PASSPORT in block[1]["content"] for block in kept)
