"""How many positions a conversation has (``conversation_lengths``): what a query-aware block needs to tell a
conversation's first lines from the rest (``bot.memory.recall.in_openings``)."""

from __future__ import annotations

from bot.memory.service import MemoryService
from bot.store.models import ChatRecord
from bot.store.repository import Store
from tests.memory.test_context import T0, chatter, remember

USER = 9


async def test_a_conversations_length_is_its_last_lines_position_plus_one(store: Store, memory: MemoryService) -> None:
    call = await remember(store, memory, USER, chatter(7), T0)
    await store.create_chat(ChatRecord("chat-9", USER, None, False, T0, T0))
    for n in range(3):
        assert await store.append_chat_turn("chat-9", USER, "user", f"line {n}", T0 + n) is not None
    (last,) = await store.turns_at([("chat-9", 2)])
    lengths = await store.conversation_lengths([call, "chat-9", "no-such-conversation"])
    assert lengths == {call: 7, "chat-9": last.seq + 1}
    assert await store.conversation_lengths([]) == {}
