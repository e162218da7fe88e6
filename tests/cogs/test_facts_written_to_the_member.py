"""Facts are written to the member they are about, in the conversation's language: what a call taught (extraction)
and what the member asked to keep in a `/chat` (the remember tool) read "Your sister lives in Porto", "Tu hermana
vive en Oporto", not "The user's sister…" / "La hermana del usuario…". The model is asked for them so, they are
stored and shown as written (`/memory` and its **Edit a fact…** menu, in the member's Discord language), and the
agent's memory message says that a fact's "you" is the member. SimCord runs the real command tree; the store, the
Agora emulator and the OpenAI-compatible fake LLM are real."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from bot.i18n import words_for
from bot.memory.context import MEMORY_HEADER
from standins.harness import CallWorld
from standins.llm_server import FakeLLM


@dataclass(frozen=True)
class Member:
    locale: str
    language: str
    said: str
    learned: str
    evidence: str
    asked: str
    kept: str


MEMBERS = {
    "en": Member(
        "en-US",
        "English",
        "My sister lives in Porto and works at a hospital.",
        "Your sister lives in Porto and works at a hospital.",
        "My sister lives in Porto",
        "Remember that my daughter's birthday is on 4 May",
        "Your daughter's birthday is on 4 May.",
    ),
    "es": Member(
        "es-ES",
        "Spanish",
        "Mi hermana vive en Oporto y trabaja en un hospital.",
        "Tu hermana vive en Oporto y trabaja en un hospital.",
        "Mi hermana vive en Oporto",
        "Recuerda que mi hija cumple años el 4 de mayo",
        "Tu hija cumple años el 4 de mayo.",
    ),
    "de": Member(
        "de",
        "German",
        "Meine Schwester wohnt in Porto und arbeitet in einem Krankenhaus.",
        "Deine Schwester wohnt in Porto und arbeitet in einem Krankenhaus.",
        "Meine Schwester wohnt in Porto",
        "Merk dir, dass meine Tochter am 4. Mai Geburtstag hat",
        "Deine Tochter hat am 4. Mai Geburtstag.",
    ),
    "pt": Member(
        "pt-BR",
        "Portuguese",
        "Minha irmã mora no Porto e trabalha num hospital.",
        "Sua irmã mora no Porto e trabalha num hospital.",
        "Minha irmã mora no Porto",
        "Lembra que minha filha faz aniversário em 4 de maio",
        "Sua filha faz aniversário em 4 de maio.",
    ),
}


def items(message) -> list[dict]:
    return [c for row in message.components for c in row["components"]]


def edit_menu(message, placeholder: str) -> list[str]:
    [menu] = [c for c in items(message) if c["type"] == 3 and c.get("placeholder") == placeholder]
    return [o["label"] for o in menu["options"]]


def tool_description(request: dict[str, Any], tool: str, parameter: str) -> str:
    [found] = [t["function"] for t in request["tools"] if t["function"]["name"] == tool]
    return str(found["parameters"]["properties"][parameter]["description"])


@pytest.mark.parametrize("tag", list(MEMBERS))
async def test_what_a_call_taught_and_what_a_chat_kept_are_written_to_the_member_in_their_language(
    simcord_env, world: CallWorld, services, fake_llm: FakeLLM, member, discord_locales, tag: str
) -> None:
    who = MEMBERS[tag]
    _, channel, alice = member
    discord_locales[alice.id] = who.locale
    words = words_for(who.locale)
    await world.store.set_consent(alice.id, True, world.clock())

    await alice.slash(channel, "call")
    call = await world.store.open_call_for_user(alice.id)
    assert call is not None and call.language == tag
    world.emu.user_joined(call.agent_id)
    world.emu.script(call.agent_id, [("user", who.said), ("assistant", "…")])
    await world.calls.hang_up(alice.id)
    fact = {"text": who.learned, "evidence": who.evidence, "replaces": [], "duplicate_of": None}
    fake_llm.queue_reply(json.dumps({"summary": "…", "facts": [fact]}))
    world.clock.advance(60)
    assert await services.postcall.run_once()
    await simcord_env.settle()

    system, asked = (m["content"] for m in fake_llm.requests[-1]["messages"])
    assert "written to the user, in the second person, as it will be shown to them" in system
    assert "never translate them. Address the user in the facts as that language does" in system
    assert ("It was held in" not in asked) if tag == "en" else (f"It was held in {who.language}." in asked)

    fake_llm.queue_tool_calls([("remember", {"fact": who.kept})])
    fake_llm.queue_reply("👍")
    await alice.slash(channel, "chat", message=who.asked)
    told = fake_llm.requests[-2]
    for tool, parameter in (("remember", "fact"), ("correct", "right")):
        described = tool_description(told, tool, parameter)
        assert "written to the user, as it will be shown to them: in the second person" in described
        assert "in the language you are speaking with them" in described

    stored = {f.text: f.told for f in await world.store.list_facts(alice.id)}
    assert stored == {who.learned: False, who.kept: True}, "stored as written to the member"

    panel = (await alice.slash(channel, "memory")).response
    shown = panel.embeds[0].description
    assert f"• {who.learned} — " in shown and f"• {who.kept} — " in shown
    assert sorted(edit_menu(panel, words("own.edit_placeholder"))) == sorted([who.learned, who.kept])

    _next_call, agent_id = await world.start_member_call(alice.id)
    system_messages = world.emu.agent(agent_id).system_messages
    [block] = [m["content"] for m in system_messages if m["content"].startswith(MEMORY_HEADER)]
    assert 'In a fact, "you", "the user" and "I" mean them' in block
    assert json.dumps(who.learned, ensure_ascii=False) in block and json.dumps(who.kept, ensure_ascii=False) in block
