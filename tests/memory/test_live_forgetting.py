"""What a member forgets mid-call stops reaching the model at once (issue 38 item 5): every request of Agora's agent
carries its recent messages, so after /forget (or a voice forget) the words would go upstream again on each turn
until they fall out of the agent's short-term memory. The route drops them from what it sends upstream, on SQLite
and on PostgreSQL; the agent's own history is Agora's and stays as it is."""

from __future__ import annotations

import json
from typing import Any

from standins.factories import seed_fact
from standins.harness import CallWorld
from standins.llm_server import FakeLLM

ALICE = 1111


def upstream_lines(request: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in request["messages"] if m["role"] in ("user", "assistant")]


async def test_a_fact_forgotten_mid_call_is_absent_from_the_next_upstream_requests(
    any_backend: CallWorld, fake_llm: FakeLLM
) -> None:
    world = any_backend
    fact = await seed_fact(world.store, ALICE, "Their ex is called Sam Okonjo", world.clock() - 86400)
    call_id, agent_id = await world.start_member_call(ALICE)
    greeting = world.emu.agent(agent_id).conversation[0].content
    fake_llm.queue_reply("Noted.")
    await world.emu.user_says(agent_id, "My ex is called Sam Okonjo, by the way.")
    fake_llm.queue_reply("Lovely.")
    await world.emu.user_says(agent_id, "I had pancakes today.")
    assert world.live is not None
    await world.live.wait_idle()

    assert await world.memory.forget_fact(ALICE, fact.fact_id) is not None  # what /forget item does
    for n, (said, answer) in enumerate([("What's the weather?", "Sunny."), ("And tomorrow?", "Rain.")]):
        fake_llm.queue_reply(answer)
        turn = await world.emu.user_says(agent_id, said)
        assert turn.outcome == "ok" and turn.reply == answer
        sent = fake_llm.last_request
        assert "Okonjo" not in json.dumps(sent), f"turn {n + 1} after the forget"
        assert upstream_lines(sent)[:4] == [
            ("assistant", greeting),
            ("assistant", "Noted."),
            ("user", "I had pancakes today."),
            ("assistant", "Lovely."),
        ], "every other line as the agent holds it"
    assert any("Okonjo" in m.content for m in world.emu.agent(agent_id).conversation), "the agent's history is Agora's"
    await world.live.wait_idle()
    assert not any("Okonjo" in text for _, text in await world.call_lines(call_id))


async def test_after_forget_everything_mid_call_no_earlier_line_goes_upstream(
    world: CallWorld, fake_llm: FakeLLM
) -> None:
    _call_id, agent_id = await world.start_member_call(ALICE)
    fake_llm.queue_reply("Noted.")
    await world.emu.user_says(agent_id, "My passport number is X1234567.")
    assert world.live is not None
    await world.live.wait_idle()
    await world.memory.forget_everything(ALICE)  # what /forget everything does

    fake_llm.queue_reply("Sunny.")
    await world.emu.user_says(agent_id, "What's the weather?")
    assert upstream_lines(fake_llm.last_request) == [("user", "What's the weather?")]
    fake_llm.queue_reply("Rain.")
    await world.emu.user_says(agent_id, "And tomorrow?")
    assert upstream_lines(fake_llm.last_request) == [
        ("user", "What's the weather?"),
        ("assistant", "Sunny."),
        ("user", "And tomorrow?"),
    ], "what was said after the forget stays"
