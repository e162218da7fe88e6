"""A forget of everything under way (``Store.begin_forget`` committed, its ``forget_user`` not yet) refuses every
write of the member's memory, on each backend and behind the encrypting layer, until the forget that began last
ends; ``bot.memory.forget_all`` relies on it so that a kill between its steps never lets a process seal a line
under the key the forget deletes."""

from __future__ import annotations

from bot.store.models import ChatRecord, NewTurn
from bot.store.repository import Store
from standins.factories import make_call


async def test_every_write_of_the_member_waits_for_the_forget_under_way_to_end(store: Store) -> None:
    call = make_call(user_id=5, state="active")
    await store.create_call(call)
    await store.create_chat(ChatRecord("chat-5", 5, None, False, 1.0, 1.0))
    await store.create_chat(ChatRecord("chat-6", 6, None, False, 1.0, 1.0))
    line = [NewTurn("user", "my bike is the green one", 1.0, 0, 0, False, 0)]

    begun = await store.begin_forget(5)
    now = await store.memory_generation(5)
    assert now == begun and await store.interrupted_forgets() == [5]
    assert not await store.apply_call_turns(call.call_id, 5, line, [], anchored=True, checkpoint_at=1.0)
    assert not await store.apply_call_turns(call.call_id, 5, line, [], anchored=True, checkpoint_at=1.0, generation=now)
    assert await store.append_chat_turn("chat-5", 5, "user", "hello", 2.0, generation=now) is None
    assert await store.append_chat_turn("chat-5", 5, "user", "hello", 2.0) is None
    assert await store.add_told_fact(5, "keeps bees", 2.0, generation=now) is None
    assert await store.append_chat_turn("chat-6", 6, "user", "hello", 2.0), "another member writes as before"
    assert await store.count_turns(5) == 0

    await store.forget_user(5, begun=begun)
    assert await store.interrupted_forgets() == []
    await store.create_chat(ChatRecord("chat-5b", 5, None, False, 3.0, 3.0))
    assert await store.append_chat_turn("chat-5b", 5, "user", "back again", 3.0, generation=now + 1)
    assert await store.count_turns(5) == 1


async def test_a_forget_begun_twice_ends_only_with_the_last_beginning(store: Store) -> None:
    """A forget finished by another process (the sweep, `check`) while the first is still under way: the first
    one's end must not lift the refusal while the second has still to delete the key and the rows."""
    first = await store.begin_forget(7)
    second = await store.begin_forget(7)
    assert second > first
    await store.forget_user(7, begun=first)
    assert await store.interrupted_forgets() == [7]
    await store.forget_user(7, begun=second)
    assert await store.interrupted_forgets() == []
