"""Tools that are not the bot's stay the engine's (issue 38 item 4; specs/agora-convoai.md §13.1): Agora's engine
sends ``tools`` to a custom LLM for the agent's MCP servers and runs the ``tool_calls`` streamed back. The bot claims
only the calls of the tools it added itself; an answer that calls both reaches the engine as a tool-call answer of
its own tools, and the engine's follow-up request shows the model its whole answer again. Driven as Agora's engine
drives the route: requests in the custom shape of §4.11, carrying ``tools``, then the follow-up with the results."""

from __future__ import annotations

import json
from typing import Any

import httpx

from bot.web.llm_route import LLM_ROUTE
from standins.harness import CallWorld
from standins.llm_server import FakeLLM

ALICE = 1111


def mcp_tool(name: str, **properties: str) -> dict[str, Any]:
    """A tool of an MCP server as the engine offers it (how the engine names MCP tools is not documented)."""
    schema = {"type": "object", "properties": {k: {"type": "string", "description": v} for k, v in properties.items()}}
    return {"type": "function", "function": {"name": name, "description": f"MCP: {name}", "parameters": schema}}


class Engine:
    """Agora's engine in front of the bot's route for one call: its short-term memory and the requests it sends."""

    def __init__(self, world: CallWorld, agent_id: str, tools: list[dict[str, Any]]) -> None:
        self.url = f"{world.web.url}{LLM_ROUTE}"
        self.key = world.emu.agent(agent_id).request["properties"]["llm"]["api_key"]
        self.tools = tools
        self.turn = 1
        self.memory: list[dict[str, Any]] = [
            {"role": "assistant", "content": "Hi!", "turn_id": 1, "timestamp": 1000, "metadata": {"source": "greeting"}}
        ]

    def user_says(self, text: str) -> None:
        self.turn += 1
        self.memory.append(
            {
                "role": "user",
                "content": text,
                "turn_id": self.turn,
                "timestamp": 1000 * self.turn,
                "metadata": {"source": "asr", "user": "4242"},
            }
        )

    async def ask(self) -> list[dict[str, Any]]:
        """One request, as §4.11 shows it with ``tools``; the chunks of the answer (which must end in [DONE])."""
        body = {
            "messages": self.memory,
            "stream": True,
            "tools": self.tools,
            "turn_id": self.turn,
            "timestamp": 1000 * self.turn + 1,
            "interruptable": True,
            "model": "",
        }
        async with httpx.AsyncClient(timeout=10) as http:
            response = await http.post(self.url, json=body, headers={"Authorization": f"Bearer {self.key}"})
        assert response.status_code == 200, response.text
        events = [e for e in response.text.split("\n\n") if e]
        assert events[-1] == "data: [DONE]" and events.count("data: [DONE]") == 1, response.text
        return [json.loads(e.removeprefix("data: ")) for e in events[:-1]]


def spoken(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def streamed_calls(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool calls as a strict OpenAI client assembles them from the stream: by ``index``, from 0 on."""
    calls: list[dict[str, Any]] = []
    for chunk in chunks:
        for part in chunk["choices"][0]["delta"].get("tool_calls") or []:
            if part["index"] == len(calls):
                calls.append({"id": part["id"], "name": part["function"]["name"], "arguments": ""})
            calls[part["index"]]["arguments"] += part["function"].get("arguments") or ""
    return calls


def finish_reasons(chunks: list[dict[str, Any]]) -> list[str]:
    return [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]


async def test_an_mcp_tool_named_remember_reaches_the_engine_untouched(world: CallWorld, fake_llm: FakeLLM) -> None:
    _call_id, agent_id = await world.start_member_call(ALICE)
    notes = mcp_tool("remember", note="A note for the team's shared notebook.")
    engine = Engine(world, agent_id, [notes])
    engine.user_says("Put 'order more coffee' in the team notebook.")
    fake_llm.queue_tool_calls([("remember", {"note": "order more coffee"})])
    chunks = await engine.ask()

    offered = fake_llm.last_request["tools"]
    assert offered[0] == notes and [t["function"]["name"] for t in offered] == ["remember", "correct", "forget"]
    assert streamed_calls(chunks) == [
        {"id": "call_1_0", "name": "remember", "arguments": '{"note": "order more coffee"}'}
    ], "the engine gets the call of its tool as the model made it"
    assert finish_reasons(chunks) == ["tool_calls"]
    assert len(fake_llm.requests) == 1, "the bot did not answer the engine's call itself"
    assert await world.store.list_facts(ALICE, include_superseded=True) == []


async def test_a_mixed_answer_lets_the_engine_run_its_part_and_the_model_sees_all_it_did(
    world: CallWorld, fake_llm: FakeLLM
) -> None:
    call_id, agent_id = await world.start_member_call(ALICE)
    lookup = mcp_tool("lookup_order", order="The order number.")
    engine = Engine(world, agent_id, [lookup])
    engine.user_says("Where is order A17? And remember that A17 is my birthday present for Ada.")
    fake_llm.queue_tool_calls(
        [("remember", {"fact": "Order A17 is a birthday present for Ada"}), ("lookup_order", {"order": "A17"})],
        say="Let me check.",
    )
    chunks = await engine.ask()

    assert spoken(chunks) == "Let me check."
    assert streamed_calls(chunks) == [{"id": "call_1_1", "name": "lookup_order", "arguments": '{"order": "A17"}'}]
    assert finish_reasons(chunks) == ["tool_calls"], "the engine knows the answer is a call of its tool"
    assert "remember" not in json.dumps(chunks), "the bot's own call never reaches the engine"
    facts = await world.store.list_facts(ALICE)
    assert [(f.text, f.told) for f in facts] == [("Order A17 is a birthday present for Ada", True)]
    assert len(fake_llm.requests) == 1, "the model is asked again by the engine, with its tool's result"

    # The engine ran its tool and asks again (Agora's reference server sends the tool message's name too).
    call = streamed_calls(chunks)[0]
    engine.memory += [
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            {"id": call["id"], "type": "function", "function": {"name": "lookup_order", "arguments": call["arguments"]}}
        ]},
        {"role": "tool", "tool_call_id": call["id"], "name": "lookup_order", "content": '{"status": "shipped"}'},
    ]  # fmt: skip
    fake_llm.queue_reply("It has shipped, and I'll remember it's for Ada.")
    again = await engine.ask()

    assert spoken(again) == "It has shipped, and I'll remember it's for Ada." and finish_reasons(again) == ["stop"]
    sent = fake_llm.last_request["messages"]
    answer = next(m for m in sent if m["role"] == "assistant" and m.get("tool_calls"))
    assert [c["function"]["name"] for c in answer["tool_calls"]] == ["lookup_order", "remember"]
    results = [m for m in sent if m["role"] == "tool"]
    assert [r["tool_call_id"] for r in results] == [call["id"], "call_1_0"]
    assert json.loads(results[1]["content"])["status"] == "remembered"
    assert all(set(m) <= {"role", "content", "tool_call_id"} for m in results), "no name on a tool message"

    engine.memory.append({"role": "assistant", "content": spoken(again), "turn_id": engine.turn})
    engine.user_says("Thanks!")
    fake_llm.queue_reply("You're welcome.")
    await engine.ask()
    later = fake_llm.last_request["messages"]
    assert [m["tool_call_id"] for m in later if m["role"] == "tool"] == [call["id"], "call_1_0"], "still whole"
    assert world.live is not None
    await world.live.wait_idle()
    assert (await world.call_lines(call_id))[-1] == ("assistant", "You're welcome.")

    await world.memory.forget_fact(ALICE, facts[0].fact_id)  # /forget item: the fact and the lines naming Ada
    engine.memory.append({"role": "assistant", "content": "You're welcome.", "turn_id": engine.turn})
    engine.user_says("Bye.")
    fake_llm.queue_reply("Bye!")
    await engine.ask()
    assert "Ada" not in json.dumps(fake_llm.last_request), "nor does the bot's tool result bring it back"


async def test_a_model_calling_the_memory_tools_again_after_the_engine_ran_its_part_stays_bounded(
    world: CallWorld, fake_llm: FakeLLM
) -> None:
    """An answer the engine continues keeps counting its rounds: the bound holds across the engine's turns."""
    _call_id, agent_id = await world.start_member_call(ALICE)
    engine = Engine(world, agent_id, [mcp_tool("lookup_order", order="The order number.")])
    engine.user_says("Check A17 and remember it.")
    fake_llm.queue_tool_calls([("lookup_order", {"order": "A17"}), ("remember", {"fact": "Order A17 is mine"})])
    call = streamed_calls(await engine.ask())[0]
    engine.memory += [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call["id"], "type": "function", "function": {"name": "lookup_order", "arguments": call["arguments"]}}
        ]},
        {"role": "tool", "tool_call_id": call["id"], "content": '{"status": "shipped"}'},
    ]  # fmt: skip
    for n in range(6):
        fake_llm.queue_tool_calls([("remember", {"fact": f"Extra fact {n}"})], obey_tool_choice=False)
    chunks = await engine.ask()
    assert streamed_calls(chunks) == [] and finish_reasons(chunks) == ["stop"]
    assert len(fake_llm.requests) == 3, "one more round after the engine's, then no more"
    assert len(await world.store.list_facts(ALICE)) == 2
