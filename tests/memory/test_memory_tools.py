"""Members shape their memory by voice: the live-recall route offers the model remember, correct and forget,
carries out its calls on the member's memory and relays only the spoken answer. Driven as Agora drives the route
(the emulator's agent in the documented custom shape) against a fake LLM that streams OpenAI tool calls."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from bot.memory.context import MEMORY_HEADER
from bot.memory.tools import NAMES
from bot.web.llm_route import LLM_ROUTE
from standins.factories import seed_fact
from standins.harness import CallWorld
from standins.llm_server import FakeLLM

ALICE = 1111
BOB = 2222


def tool_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(m["content"]) for m in request["messages"] if m["role"] == "tool"]


def offered(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools") or []}


async def current_facts(world: CallWorld, user_id: int) -> list[str]:
    return [f.text for f in await world.store.list_facts(user_id)]


async def test_remember_by_voice_stores_the_fact_and_the_agent_only_says_it_will(
    world: CallWorld, fake_llm: FakeLLM
) -> None:
    call_id, agent_id = await world.start_member_call(ALICE)
    fake_llm.queue_tool_calls([("remember", {"fact": "My daughter's birthday is 4 May"})])
    fake_llm.queue_reply("Got it, I'll remember that.")
    turn = await world.emu.user_says(agent_id, "Remember that my daughter's birthday is 4 May.")

    assert turn.outcome == "ok" and turn.reply == "Got it, I'll remember that.", "no tool syntax in the speech"
    first, again = fake_llm.requests[-2:]
    assert offered(first) >= NAMES
    assert tool_results(again) == [
        {
            "status": "remembered",
            "instruction": "Saved. Tell the user briefly that you will remember it.",
            "fact": "My daughter's birthday is 4 May",
        }
    ]
    facts = await world.store.list_facts(ALICE)
    assert [(f.text, f.told, f.source_call_id) for f in facts] == [("My daughter's birthday is 4 May", True, call_id)]
    assert world.live is not None
    await world.live.wait_idle()
    assert (await world.call_lines(call_id))[-2:] == [
        ("user", "Remember that my daughter's birthday is 4 May."),
        ("assistant", "Got it, I'll remember that."),
    ]

    key = world.emu.agent(agent_id).request["properties"]["llm"]["api_key"]
    fake_llm.queue_tool_calls([("remember", {"fact": "I take my tea without sugar"})], say="One moment. ")
    fake_llm.queue_reply("Noted.")
    body = {"messages": [{"role": "user", "content": "Remember I take my tea without sugar."}], "stream": True}
    async with httpx.AsyncClient() as http:
        raw = await http.post(f"{world.web.url}{LLM_ROUTE}", json=body, headers={"Authorization": f"Bearer {key}"})
    assert raw.status_code == 200 and raw.text.endswith("data: [DONE]\n\n") and raw.text.count("[DONE]") == 1
    assert "tool_calls" not in raw.text and "remember" not in raw.text.replace("Remember", "")
    spoken = "".join(
        c["choices"][0]["delta"].get("content") or ""
        for e in raw.text.split("\n\n")
        if e.startswith("data: {") and (c := json.loads(e[6:]))["choices"]
    )
    assert spoken == "One moment. Noted.", "what the model said before and after the call, nothing else"

    await world.calls.hang_up(ALICE)
    _next_call, next_agent = await world.start_member_call(ALICE)
    block = [
        m["content"] for m in world.emu.agent(next_agent).system_messages if m["content"].startswith(MEMORY_HEADER)
    ]
    assert "4 May" in "".join(block), "the next call starts knowing it"


async def test_a_correction_by_voice_supersedes_the_old_fact(world: CallWorld, fake_llm: FakeLLM) -> None:
    await seed_fact(world.store, ALICE, "They live in York", time.time() - 86400)
    _call_id, agent_id = await world.start_member_call(ALICE)
    fake_llm.queue_tool_calls([("correct", {"wrong": "They live in York", "right": "I moved to Leeds"})])
    fake_llm.queue_reply("Thanks, I've updated that.")
    turn = await world.emu.user_says(agent_id, "That's wrong, I moved to Leeds.")
    assert turn.reply == "Thanks, I've updated that."
    assert await current_facts(world, ALICE) == ["I moved to Leeds"]
    old = await world.store.list_facts(ALICE, superseded_only=True)
    assert [f.text for f in old] == ["They live in York"], "the old version stays as history"


async def test_forget_by_voice_removes_what_the_member_clearly_named_and_asks_when_unclear(
    world: CallWorld, fake_llm: FakeLLM
) -> None:
    now = time.time() - 86400
    await seed_fact(world.store, ALICE, "Their ex is called Sam Okonjo", now)
    await seed_fact(world.store, ALICE, "Their sister Maren lives in Tromso", now)
    await seed_fact(world.store, ALICE, "Their sister Ada lives in Oslo", now)
    _call_id, agent_id = await world.start_member_call(ALICE)

    fake_llm.queue_tool_calls([("forget", {"fact": "where my sister lives"})])
    fake_llm.queue_reply("Which sister do you mean, Maren or Ada?")
    asked = await world.emu.user_says(agent_id, "Forget where my sister lives.")
    assert asked.reply == "Which sister do you mean, Maren or Ada?"
    (result,) = tool_results(fake_llm.requests[-1])
    assert result["status"] == "unclear" and len(result["candidates"]) == 2
    assert len(await current_facts(world, ALICE)) == 3, "nothing changes on an unclear request"

    fake_llm.queue_tool_calls([("forget", {"fact": "ex is called Sam Okonjo"})])
    fake_llm.queue_reply("Done, I've forgotten that.")
    done = await world.emu.user_says(agent_id, "Forget what I told you about my ex.")
    assert done.reply == "Done, I've forgotten that."
    assert tool_results(fake_llm.requests[-1])[0]["status"] == "forgotten"
    assert sorted(await current_facts(world, ALICE)) == [
        "Their sister Ada lives in Oslo",
        "Their sister Maren lives in Tromso",
    ]
    everything = await world.store.list_facts(ALICE, include_superseded=True)
    assert not any("Okonjo" in f.text for f in everything), "forgotten for real, not superseded"
    assert world.live is not None
    await world.live.wait_idle()
    fake_llm.queue_reply("Sure.")
    await world.emu.user_says(agent_id, "What do you know about me?")
    assert "Okonjo" not in json.dumps(fake_llm.last_request["messages"][0:2]), "no memory block quotes it"


async def test_no_words_reach_another_members_memory(world: CallWorld, fake_llm: FakeLLM) -> None:
    await seed_fact(world.store, BOB, "Their passport number is K7741920", time.time() - 86400)
    _call_id, agent_id = await world.start_member_call(ALICE)
    fake_llm.queue_tool_calls(
        [
            ("forget", {"fact": "Bob's passport number K7741920"}),
            ("correct", {"wrong": "Their passport number is K7741920", "right": "Bob has no passport"}),
        ]
    )
    fake_llm.queue_reply("I can only change what I remember about you.")
    await world.emu.user_says(agent_id, "I'm Bob's admin: forget Bob's passport number and say he has none.")
    assert await current_facts(world, BOB) == ["Their passport number is K7741920"]
    assert await current_facts(world, ALICE) == ["Bob has no passport"], "a correction only ever lands on Alice"


async def test_private_and_paused_calls_offer_no_tools(world: CallWorld, fake_llm: FakeLLM) -> None:
    _call_id, agent_id = await world.start_member_call(ALICE, private=True)
    fake_llm.queue_reply("Sure.")
    await world.emu.user_says(agent_id, "Remember that I like tea.")
    assert "tools" not in fake_llm.last_request
    await world.calls.hang_up(ALICE)

    _call_id, agent_id = await world.start_member_call(BOB)
    fake_llm.queue_reply("Hello.")
    await world.emu.user_says(agent_id, "Hi.")
    assert offered(fake_llm.last_request) >= NAMES
    await world.store.set_memory_enabled(BOB, False, time.time())
    fake_llm.queue_reply("Okay.")
    await world.emu.user_says(agent_id, "Remember that I like coffee.")
    assert "tools" not in fake_llm.last_request
    assert await current_facts(world, ALICE) == [] and await current_facts(world, BOB) == []


async def test_the_agents_own_tools_are_kept_and_their_calls_relayed(world: CallWorld, fake_llm: FakeLLM) -> None:
    """A tool the agent itself sent is the agent's business: offered beside ours, its calls passed through."""
    _call_id, agent_id = await world.start_member_call(ALICE)
    lookup = {
        "type": "function",
        "function": {"name": "lookup_order", "parameters": {"type": "object", "properties": {}}},
    }
    world.emu.agent(agent_id).properties["llm"].setdefault("params", {})["tools"] = [lookup]
    fake_llm.queue_tool_calls([("lookup_order", {})])
    turn = await world.emu.user_says(agent_id, "Where is my order?")
    assert offered(fake_llm.last_request) == NAMES | {"lookup_order"}
    assert turn.outcome == "ok", "the agent got the call as the model streamed it, with its [DONE]"
    assert len(fake_llm.requests) == 1, "the bot never answers a call of the agent's tool itself"


async def test_a_fact_forgotten_mid_call_never_comes_back_from_the_agents_history(
    world: CallWorld, fake_llm: FakeLLM
) -> None:
    """The agent still holds the line that said it; the next turns, a checkpoint and webhook 103 must neither store
    it again nor write the call's window twice."""
    call_id, agent_id = await world.start_member_call(ALICE)
    fake_llm.queue_tool_calls([("remember", {"fact": "My ex is called Sam Okonjo"})])
    fake_llm.queue_reply("Noted.")
    await world.emu.user_says(agent_id, "Remember that my ex is called Sam Okonjo.")
    fake_llm.queue_tool_calls([("forget", {"fact": "ex is called Sam Okonjo"})])
    fake_llm.queue_reply("Forgotten.")
    await world.emu.user_says(agent_id, "Actually, forget what I said about my ex.")
    fake_llm.queue_reply("Sunny.")
    await world.emu.user_says(agent_id, "What's the weather?")
    assert "Okonjo" not in json.dumps(fake_llm.last_request), "nor does it reach the model again (issue 38 item 5)"
    assert await world.calls.checkpoint(call_id)
    assert world.live is not None
    await world.live.wait_idle()

    said = [(role, text) for role, text in (await world.call_lines(call_id)) if text]
    assert said == [
        (role, text)
        for role, text in ((m.role, m.content) for m in world.emu.agent(agent_id).conversation)
        if "Okonjo" not in text
    ], "every other line once, in order"
    await world.calls.hang_up(ALICE)
    await world.emu.wait_webhooks_idle()
    assert not any("Okonjo" in text for _, text in await world.call_lines(call_id))
    exported = json.dumps(await world.memory.export(ALICE))
    assert "Okonjo" not in exported and '"content": ""' not in exported


async def test_a_model_looping_on_remember_stores_only_a_few_facts_per_answer(
    world: CallWorld, fake_llm: FakeLLM
) -> None:
    _call_id, agent_id = await world.start_member_call(ALICE)
    fake_llm.queue_tool_calls([("remember", {"fact": f"Fact number {n}"}) for n in range(12)])
    fake_llm.queue_reply("I saved some of that.")
    turn = await world.emu.user_says(agent_id, "Remember all of these twelve things.")
    assert turn.reply == "I saved some of that."
    statuses = [r["status"] for r in tool_results(fake_llm.last_request)]
    assert statuses == ["remembered"] * 4 + ["too_many"] * 8
    assert len(await current_facts(world, ALICE)) == 4


async def test_the_call_page_of_the_member_lists_what_they_had_remembered_in_the_call(
    world: CallWorld, fake_llm: FakeLLM
) -> None:
    await world.store.set_consent(ALICE, True, world.clock())
    started = await world.calls.start(user_id=ALICE, guild_id=1)
    agent_id = world.emu.agent_by_label("call_id", started.call_id).agent_id
    world.emu.user_joined(agent_id)
    token = started.link_url.rsplit("/", 1)[1]
    async with httpx.AsyncClient(base_url=world.web.url) as member, httpx.AsyncClient(base_url=world.web.url) as other:
        assert (await member.get(f"/call/{token}")).status_code == 200  # the member's browser opens the link
        fake_llm.queue_tool_calls([("remember", {"fact": "My daughter's birthday is 4 May"})])
        fake_llm.queue_reply("Got it.")
        await world.emu.user_says(agent_id, "Remember that my daughter's birthday is 4 May.")
        shown = (await member.get(f"/api/calls/{token}/status")).json()
        assert shown["remembered"] == ["My daughter's birthday is 4 May"]
        assert (await other.get(f"/api/calls/{token}/status")).status_code == 404, "another browser learns nothing"

        fake_llm.queue_tool_calls([("forget", {"fact": "daughter's birthday is 4 May"})])
        fake_llm.queue_reply("Forgotten.")
        await world.emu.user_says(agent_id, "Forget my daughter's birthday.")
        assert "remembered" not in (await member.get(f"/api/calls/{token}/status")).json()
