"""The voice agent's LLM route as an attacker holding a call's key drives it: bodies that parse as JSON in Python's
lenient reading but are not JSON, or that nest deep enough to break whatever handles them later, are a 400 in
OpenAI's error shape before anything is stored or sent upstream (issue 33 item 6)."""

from __future__ import annotations

import httpx
import pytest

from bot.web.llm_route import LLM_ROUTE
from standins.harness import CallWorld
from standins.llm_server import FakeLLM

ALICE = 1111
TURN = '{"model": "m", "stream": true, "messages": [{"role": "user", "content": "My passport is X1."}]'


async def call_key(world: CallWorld) -> tuple[str, str, str]:
    """A running call the member joined: (call id, agent id, the LLM key Agora was given for it)."""
    await world.store.set_consent(ALICE, True, world.clock())
    started = await world.calls.start(user_id=ALICE, guild_id=1)
    agent = world.emu.agent_by_label("call_id", started.call_id)
    world.emu.user_joined(agent.agent_id)
    return started.call_id, agent.agent_id, world.emu.agent(agent.agent_id).request["properties"]["llm"]["api_key"]


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    "extra",
    [
        '"temperature": NaN',
        '"temperature": Infinity',
        '"top_p": -Infinity',
        '"temperature": 1e999',
        f'"metadata": {{"tags": {nested(980)}}}',
        f'"tools": [{{"type": "function", "function": {{"name": "f", "parameters": {nested(300)}}}}}]',
    ],
    ids=["nan", "infinity", "minus-infinity", "overflow", "nested-980", "nested-300-in-a-tool"],
)
async def test_non_json_constants_and_deep_nesting_are_a_400_before_anything_is_stored(
    live_recall_world: CallWorld, fake_llm: FakeLLM, extra: str
) -> None:
    world, llm = live_recall_world, fake_llm
    call_id, agent_id, key = await call_key(world)
    before = await world.store.call_turns(call_id)
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{world.web.url}{LLM_ROUTE}",
            content=(TURN + ", " + extra + "}").encode(),
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )
    assert response.status_code == 400
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_request"
    assert llm.requests == [] and await world.store.call_turns(call_id) == before

    llm.queue_reply("Still here.")  # the call goes on: the next genuine turn is answered and stored
    turn = await world.emu.user_says(agent_id, "Are you there?")
    assert turn.outcome == "ok" and turn.reply == "Still here."
    assert [t.content for t in await world.store.call_turns(call_id)][-2:] == ["Are you there?", "Still here."]


async def test_ordinary_nesting_and_finite_numbers_pass(live_recall_world: CallWorld, fake_llm: FakeLLM) -> None:
    world, llm = live_recall_world, fake_llm
    call_id, _agent_id, key = await call_key(world)
    llm.queue_reply("Noted.")
    schema = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}}}}
    body = {
        "model": "m",
        "stream": True,
        "temperature": 0.7,
        "messages": [{"role": "user", "content": "Remember my cat."}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}],
    }
    async with httpx.AsyncClient() as http:
        response = await http.post(f"{world.web.url}{LLM_ROUTE}", json=body, headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200 and "Noted." in response.text
    assert llm.last_request["temperature"] == 0.7 and llm.last_request["tools"][0]["function"]["parameters"] == schema
    assert [t.content for t in await world.store.call_turns(call_id)][-2:] == ["Remember my cat.", "Noted."]
