"""A member's journey: call, say who they are, close the tab; the next call's agent already knows them."""

from __future__ import annotations

import httpx

from standins.harness import CallWorld


def link_of(message) -> str:
    return next(c["url"] for row in message.components for c in row["components"] if c.get("url"))


async def test_what_is_said_in_one_call_is_known_in_the_next(simcord_env, world: CallWorld) -> None:
    guild = simcord_env.create_guild()
    channel = guild.create_text_channel("general")
    alice = guild.add_member(simcord_env.create_user("alice"))

    prompt = await alice.slash(channel, "call")
    card = await alice.click(prompt.response, label="Remember me")
    link = link_of(card.response)
    call = await world.store.open_call_for_user(alice.id)
    world.emu.user_joined(call.agent_id)
    world.emu.script(
        call.agent_id,
        [
            ("user", "Hi! My name is Mirela."),
            ("assistant", "Lovely to meet you, Mirela."),
            ("user", "I prefer talking in the mornings, and I love hiking in the Carpathians."),
            ("assistant", "Mornings and mountains, noted."),
        ],
    )

    # The member closes the tab: the page's beacon ends the call; then Agora's idle timeout stops the agent.
    async with httpx.AsyncClient() as http:
        token = link.rsplit("/", 1)[1]
        closed = await http.post(
            f"{world.web.url}/api/calls/{token}/hangup", content=b"beacon", headers={"content-type": "text/plain"}
        )
    assert closed.json()["state"] == "ended"
    await simcord_env.settle()
    assert "Call ended" in card.response.content

    second = await alice.slash(channel, "call")
    assert "Your call is ready" in second.response.content, "consent is asked only once"
    agent = world.emu.agent((await world.store.open_call_for_user(alice.id)).agent_id)
    memory = "\n".join(m["content"] for m in agent.system_messages)
    assert "My name is Mirela." in memory
    assert "I love hiking in the Carpathians" in memory
    assert agent.system_messages[0]["content"] == world.settings.memory.persona
