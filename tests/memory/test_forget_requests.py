"""Who may forget what (`bot.memory.forget_requests`), as rules of their own: a member forgets only their own
facts, calls and chats, a call only once it is over, and is told what goes before it goes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from bot.config import DEFAULT_PERSONA
from bot.memory import importer
from bot.memory.forget_requests import Everything, ForgetRequests, Forgettable
from bot.memory.service import MemoryService
from bot.store.models import Conversation
from bot.store.sqlite import SqliteStore
from standins.factories import make_call, seed_chat, seed_fact

T0 = 1_780_000_000.0
ALICE, BOB = 1, 2


@pytest_asyncio.fixture
async def requests(sqlite_store: SqliteStore) -> AsyncIterator[ForgetRequests]:
    memory = MemoryService(sqlite_store, budget_tokens=1500, persona=DEFAULT_PERSONA)
    yield ForgetRequests(sqlite_store, memory)
    await memory.wait_scrubbed()


async def finished_call(requests: ForgetRequests, user_id: int) -> Conversation:
    [call_id] = await importer.import_conversations(
        requests.memory.store,
        requests.memory,
        user_id,
        [importer.Conversation(T0, [("user", "My cat is called Pixel."), ("assistant", "Lovely name!")])],
    )
    return Conversation("call", call_id)


async def test_a_finished_call_is_previewed_then_forgotten(requests: ForgetRequests) -> None:
    call = await finished_call(requests, ALICE)
    await seed_fact(requests.memory.store, ALICE, "Has a cat called Pixel", T0, call_id=call.ref_id)

    found = await requests.preview_conversation(ALICE, call)
    assert not isinstance(found, str)
    forgettable, preview = found
    assert forgettable == Forgettable(call, T0)
    assert (preview.turns, preview.facts) == (2, 1)
    assert await requests.everything(ALICE) == Everything(facts=1, conversations=1)

    done = await requests.forget_conversation(ALICE, call)
    assert not isinstance(done, str) and (done[1].turns, done[1].facts) == (2, 1)
    assert await requests.everything(ALICE) == Everything(facts=0, conversations=0)
    assert await requests.forget_conversation(ALICE, call) == "not_found"


async def test_another_members_call_chat_or_fact_reads_as_not_there(requests: ForgetRequests) -> None:
    call = await finished_call(requests, BOB)
    chat = Conversation("chat", await seed_chat(requests.memory.store, BOB, T0))
    fact = await seed_fact(requests.memory.store, BOB, "Plays the cello", T0, call_id=call.ref_id)

    assert await requests.preview_conversation(ALICE, call) == "not_found"
    assert await requests.forget_conversation(ALICE, call) == "not_found"
    assert await requests.forget_conversation(ALICE, chat) == "not_found"
    assert await requests.forget_conversation(ALICE, Conversation("call", "no-such-call")) == "not_found"
    assert await requests.fact(ALICE, fact.fact_id) is None
    assert await requests.forget_fact(ALICE, fact.fact_id) is None
    assert await requests.everything(BOB) == Everything(facts=1, conversations=1)  # nothing of Bob's went


async def test_a_call_still_running_is_not_forgotten(requests: ForgetRequests) -> None:
    running = make_call(ALICE, state="active", started_at=T0)
    await requests.memory.store.create_call(running)
    call = Conversation("call", running.call_id)
    assert await requests.preview_conversation(ALICE, call) == "still_running"
    assert await requests.forget_conversation(ALICE, call) == "still_running"
    assert await requests.forget_conversation(BOB, call) == "not_found"  # Bob does not learn that it runs
    assert await requests.memory.store.get_call(running.call_id) is not None


async def test_a_members_own_chat_and_fact_are_forgotten(requests: ForgetRequests) -> None:
    chat = Conversation("chat", await seed_chat(requests.memory.store, ALICE, T0))
    fact = await seed_fact(requests.memory.store, ALICE, "Works as a nurse in Leeds", T0, chat_id=chat.ref_id)
    assert [f.fact_id for f in await requests.facts(ALICE, 10)] == [fact.fact_id]

    traces = await requests.fact(ALICE, fact.fact_id)
    assert traces is not None and not traces.removes_more  # nothing else goes: forgotten without asking
    assert await requests.forget_fact(ALICE, fact.fact_id) is not None
    assert await requests.facts(ALICE, 10) == []
    done = await requests.forget_conversation(ALICE, chat)
    assert not isinstance(done, str) and done[0] == Forgettable(chat, T0)
