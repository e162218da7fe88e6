"""The emulator refuses what Agora's docs do not list and plays the engine's part with MCP tools: MiniMax voices and
Deepgram codes the spec documents (§13.2, §4.1), MCP server names as join.mdx allows them (§13.1), the tools of an
agent's MCP servers offered to its custom LLM and run by the engine, and an answer of tool calls alone counted as
one (nothing to speak)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from standins.agora_emulator import AgoraEmulator, EngineTool, make_join_properties
from tests.agora.conftest import BASIC
from tests.agora.test_emulator import assert_error
from tests.agora.test_emulator_custom_llm import ScriptedLLM, chunk, custom_agent

DONE = b"data: [DONE]\n\n"
MCP_ENDPOINT = "http://127.0.0.1:9/mcp"
WEATHER = EngineTool(
    "weather",
    lambda arguments: json.dumps({"city": arguments.get("city"), "sky": "sunny"}),
    description="The weather in a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


@pytest.fixture
async def scripted() -> AsyncIterator[ScriptedLLM]:
    server = ScriptedLLM()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def post_join(emulator: AgoraEmulator, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=emulator.project_url, headers={"Authorization": BASIC}) as http:
        return await http.post("/join", json=body)


def preset_join(emulator: AgoraEmulator, preset: str, **overrides: Any) -> dict[str, Any]:
    return {"name": "strict", "preset": preset, "properties": make_join_properties(emulator, **overrides)}


# ---- MiniMax voices and Deepgram codes ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("voice", "status"),
    [
        ("English_captivating_female1", 200),
        ("hindi_female_2_v1", 200),
        ("Thai_female_1_sample1", 200),
        ("Spanish_SereneWoman", 200),
        ("English_Graceful_Lady", 400),  # a MiniMax voice name, but not one the spec documents
        ("hindi_female_9_v9", 400),
        ("thai_female_1_sample1", 400),  # voice ids are case-sensitive
    ],
)
async def test_a_managed_minimax_preset_takes_only_documented_system_voices(
    agora_emulator: AgoraEmulator, voice: str, status: int
) -> None:
    tts = {"vendor": "minimax", "params": {"voice_setting": {"voice_id": voice}}}
    response = await post_join(agora_emulator, preset_join(agora_emulator, "minimax_speech_2_6_turbo", tts=tts))
    if status == 400:
        assert_error(response, 400, "InvalidFieldValue", "not a documented MiniMax system voice")
    else:
        assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("asr_language", "code", "status"),
    [
        ("en-US", "en", 200),
        ("en-US", "en-US", 200),
        ("zh-CN", "zh-CN", 200),
        ("hi-IN", "hi", 200),
        ("th-TH", "th", 200),
        ("es-ES", "es-MX", 400),  # a region Agora's language list does not have
        ("en-US", "EN", 400),
        ("en-US", "english", 400),
        ("en-US", "", 400),
    ],
)
async def test_a_deepgram_preset_takes_only_documented_language_codes(
    agora_emulator: AgoraEmulator, asr_language: str, code: str, status: int
) -> None:
    asr = {"vendor": "deepgram", "language": asr_language, "params": {"language": code}}
    response = await post_join(agora_emulator, preset_join(agora_emulator, "deepgram_nova_3", asr=asr))
    if status == 400:
        assert_error(response, 400, "InvalidFieldValue", "not a documented Deepgram language code")
    else:
        assert response.status_code == 200, response.text


# ---- MCP servers ---------------------------------------------------------------------------------------------


def mcp_llm(**server: Any) -> dict[str, Any]:
    return {
        "url": "https://llm.example.test/v1/chat/completions",
        "system_messages": [{"role": "system", "content": "You are a helpful voice assistant."}],
        "mcp_servers": [{"name": "weather", "endpoint": MCP_ENDPOINT, **server}],
    }


@pytest.mark.parametrize(
    ("name", "status"),
    [
        ("weather", 200),
        ("Weather2", 200),
        ("w" * 48, 200),
        ("w" * 49, 400),
        ("my-weather", 400),
        ("my_weather", 400),
        ("météo", 400),
        ("weather ", 400),
        ("", 400),
    ],
)
async def test_mcp_server_names_are_english_letters_and_numbers_up_to_48(
    agora_emulator: AgoraEmulator, name: str, status: int
) -> None:
    properties = make_join_properties(agora_emulator, llm=mcp_llm(name=name))
    properties["advanced_features"] = {"enable_tools": True}
    response = await post_join(agora_emulator, {"name": "mcp", "properties": properties})
    if status == 400:
        assert_error(response, 400, "InvalidFieldValue", "English letters and numbers only")
    else:
        assert response.status_code == 200, response.text


async def test_an_mcp_server_needs_an_endpoint_and_enable_tools_a_boolean(agora_emulator: AgoraEmulator) -> None:
    properties = make_join_properties(agora_emulator, llm=mcp_llm())
    del properties["llm"]["mcp_servers"][0]["endpoint"]
    assert_error(await post_join(agora_emulator, {"name": "a", "properties": properties}), 400, "MissingRequiredField")
    properties = make_join_properties(agora_emulator, llm=mcp_llm())
    properties["advanced_features"] = {"enable_tools": "yes"}
    response = await post_join(agora_emulator, {"name": "b", "properties": properties})
    assert_error(response, 400, "InvalidFieldValue", "enable_tools must be a boolean")


async def mcp_agent(emulator: AgoraEmulator, scripted: ScriptedLLM, *, enable_tools: bool = True) -> str:
    agent_id = await custom_agent(emulator, scripted)
    properties = emulator.agent(agent_id).properties
    properties["advanced_features"] = {"enable_tools": enable_tools}
    properties["llm"]["mcp_servers"] = [{"name": "weather", "endpoint": MCP_ENDPOINT, "allowed_tools": ["weather"]}]
    return agent_id


def tool_call_chunks(name: str, arguments: str, *, call_id: str = "call_1", finish: str | None = "tool_calls"):
    first = {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
    pieces = [chunk_with_tool_calls([first])]
    pieces += [chunk_with_tool_calls([{"index": 0, "function": {"arguments": arguments[:5]}}])]
    pieces += [chunk_with_tool_calls([{"index": 0, "function": {"arguments": arguments[5:]}}])]
    if finish is not None:
        pieces.append(chunk(finish=finish))
    return pieces


def chunk_with_tool_calls(tool_calls: list[dict[str, Any]]) -> bytes:
    body = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"tool_calls": tool_calls}}]}
    return f"data: {json.dumps(body)}\n\n".encode()


async def test_the_engine_offers_its_mcp_tools_and_runs_their_calls(
    agora_emulator: AgoraEmulator, scripted: ScriptedLLM
) -> None:
    agora_emulator.serve_mcp_tools(MCP_ENDPOINT, [WEATHER, EngineTool("not_allowed", "{}")])
    agent_id = await mcp_agent(agora_emulator, scripted)
    scripted.scripts.append([*tool_call_chunks("weather", '{"city": "Leeds"}'), DONE])
    scripted.scripts.append([chunk("It is sunny in Leeds."), chunk(finish="stop"), DONE])

    turn = await agora_emulator.user_says(agent_id, "What's the weather in Leeds?")

    first, again = scripted.requests
    assert first["tools"] == [WEATHER.as_openai()], "only the allowed tool of the agent's MCP server"
    assert again["tools"] == first["tools"]
    assert again["messages"][: len(first["messages"])] == first["messages"]
    asked, answered = again["messages"][len(first["messages"]) :]
    assert asked == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Leeds"}'}}
        ],
    }
    assert answered == {"role": "tool", "tool_call_id": "call_1", "content": '{"city": "Leeds", "sky": "sunny"}'}
    [run] = agora_emulator.tool_runs
    assert (run.agent_id, run.call.name, run.call.arguments) == (agent_id, "weather", '{"city": "Leeds"}')
    assert (turn.outcome, turn.kind, turn.reply) == ("ok", "speech", "It is sunny in Leeds.")
    said = [(m["role"], m["content"]) for m in agora_emulator.agent(agent_id).history_contents()]
    assert said[-2:] == [("user", "What's the weather in Leeds?"), ("assistant", "It is sunny in Leeds.")]


async def test_no_tools_without_enable_tools(agora_emulator: AgoraEmulator, scripted: ScriptedLLM) -> None:
    agora_emulator.serve_mcp_tools(MCP_ENDPOINT, [WEATHER])
    agent_id = await mcp_agent(agora_emulator, scripted, enable_tools=False)
    scripted.scripts.append([chunk("Hello."), chunk(finish="stop"), DONE])
    await agora_emulator.user_says(agent_id, "Hi")
    assert "tools" not in scripted.requests[-1]


async def test_engine_calls_without_finish_reason_tool_calls_are_not_run(
    agora_emulator: AgoraEmulator, scripted: ScriptedLLM
) -> None:
    """A custom LLM must relay the engine's calls "with `finish_reason: "tool_calls"`" (§13.1): pieces of a call
    followed by text and a plain stop are never run, and the text is what the agent says."""
    agora_emulator.serve_mcp_tools(MCP_ENDPOINT, [WEATHER])
    agent_id = await mcp_agent(agora_emulator, scripted)
    scripted.scripts.append([*tool_call_chunks("weather", '{"city": "York"}', finish=None), chunk("Let me see."), DONE])
    turn = await agora_emulator.user_says(agent_id, "Weather in York?")
    assert (turn.kind, turn.finish_reason, [c.name for c in turn.tool_calls]) == ("mixed", None, ["weather"])
    assert agora_emulator.tool_runs == [] and len(scripted.requests) == 1
    assert agora_emulator.agent(agent_id).history_contents()[-1]["content"] == "Let me see."


async def test_a_tool_call_only_answer_is_no_spoken_reply(agora_emulator: AgoraEmulator, scripted: ScriptedLLM) -> None:
    """Calls of a tool the engine does not run (the agent has no MCP servers): the answer is tool calls, nothing to
    speak, and the agent's history gets no empty reply."""
    agent_id = await custom_agent(agora_emulator, scripted)
    scripted.scripts.append([*tool_call_chunks("lookup_order", '{"order": 7}'), DONE])
    turn = await agora_emulator.user_says(agent_id, "Where is my order?")
    assert (turn.outcome, turn.kind, turn.finish_reason) == ("ok", "tool_calls", "tool_calls")
    assert [(c.id, c.name, c.arguments) for c in turn.tool_calls] == [("call_1", "lookup_order", '{"order": 7}')]
    assert agora_emulator.tool_runs == []
    roles = [m["role"] for m in agora_emulator.agent(agent_id).history_contents()]
    assert roles[-1] == "user", "no empty assistant line for an answer that said nothing"


async def test_an_llm_that_keeps_calling_tools_fails_the_turn(
    agora_emulator: AgoraEmulator, scripted: ScriptedLLM
) -> None:
    agora_emulator.serve_mcp_tools(MCP_ENDPOINT, [WEATHER])
    agent_id = await mcp_agent(agora_emulator, scripted)
    for n in range(6):
        scripted.scripts.append([*tool_call_chunks("weather", '{"city": "Hull"}', call_id=f"call_{n}"), DONE])
    turn = await agora_emulator.user_says(agent_id, "Weather?")
    assert turn.outcome == "failed" and "5 rounds" in str(turn.error)
    assert len(agora_emulator.tool_runs) == 5 and len(scripted.requests) == 6
    last = agora_emulator.agent(agent_id).history_contents()[-1]
    assert last["metadata"]["source"] == "llm_failure"


async def test_malformed_tool_call_pieces_fail_the_turn(agora_emulator: AgoraEmulator, scripted: ScriptedLLM) -> None:
    agent_id = await custom_agent(agora_emulator, scripted)
    scripted.scripts.append([chunk_with_tool_calls([{"id": "x", "function": {"name": "a"}}]), DONE])
    turn = await agora_emulator.user_says(agent_id, "Hi")
    assert turn.outcome == "failed" and "integer index" in str(turn.error)
