"""Text chat: same memory as voice calls, both ways; sessions end after an idle gap; privacy switches."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.llm.client import LLMClient
from bot.llm.errors import LLMUnavailable
from bot.memory.chat import ChatDisabled, ChatService
from bot.memory.context import MEMORY_HEADER
from bot.memory.own_words import OwnWords
from bot.memory.postcall import POST_CHAT_JOB, PostCallProcessor
from bot.memory.service import MemoryService
from bot.store.sqlite import SqliteStore
from standins.factories import make_call, seed_fact
from standins.harness import FakeClock

USER = 42
GUILD = 7
PERSONA = "You are a friendly text-chat bot."
T0 = 1_710_000_000.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
async def chat(store: SqliteStore, memory: MemoryService, llm: LLMClient, clock: FakeClock) -> ChatService:
    await store.set_consent(USER, True, T0)  # the member chose "Remember me"
    return ChatService(store, memory, llm, idle_minutes=30, persona=PERSONA, clock=clock)


async def say(chat: ChatService, message: str, **kwargs: Any) -> str:
    return "".join([delta async for delta in chat.reply(USER, GUILD, message, **kwargs)])


def system_text(request: dict) -> str:
    return "\n".join(m["content"] for m in request["messages"] if m["role"] == "system")


async def test_without_an_llm_chat_is_disabled(store, memory) -> None:
    service = ChatService(store, memory, None, idle_minutes=30, persona=PERSONA)
    assert not service.enabled
    with pytest.raises(ChatDisabled):
        service.reply(USER, GUILD, "hello")


async def test_reply_streams_and_both_turns_are_stored(store, chat, fake_llm) -> None:
    fake_llm.queue_reply("Hello there, nice to meet you!")
    assert chat.enabled
    deltas = [d async for d in chat.reply(USER, GUILD, "Hi, I'm Ana.")]
    assert len(deltas) > 1 and "".join(deltas) == "Hello there, nice to meet you!"

    session = await store.open_chat_for_user(USER)
    assert session is not None and session.guild_id == GUILD
    turns = await store.chat_turns(session.chat_id)
    assert [(t.role, t.content, t.source) for t in turns] == [
        ("user", "Hi, I'm Ana.", "text"),
        ("assistant", "Hello there, nice to meet you!", "text"),
    ]
    request = fake_llm.last_request
    assert request["stream"] is True
    assert request["messages"][0] == {"role": "system", "content": PERSONA}
    assert request["messages"][-1] == {"role": "user", "content": "Hi, I'm Ana."}


async def test_the_session_so_far_is_sent_as_conversation(store, chat, fake_llm) -> None:
    fake_llm.queue_reply("Nice to meet you, Ana.")
    fake_llm.queue_reply("You said Ana.")
    await say(chat, "Hi, I'm Ana.")
    await say(chat, "What is my name?")
    conversation = [m for m in fake_llm.last_request["messages"] if m["role"] != "system"]
    assert conversation == [
        {"role": "user", "content": "Hi, I'm Ana."},
        {"role": "assistant", "content": "Nice to meet you, Ana."},
        {"role": "user", "content": "What is my name?"},
    ]
    assert len(await store.chat_turns((await store.open_chat_for_user(USER)).chat_id)) == 4


async def test_text_chat_knows_what_was_said_in_a_voice_call(store, memory, chat, fake_llm) -> None:
    call = make_call(USER, state="ended", started_at=T0 - 86400)
    await store.create_call(call)
    await memory.record_snapshot(
        call, [("assistant", "Hi!"), ("user", "My sister Lena is getting married in June.")], max_history=None
    )
    await seed_fact(store, USER, "The user plays the cello.", T0 - 86400, call_id=call.call_id)
    fake_llm.queue_reply("How exciting!")
    await say(chat, "Any ideas for the wedding?")
    system = system_text(fake_llm.last_request)
    assert MEMORY_HEADER in system
    assert "Lena is getting married in June" in system
    assert "The user plays the cello." in system


async def test_chat_context_is_query_aware(store, memory, chat, fake_llm) -> None:
    call = make_call(USER, state="ended", started_at=T0 - 86400 * 60)
    await store.create_call(call)
    lines = [("user", "My passport number is X1234567.")]
    lines += [("user" if n % 2 else "assistant", f"Filler line number {n} about the weather " * 3) for n in range(300)]
    await memory.record_snapshot(call, lines, max_history=None)
    assert "X1234567" not in "\n".join(m["content"] for m in await memory.build_context(USER))
    fake_llm.queue_reply("It is X1234567.")
    await say(chat, "What was my passport number again?")
    assert "X1234567" in system_text(fake_llm.last_request)


async def test_the_next_voice_call_knows_what_was_said_in_text(store, memory, chat, fake_llm) -> None:
    fake_llm.queue_reply("Good luck with the exam!")
    await say(chat, "I have my driving test on Friday.")
    block = (await memory.build_context(USER))[1]["content"]
    assert "I have my driving test on Friday." in block
    assert "Good luck with the exam!" in block


async def test_chat_facts_reach_the_next_call_after_processing(store, memory, chat, fake_llm, llm, clock) -> None:
    fake_llm.queue_reply("Oh nice.")
    await say(chat, "I just adopted a cat named Miso.")
    assert await chat.end_session(USER)
    fake_llm.queue_reply(
        json.dumps(
            {
                "summary": "The user adopted a cat.",
                "facts": [{"text": "The user has a cat named Miso.", "evidence": "I just adopted a cat named Miso"}],
            }
        )
    )
    assert await PostCallProcessor(store, llm, clock=clock).run_once()
    block = (await memory.build_context(USER))[1]["content"]
    assert "The user has a cat named Miso." in block
    assert "The user adopted a cat." in block


async def test_paused_memory_stores_and_injects_nothing(store, memory, chat, fake_llm) -> None:
    await seed_fact(store, USER, "The user plays the cello.", T0 - 10)
    await store.set_memory_enabled(USER, False, T0)
    fake_llm.queue_reply("Sure.")
    assert await say(chat, "Remember that I love sushi.") == "Sure."
    assert fake_llm.last_request["messages"] == [
        {"role": "system", "content": PERSONA},
        {"role": "user", "content": "Remember that I love sushi."},
    ]
    assert await store.open_chat_for_user(USER) is None
    assert await store.count_turns(USER) == 0


async def test_private_chat_stores_and_injects_nothing(store, memory, chat, fake_llm) -> None:
    fake_llm.queue_reply("Noted.")
    await say(chat, "I like jazz.")
    session = await store.open_chat_for_user(USER)
    fake_llm.queue_reply("Secret is safe.")
    await say(chat, "My secret is 4242.", private=True)
    assert fake_llm.last_request["messages"] == [
        {"role": "system", "content": PERSONA},
        {"role": "user", "content": "My secret is 4242."},
    ]
    assert [t.content for t in await store.chat_turns(session.chat_id)] == ["I like jazz.", "Noted."]
    assert await store.count_turns(USER) == 2


async def test_a_public_answer_stores_and_injects_nothing_even_for_a_member_remembered(
    store, memory, chat, fake_llm
) -> None:
    fake_llm.queue_reply("Noted.")
    await say(chat, "I like jazz.")
    fake_llm.queue_reply("Hello, channel.")
    await say(chat, "My secret is 4242.", public=True)
    assert fake_llm.last_request["messages"] == [
        {"role": "system", "content": PERSONA},
        {"role": "user", "content": "My secret is 4242."},
    ]
    assert await store.count_turns(USER) == 2


async def test_session_ends_after_the_idle_gap_and_is_queued(store, chat, fake_llm, clock) -> None:
    fake_llm.set_responder(lambda body: "ok")
    await say(chat, "first")
    first = await store.open_chat_for_user(USER)
    clock.now += 29 * 60
    assert await chat.close_idle_sessions() == 0
    await say(chat, "second")
    assert (await store.open_chat_for_user(USER)).chat_id == first.chat_id

    clock.now += 31 * 60
    assert await chat.close_idle_sessions() == 1
    assert await store.open_chat_for_user(USER) is None
    ended = await store.get_chat(first.chat_id)
    assert ended.ended_at == ended.last_message_at
    assert await store.job_state(POST_CHAT_JOB, first.chat_id) == "pending"
    assert await chat.close_idle_sessions() == 0


async def test_a_message_after_the_gap_starts_a_new_session(store, chat, fake_llm, clock) -> None:
    fake_llm.set_responder(lambda body: "ok")
    await say(chat, "first")
    first = await store.open_chat_for_user(USER)
    clock.now += 31 * 60
    await say(chat, "hello again")
    second = await store.open_chat_for_user(USER)
    assert second.chat_id != first.chat_id
    assert (await store.get_chat(first.chat_id)).ended_at is not None
    assert await store.job_state(POST_CHAT_JOB, first.chat_id) == "pending"
    assert [t.content for t in await store.chat_turns(second.chat_id)] == ["hello again", "ok"]
    conversation = [m for m in fake_llm.last_request["messages"] if m["role"] != "system"]
    assert conversation == [{"role": "user", "content": "hello again"}]


async def test_end_session(store, chat, fake_llm) -> None:
    assert not await chat.end_session(USER)
    fake_llm.queue_reply("ok")
    await say(chat, "bye")
    assert await chat.end_session(USER)
    assert await store.open_chat_for_user(USER) is None


class BreaksMidStream:
    async def stream(self, messages: list[dict[str, Any]], **kwargs: Any) -> AsyncIterator[str]:
        yield "Half an ans"
        raise LLMUnavailable("stream broke off")


async def test_a_failure_mid_stream_keeps_the_question_and_no_partial_answer(store, memory, clock) -> None:
    await store.set_consent(USER, True, T0)
    service = ChatService(store, memory, BreaksMidStream(), idle_minutes=30, persona=PERSONA, clock=clock)  # type: ignore[arg-type]
    received = []
    with pytest.raises(LLMUnavailable):
        async for delta in service.reply(USER, GUILD, "Tell me a story."):
            received.append(delta)
    assert received == ["Half an ans"]
    session = await store.open_chat_for_user(USER)
    assert [(t.role, t.content) for t in await store.chat_turns(session.chat_id)] == [("user", "Tell me a story.")]


async def test_a_consumer_that_stops_early_stores_no_partial_answer(store, chat, fake_llm) -> None:
    fake_llm.queue_reply("A long answer that the consumer will not read to the end.")
    async with contextlib.aclosing(chat.reply(USER, GUILD, "Go on.")) as stream:
        async for _ in stream:
            break
    session = await store.open_chat_for_user(USER)
    assert [t.role for t in await store.chat_turns(session.chat_id)] == ["user"]


async def test_forget_everything_while_an_answer_streams_stores_nothing_of_it(store, chat, memory, fake_llm) -> None:
    fake_llm.queue_reply("Your zqxchatsecret is safe with me, I will remember it for a long time.")
    stream = chat.reply(USER, GUILD, "Remember my zqxchatsecret please.")
    first = await anext(stream)  # the member's line is stored; the answer is on its way
    result = await memory.forget_everything(USER)
    rest = "".join([delta async for delta in stream])
    assert (first + rest).startswith("Your zqxchatsecret")
    assert result.turns == 1
    assert await store.count_turns(USER) == 0, "the answer finished after the forget was stored anyway"
    assert await store.open_chat_for_user(USER) is None


async def test_memory_tools_are_asked_again_at_most_twice_then_the_model_must_answer(
    store: SqliteStore, memory: MemoryService, llm: LLMClient, clock: FakeClock, fake_llm
) -> None:
    await store.set_consent(USER, True, T0)
    chat = ChatService(store, memory, llm, idle_minutes=30, persona=PERSONA, clock=clock, own_words=OwnWords(memory))
    fake_llm.queue_tool_calls([("remember", {"fact": "I play the oboe"})])
    fake_llm.queue_tool_calls([("remember", {"fact": "I sing in a choir"})], say="And ")
    fake_llm.queue_reply("noted both.")

    assert await say(chat, "Remember that I play the oboe and sing in a choir.") == "And noted both."

    first, second, last = fake_llm.requests
    assert "tool_choice" not in first and "tool_choice" not in second
    assert last["tool_choice"] == "none", "after two rounds the model may only answer"
    assert [m["role"] for m in last["messages"] if m["role"] in ("assistant", "tool")] == [
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    assert sorted(f.text for f in await store.list_facts(USER)) == ["I play the oboe", "I sing in a choir"]
    session = await store.open_chat_for_user(USER)
    assert [t.content for t in await store.chat_turns(session.chat_id)][-1] == "And noted both."
