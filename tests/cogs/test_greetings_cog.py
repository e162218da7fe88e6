"""What a member hears first, as members and admins meet it (SimCord runs the real command tree; the store, the
post-call queue, the fake LLM and the Agora emulator are real): the join's ``greeting_message`` the emulator
received, the line the agent spoke as the call stored it, and the greeting kept with the member's memory."""

from __future__ import annotations

import json
from typing import Any

from bot.calls.language import LANGUAGES
from standins.harness import CallWorld
from standins.llm_server import FakeLLM

INTERVIEW = "I have a job interview at Acme on Friday"
FOLLOW_UP = "How did the interview at Acme go?"


def extraction(*facts: tuple[str, str]) -> str:
    return json.dumps(
        {
            "summary": "The member talked about their week.",
            "facts": [{"text": t, "evidence": e, "replaces": [], "duplicate_of": None} for t, e in facts],
        }
    )


async def call_and_hang_up(
    world: CallWorld, member, channel, lines: list[tuple[str, str]] | None = None, **options: Any
) -> tuple[str, str]:
    """The member's /call (choosing **Remember me** when asked; ``options`` for /call), the member joins, says
    ``lines`` and hangs up: (the join's greeting_message, the call's id)."""
    answer = await member.slash(channel, "call", **options)
    if answer.response.components and "/call" not in answer.response.content[-40:]:
        labels = [c["label"] for row in answer.response.components for c in row["components"]]
        if labels[0] in ("Remember me", "Recuérdame"):
            await member.click(answer.response, label=labels[0])
    call = await world.store.open_call_for_user(member.id)
    assert call is not None, answer.response.content
    agent = world.emu.agent_by_label("call_id", call.call_id)
    world.emu.user_joined(agent.agent_id)
    if lines:
        world.emu.script(agent.agent_id, lines)
    await member.slash(channel, "hangup")
    stored = await world.call_lines(call.call_id)  # nothing of a private call or paused memory
    assert stored[:1] in ([], [("assistant", agent.llm["greeting_message"])]), "the agent said the greeting first"
    return agent.llm["greeting_message"], call.call_id


async def processed(world: CallWorld, services, fake_llm: FakeLLM, facts: str, follow_up: str | None) -> None:
    """The post-call queue runs: the conversation's job (``facts``), then the greeting's (``follow_up``)."""
    fake_llm.queue_reply(facts)
    if follow_up is not None:
        fake_llm.queue_reply(json.dumps({"follow_up": follow_up}))
    world.clock.advance(60)
    while await services.postcall.run_once():
        pass


def greeting_request(fake_llm: FakeLLM) -> str:
    """What the greeting job asked the LLM: every message's text."""
    request = next(r for r in reversed(fake_llm.requests) if "follow-up question" in r["messages"][0]["content"])
    return "\n".join(m["content"] for m in request["messages"])


async def test_a_returning_member_is_greeted_by_name_with_a_follow_up_on_their_last_call(
    simcord_env, world: CallWorld, services, fake_llm: FakeLLM, server
) -> None:
    _, channel, carol, alice = server
    await carol.slash(channel, "settings greeting", text="Hi {name}, welcome to the Den!")
    first, call_id = await call_and_hang_up(
        world, alice, channel, [("user", f"My name is Ana. {INTERVIEW}."), ("assistant", "Good luck!")]
    )
    assert first == "Hi alice, welcome to the Den!", "a first call: the server's greeting, with the member's name"
    await processed(
        world,
        services,
        fake_llm,
        extraction(("The user's name is Ana.", "My name is Ana"), ("The user has a job interview at Acme.", INTERVIEW)),
        FOLLOW_UP,
    )
    asked = greeting_request(fake_llm)
    assert INTERVIEW in asked and "in English" in asked

    second, _ = await call_and_hang_up(world, alice, channel)
    assert second == f"Welcome back, Ana! {FOLLOW_UP}"
    kept = await world.store.get_greeting(alice.id)
    assert kept is not None and kept.call_id == call_id and kept.name == "Ana" and kept.follow_up == FOLLOW_UP
    assert set(kept.fact_ids) == {f.fact_id for f in await world.store.list_facts(alice.id)}


async def test_the_follow_up_is_in_the_language_of_the_members_calls(
    simcord_env, world: CallWorld, services, fake_llm: FakeLLM, server, discord_locales
) -> None:
    _, channel, _, alice = server
    discord_locales[alice.id] = "es-ES"
    first, _ = await call_and_hang_up(
        world,
        alice,
        channel,
        [("user", "Me llamo Ana. El viernes tengo una entrevista en Acme."), ("assistant", "¡Suerte!")],
    )
    assert first == LANGUAGES["es"].greeting
    follow_up = "¿Qué tal te fue la entrevista en Acme?"
    await processed(
        world,
        services,
        fake_llm,
        extraction(
            ("The user's name is Ana.", "Me llamo Ana"),
            ("The user has an interview at Acme.", "tengo una entrevista en Acme"),
        ),
        follow_up,
    )
    assert "in Spanish" in greeting_request(fake_llm)

    second, _ = await call_and_hang_up(world, alice, channel)
    assert second == f"¡Hola de nuevo, Ana! {follow_up}"

    third, _ = await call_and_hang_up(world, alice, channel, language="de")
    assert third == "Willkommen zurück, Ana! Worüber möchtest du heute sprechen?", (
        "a question prepared in Spanish is not said in a German call"
    )


async def test_first_private_and_paused_calls_get_the_servers_greeting(
    simcord_env, world: CallWorld, services, fake_llm: FakeLLM, server
) -> None:
    _, channel, carol, alice = server
    await carol.slash(channel, "settings greeting", text="Ahoy, {name}!")
    first, _ = await call_and_hang_up(world, alice, channel, [("user", f"Call me Ana. {INTERVIEW}.")])
    assert first == "Ahoy, alice!"
    await processed(world, services, fake_llm, extraction(("Call me Ana.", "Call me Ana")), FOLLOW_UP)

    private, _ = await call_and_hang_up(world, alice, channel, private=True)
    assert private == "Ahoy, alice!"

    panel = await alice.slash(channel, "memory")
    await alice.click(panel.response, label="Pause memory")
    paused, _ = await call_and_hang_up(world, alice, channel)
    assert paused == "Ahoy, alice!"

    panel = await alice.slash(channel, "memory")
    await alice.click(panel.response, label="Resume memory")
    resumed, _ = await call_and_hang_up(world, alice, channel)
    assert resumed == f"Welcome back, Ana! {FOLLOW_UP}"


async def test_a_member_who_chose_to_call_without_memory_gets_the_servers_greeting(
    simcord_env, world: CallWorld, server
) -> None:
    _, channel, _, alice = server
    answer = await alice.slash(channel, "call")
    await alice.click(answer.response, label="Call without memory")
    call = await world.store.open_call_for_user(alice.id)
    assert world.emu.agent_by_label("call_id", call.call_id).llm["greeting_message"] == world.settings.agora.greeting


async def test_a_forgotten_fact_never_reaches_a_later_greeting(
    simcord_env, world: CallWorld, services, fake_llm: FakeLLM, server
) -> None:
    _, channel, _, alice = server
    await call_and_hang_up(world, alice, channel, [("user", "My name is Ana."), ("user", f"{INTERVIEW}.")])
    await processed(
        world,
        services,
        fake_llm,
        extraction(("The user's name is Ana.", "My name is Ana"), ("The user has a job interview at Acme.", INTERVIEW)),
        FOLLOW_UP,
    )
    assert (await world.store.get_greeting(alice.id)).follow_up == FOLLOW_UP  # type: ignore[union-attr]

    interview = next(f for f in await world.store.list_facts(alice.id) if "Acme" in f.text)
    asked = await alice.slash(channel, "forget item", item=str(interview.fact_id))
    confirm = [c["label"] for row in asked.response.components for c in row["components"]]
    if confirm:  # the lines that repeat it go too, after the member confirms
        await alice.click(asked.response, label=next(label for label in confirm if label.startswith("Forget")))
    assert await world.store.get_fact(interview.fact_id) is None
    assert await world.store.get_greeting(alice.id) is None, "the greeting prepared before the forget went with it"

    def model(body: dict[str, Any]) -> str:  # asks about the interview whenever it is shown it
        shown = json.dumps(body["messages"])
        return json.dumps({"follow_up": FOLLOW_UP if "Acme" in shown else ""})

    fake_llm.set_responder(model)
    requests = len(fake_llm.requests)
    while await services.postcall.run_once():  # the greeting is prepared again after the forget
        pass
    assert all("Acme" not in json.dumps(r) for r in fake_llm.requests[requests:])
    later, _ = await call_and_hang_up(world, alice, channel)
    assert later == "Welcome back, Ana! What would you like to talk about today?"


async def test_a_sensitive_line_never_reaches_the_greeting(
    simcord_env, world: CallWorld, services, fake_llm: FakeLLM, server
) -> None:
    _, channel, _, alice = server
    lines = [
        ("user", "My name is Ana."),
        ("user", "My doctor says my blood pressure is too high."),
        ("user", "I'm flying to Lisbon next week."),
    ]
    await call_and_hang_up(world, alice, channel, lines)
    await processed(
        world,
        services,
        fake_llm,
        extraction(("The user's name is Ana.", "My name is Ana")),
        "How is your blood pressure?",
    )
    asked = greeting_request(fake_llm)
    assert "Lisbon" in asked and "doctor" not in asked and "blood" not in asked
    later, _ = await call_and_hang_up(world, alice, channel)
    assert later == "Welcome back, Ana! What would you like to talk about today?", "the model's question was dropped"


async def test_a_conversation_the_member_asked_to_keep_quiet_is_not_drawn_on(
    simcord_env, world: CallWorld, services, fake_llm: FakeLLM, server
) -> None:
    _, channel, _, alice = server
    lines = [("user", "My name is Ana."), ("user", f"{INTERVIEW}. Keep it between us, please.")]
    await call_and_hang_up(world, alice, channel, lines)
    await processed(world, services, fake_llm, extraction(("The user's name is Ana.", "My name is Ana")), None)
    assert not any("follow-up question" in r["messages"][0]["content"] for r in fake_llm.requests)
    later, _ = await call_and_hang_up(world, alice, channel)
    assert later == "Welcome back, Ana! What would you like to talk about today?"


async def test_a_member_or_a_server_can_turn_personal_greetings_off(
    simcord_env, world: CallWorld, services, fake_llm: FakeLLM, server
) -> None:
    _, channel, carol, alice = server
    await call_and_hang_up(world, alice, channel, [("user", f"My name is Ana. {INTERVIEW}.")])
    await processed(world, services, fake_llm, extraction(("The user's name is Ana.", "My name is Ana")), FOLLOW_UP)

    off = await alice.slash(channel, "memory", greetings=False)
    assert "open with the server's greeting" in off.response.content
    assert "**Personal greetings:** off" in off.response.embeds[0].description
    assert await world.store.get_greeting(alice.id) is None
    greeting, _ = await call_and_hang_up(world, alice, channel)
    assert greeting == world.settings.agora.greeting

    on = await alice.slash(channel, "memory", greetings=True)
    assert "**Personal greetings:** on" in on.response.embeds[0].description
    greeting, _ = await call_and_hang_up(world, alice, channel)
    assert greeting == "Welcome back, alice! What would you like to talk about today?", (
        "the greeting kept was deleted: the Discord name and the plain question until the next is prepared"
    )

    done = await carol.slash(channel, "settings greetings", enabled=False)
    assert "**off**" in done.response.content
    assert "**Personal greetings:** off" in (await carol.slash(channel, "settings show")).response.content
    greeting, _ = await call_and_hang_up(world, alice, channel)
    assert greeting == world.settings.agora.greeting
