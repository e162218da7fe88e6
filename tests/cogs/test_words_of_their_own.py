"""What a Spanish or German member reads around a call is written for them: the first call's card claims no earlier
conversations, a call that taught nothing says so in words (not "0 cosas"), and a language is named as their
language writes it inside a sentence ("en español", "auf Spanisch")."""

from __future__ import annotations

import json

from standins.harness import CallWorld

NOTHING_LEARNED = json.dumps({"summary": "Un saludo.", "facts": []})


async def test_a_spanish_members_first_call_promises_memory_and_a_call_that_taught_nothing_says_so(
    simcord_env, world: CallWorld, services, fake_llm, member, discord_locales
) -> None:
    _, channel, alice = member
    discord_locales[alice.id] = "es-ES"
    asked = await alice.slash(channel, "call")
    card = await alice.click(asked.response, label="Recuérdame")
    first = card.response.content

    assert "Esta llamada se recordará, para que el agente pueda retomarla la próxima vez." in first
    assert "conversaciones anteriores" not in first, "there are none yet"
    assert "Esta llamada es en **español**;" in first

    call = await world.store.open_call_for_user(alice.id)
    world.emu.user_joined(call.agent_id)
    world.emu.script(call.agent_id, [("user", "Hola, ¿qué tal?"), ("assistant", "¡Muy bien!")])
    await alice.click(card.response, label="Colgar")
    fake_llm.queue_reply(NOTHING_LEARNED)
    world.clock.advance(60)
    assert await services.postcall.run_once()
    await simcord_env.settle()
    assert "El agente no aprendió nada nuevo sobre ti." in card.response.content
    assert "0 cosas" not in card.response.content
    assert await world.store.list_facts(alice.id) == []

    again = await alice.slash(channel, "call")
    assert "El agente recuerda tus conversaciones anteriores" in again.response.content, "now there is one"


async def test_a_german_member_reads_the_language_of_their_call_in_a_german_sentence(
    simcord_env, world: CallWorld, member, discord_locales
) -> None:
    _, channel, alice = member
    discord_locales[alice.id] = "de"
    await world.store.set_consent(alice.id, True, world.clock())

    card = await alice.slash(channel, "call", language="es")

    assert "Dieser Anruf ist auf **Spanisch (Español)**;" in card.response.content
    assert "Dieser Anruf wird gemerkt" in card.response.content
    await world.calls.hang_up(alice.id)
    chosen = await alice.slash(channel, "memory", language="de")
    assert "Deine Anrufe sind ab jetzt auf **Deutsch**." in chosen.response.content
