"""Live recall against the request Agora documents for ``llm.vendor: "custom"`` (spec §4.11): every message with
its short-term-memory fields, the top level with ``turn_id``, ``timestamp``, ``interruptable``, ``model`` and
``context``. The upstream refuses unknown fields at both levels, as api.openai.com does. The stored transcript is
the agent's: greeting, silence reminders and failure messages as the agent spoke them, a reply the member cut
short as what they heard, injected instructions not at all."""

from __future__ import annotations

import json
from typing import Any

import httpx

from bot.agora.custom_llm import CHAT_COMPLETIONS_FIELDS, MESSAGE_FIELDS
from bot.web.llm_route import LLM_ROUTE
from standins.harness import CallWorld
from standins.llm_server import FakeLLM
from tests.agora.test_emulator import BASIC

ALICE = 1111


def agent_transcript(world: CallWorld, agent_id: str) -> list[tuple[str, str]]:
    """What the agent's short-term memory says was said, as the bot decided to keep it: every spoken line, no
    instruction injected through the API, nothing empty."""
    return [
        (m.role, m.content)
        for m in world.emu.agent(agent_id).conversation
        if m.source != "command" and m.content.strip()
    ]


def assert_openai_only(requests: list[dict[str, Any]]) -> None:
    for request in requests:
        assert set(request) <= CHAT_COMPLETIONS_FIELDS, set(request) - CHAT_COMPLETIONS_FIELDS
        for message in request["messages"]:
            assert set(message) <= set(MESSAGE_FIELDS), message


async def think(world: CallWorld, agent_id: str, text: str) -> None:
    """An operator injects an instruction through Agora's think API."""
    async with httpx.AsyncClient(base_url=world.emu.project_url, headers={"Authorization": BASIC}) as http:
        response = await http.post(f"/agents/{agent_id}/think", json={"text": text})
    assert response.status_code == 200, response.text


async def test_a_whole_call_in_agoras_custom_shape_is_answered_and_stored_as_the_agent_holds_it(
    world: CallWorld, fake_llm: FakeLLM
) -> None:
    world.emu.llm_context = {"presence": {"member": "online"}}
    call_id, agent_id = await world.start_member_call(ALICE)
    greeting = world.emu.agent(agent_id).conversation[0].content

    fake_llm.queue_reply("Nice to meet you, Noor! Chemistry is a great subject.")
    assert (await world.emu.user_says(agent_id, "I'm Noor, I teach chemistry.")).outcome == "ok"
    world.emu.silence_reminder(agent_id, "Are you still there?")
    await think(world, agent_id, "User level: VIP")
    fake_llm.queue_reply("Welcome back.")
    typed = await world.emu.user_says(agent_id, "Sorry, I was away.", source="message")
    assert typed.outcome == "ok"
    assert typed.request["messages"][-2]["metadata"]["source"] == "command", "the agent sent its injection"

    fake_llm.stream_chunk_size = 6
    story = "Once upon a time a chemist found a glowing crystal in her lab, and it began to sing."
    fake_llm.queue_reply(story)
    cut = await world.emu.user_says(agent_id, "Tell me a story.", interrupt_after=4)
    assert cut.outcome == "interrupted"
    heard = world.emu.agent(agent_id).conversation[-1].content
    assert heard and story.startswith(heard) and len(heard) < len(cut.reply), "it streamed faster than it was played"
    assert await world.calls.checkpoint(call_id), "a checkpoint between the barge-in and the next turn"

    fake_llm.queue_reply("No problem.")
    assert (await world.emu.user_says(agent_id, "Actually, never mind.")).outcome == "ok"

    fake_llm.break_stream_after = 1
    fake_llm.queue_reply("It is sunny today, with a light breeze.")
    broken = await world.emu.user_says(agent_id, "What's the weather?")
    assert broken.outcome == "failed" and "error" in (broken.error or "")
    fake_llm.break_stream_after = None
    fake_llm.queue_reply("Bye, Noor!")
    assert (await world.emu.user_says(agent_id, "Okay, bye.")).outcome == "ok"

    assert_openai_only(fake_llm.requests)
    assert all(r["model"] == "fake-model" for r in fake_llm.requests)
    assert len(fake_llm.requests) == 6, "one upstream request per turn: nothing was refused and retried"

    assert world.live is not None
    await world.live.wait_idle()
    stored = await world.call_lines(call_id)
    assert stored == agent_transcript(world, agent_id), "the transcript is the agent's, each line once, in order"
    failure = world.emu.agent(agent_id).llm["failure_message"]
    assert stored == [
        ("assistant", greeting),
        ("user", "I'm Noor, I teach chemistry."),
        ("assistant", "Nice to meet you, Noor! Chemistry is a great subject."),
        ("assistant", "Are you still there?"),
        ("user", "Sorry, I was away."),
        ("assistant", "Welcome back."),
        ("user", "Tell me a story."),
        ("assistant", heard),
        ("user", "Actually, never mind."),
        ("assistant", "No problem."),
        ("user", "What's the weather?"),
        ("assistant", failure),
        ("user", "Okay, bye."),
        ("assistant", "Bye, Noor!"),
    ]

    marked = [t.content for t in await world.store.call_turns(call_id) if t.interrupted]
    assert marked == [heard], "the cut reply is marked interrupted, and only it"

    await world.calls.hang_up(ALICE)
    await world.emu.wait_webhooks_idle()
    assert any(n["eventType"] == 103 for n in world.emu.delivered)
    assert await world.call_lines(call_id) == stored, "the last history and webhook 103 agree with the live lines"
    exported = (await world.memory.export(ALICE))["calls"]
    lines = [line for call in exported for line in call["turns"]]
    assert [line["content"] for line in lines if line.get("interrupted")] == [heard]


async def test_a_reply_cut_short_as_the_call_ends_is_kept_as_heard(world: CallWorld, fake_llm: FakeLLM) -> None:
    """No later turn tells the route what was heard: the agent's final history (webhook 103) does."""
    call_id, agent_id = await world.start_member_call(ALICE)
    fake_llm.stream_chunk_size = 5
    fake_llm.queue_reply("Let me tell you everything I know about volcanoes, starting with magma.")
    turn = await world.emu.user_says(agent_id, "Tell me about volcanoes.", interrupt_after=5, heard="Let me tell")
    assert turn.outcome == "interrupted"
    assert world.live is not None
    await world.live.wait_idle()
    relayed = (await world.call_lines(call_id))[-1][1]
    assert relayed.startswith("Let me tell") and len(relayed) > len("Let me tell"), "stored as relayed, for now"

    await world.calls.hang_up(ALICE)
    await world.emu.wait_webhooks_idle()
    assert await world.call_lines(call_id) == agent_transcript(world, agent_id)
    last = (await world.store.call_turns(call_id))[-1]
    assert (last.role, last.content, last.interrupted) == ("assistant", "Let me tell", True)


async def test_barge_ins_over_several_turns_never_duplicate_the_window(world: CallWorld, fake_llm: FakeLLM) -> None:
    """Interrupted replies, checkpoints between them and a window that has slid past the call's start: the stored
    lines stay the agent's, with no segment written twice."""
    call_id, agent_id = await world.start_member_call(ALICE)
    fake_llm.stream_chunk_size = 4
    for n in range(8):
        fake_llm.queue_reply(f"Answer {n} goes on for a while so that it can be cut short by the member.")
        turn = await world.emu.user_says(agent_id, f"Question {n}?", interrupt_after=3 if n % 2 else None)
        assert turn.outcome == ("interrupted" if n % 2 else "ok")
        if n % 3 == 2:
            assert await world.calls.checkpoint(call_id)
    assert world.live is not None
    await world.live.wait_idle()
    fake_llm.queue_reply("Done.")
    assert (await world.emu.user_says(agent_id, "Thanks.")).outcome == "ok"
    await world.live.wait_idle()
    expected = agent_transcript(world, agent_id)
    assert len(expected) == 1 + 2 * 9
    assert await world.call_lines(call_id) == expected


async def test_an_error_mid_stream_ends_with_done_and_keeps_no_broken_reply(
    world: CallWorld, fake_llm: FakeLLM
) -> None:
    call_id, agent_id = await world.start_member_call(ALICE)
    key = world.emu.agent(agent_id).request["properties"]["llm"]["api_key"]
    fake_llm.stream_chunk_size = 4
    fake_llm.break_stream_after = 2
    fake_llm.queue_reply("This reply will break off halfway through.")
    body = {
        "messages": [
            {
                "role": "user",
                "content": "Say something.",
                "turn_id": 1,
                "timestamp": 1,
                "metadata": {"source": "asr", "user": "42"},
            }
        ],
        "stream": True,
        "turn_id": 1,
        "timestamp": 2,
        "interruptable": True,
        "model": "",
    }
    async with httpx.AsyncClient() as http:
        response = await http.post(f"{world.web.url}{LLM_ROUTE}", json=body, headers={"Authorization": f"Bearer {key}"})
    events = [e.removeprefix("data: ") for e in response.text.split("\n\n") if e]
    assert response.status_code == 200
    assert json.loads(events[-2])["error"]["code"] == "upstream_interrupted"
    assert events[-1] == "[DONE]", "Agora's samples follow the error event with data: [DONE]"
    assert world.live is not None
    await world.live.wait_idle()
    assert await world.call_lines(call_id) == [("user", "Say something.")]


async def test_an_injected_instruction_is_answered_but_not_stored_as_the_members_words(
    world: CallWorld, fake_llm: FakeLLM
) -> None:
    """A request that answers an instruction injected through the API (not the member) stores no user line, and
    the history's injection is no line of the transcript either."""
    call_id, agent_id = await world.start_member_call(ALICE)
    fake_llm.queue_reply("Hello there.")
    await world.emu.user_says(agent_id, "Hello.")
    key = world.emu.agent(agent_id).request["properties"]["llm"]["api_key"]
    await think(world, agent_id, "The member just bought a premium plan.")
    messages = [m.as_llm_message(custom=True) for m in world.emu.agent(agent_id).conversation]
    fake_llm.queue_reply("Congratulations on your premium plan!")
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{world.web.url}{LLM_ROUTE}",
            json={"messages": messages, "stream": True, "turn_id": 3, "timestamp": 3, "interruptable": True},
            headers={"Authorization": f"Bearer {key}"},
        )
    assert response.status_code == 200 and "premium" in response.text
    assert "[think API injected]" in fake_llm.last_request["messages"][-1]["content"], "the model is told"
    assert world.live is not None
    await world.live.wait_idle()
    stored = await world.call_lines(call_id)
    assert not any("premium plan." in text and role == "user" for role, text in stored)
    assert stored[-1] == ("assistant", "Congratulations on your premium plan!")
    assert await world.calls.checkpoint(call_id)
    assert await world.call_lines(call_id) == stored, "the checkpoint's history skips the injection too"
