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
