"""The memory tools stay within bounds whatever the model streams (issue 38 items 2 and 3): a model that ignores
``tool_choice: "none"`` gets no more rounds and changes nothing past the last one, and tool arguments no code can
take (JSON nested too deep, a lone surrogate, a NUL) are a tool error the model answers from, on SQLite and on
PostgreSQL, with the agent's stream ending in ``data: [DONE]`` as always. Driven as Agora drives the route."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bot.memory.tools import MAX_ROUNDS
from standins.factories import seed_fact
from standins.harness import CallWorld
from standins.llm_server import FakeLLM

ALICE = 1111


def tool_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(m["content"]) for m in request["messages"] if m["role"] == "tool"]


async def test_a_model_ignoring_tool_choice_none_gets_no_further_round_and_changes_nothing(
    world: CallWorld, fake_llm: FakeLLM
) -> None:
    """The issue's run: 13 upstream requests and 48 facts in one answer. Past the last round the calls are dropped."""
    _call_id, agent_id = await world.start_member_call(ALICE)
    world.emu.llm_timeout = 5
    for n in range(12):
        facts = [("remember", {"fact": f"Looping fact {n}.{k}"}) for k in range(4)]
        fake_llm.queue_tool_calls(facts, say="Saving." if n == MAX_ROUNDS else "", obey_tool_choice=False)
    turn = await world.emu.user_says(agent_id, "Remember everything I ever said.")

    assert turn.outcome == "ok" and turn.reply == "Saving.", "the last answer's words, no tool syntax"
    assert len(fake_llm.requests) == MAX_ROUNDS + 1
    assert fake_llm.requests[-1]["tool_choice"] == "none"
    assert len(await world.store.list_facts(ALICE)) == 4 * MAX_ROUNDS, "the last answer's calls were not carried out"
    assert "tool_calls" not in json.dumps(turn.deltas)


PETS = (
    "Ajax Bruno Cosmo Dexter Enzo Felix Gizmo Hugo Igor Jasper Kobe Louie Milo Nemo Otis Pippin Quincy Rocco Simba Toby"
)


async def test_a_model_ignoring_tool_choice_cannot_loop_forgets(world: CallWorld, fake_llm: FakeLLM) -> None:
    """The issue's run: a loop of forgets removed 20 of 20 facts."""
    for pet in PETS.split():
        await seed_fact(world.store, ALICE, f"Their goldfish is called {pet}", world.clock() - 86400)
    _call_id, agent_id = await world.start_member_call(ALICE)
    world.emu.llm_timeout = 5
    for pet in PETS.split():
        fake_llm.queue_tool_calls([("forget", {"fact": f"goldfish {pet}"})], obey_tool_choice=False)
    turn = await world.emu.user_says(agent_id, "Forget my pets.")
    assert turn.outcome == "ok"
    assert len(fake_llm.requests) == MAX_ROUNDS + 1
    assert len(await world.store.list_facts(ALICE)) == 20 - MAX_ROUNDS


HOSTILE = {
    "nested-5000": '{"fact": ' + "[" * 5000 + "]" * 5000 + "}",
    "lone-surrogate": '{"fact": "My locker code is \\ud800 42"}',
    "nul": '{"fact": "My locker code is \\u0000 42"}',
}


@pytest.mark.parametrize("arguments", list(HOSTILE.values()), ids=list(HOSTILE))
@pytest.mark.parametrize("tool", ["remember", "correct", "forget"])
async def test_arguments_no_code_can_take_are_a_tool_error_and_the_stream_ends(
    any_backend: CallWorld, fake_llm: FakeLLM, tool: str, arguments: str
) -> None:
    world = any_backend
    call_id, agent_id = await world.start_member_call(ALICE)
    if tool == "correct":
        arguments = arguments.replace('"fact"', '"wrong": "My locker code is 41", "right"')
    fake_llm.queue_tool_calls([(tool, arguments)])
    fake_llm.queue_reply("Sorry, I could not save that. Could you say it again?")
    turn = await world.emu.user_says(agent_id, "Remember my locker code.")

    assert turn.outcome == "ok", turn.error
    assert turn.reply == "Sorry, I could not save that. Could you say it again?"
    (result,) = tool_results(fake_llm.last_request)
    assert result["status"] == "unreadable" and "Nothing was changed" in result["instruction"]
    assert await world.store.list_facts(ALICE, include_superseded=True) == []
    assert world.live is not None
    await world.live.wait_idle()
    assert (await world.call_lines(call_id))[-1] == ("assistant", turn.reply)

    fake_llm.queue_reply("Still here.")  # the call goes on
    assert (await world.emu.user_says(agent_id, "Hello?")).reply == "Still here."


async def test_a_memory_that_fails_mid_call_is_a_tool_error_and_the_stream_ends(
    world: CallWorld, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _call_id, agent_id = await world.start_member_call(ALICE)
    world.emu.llm_timeout = 5

    async def database_gone(*args: object, **kwargs: object) -> None:
        raise ConnectionResetError("the database connection was lost")

    monkeypatch.setattr(world.store, "add_told_fact", database_gone)
    fake_llm.queue_tool_calls([("remember", {"fact": "My locker code is 42"})])
    fake_llm.queue_reply("Sorry, I couldn't save that just now.")
    turn = await world.emu.user_says(agent_id, "Remember my locker code is 42.")

    assert turn.outcome == "ok" and turn.reply == "Sorry, I couldn't save that just now."
    (result,) = tool_results(fake_llm.last_request)
    assert result["status"] == "failed" and "try again later" in result["instruction"]
    assert "locker code" not in caplog.text, "the member's words are never logged"
