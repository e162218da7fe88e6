"""A call held in the member's language, as the Agora emulator receives its join (the real call service)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.calls.errors import VoiceUnavailable
from bot.calls.language import LANGUAGES
from standins.agora_emulator import RequestRecord
from standins.harness import CallWorld, call_world

ALICE = 42
GUILD = 1


async def join_of(world: CallWorld, *, locale: str | None) -> tuple[dict, str, str | None]:
    """Start Alice's call; (the join's properties, the call's stored language, the language it fell back from)."""
    await world.store.set_consent(ALICE, True, world.clock())
    started = await world.calls.start(user_id=ALICE, guild_id=GUILD, locale=locale)
    agent = world.emu.agent_by_label("call_id", started.call_id)
    call = await world.store.get_call(started.call_id)
    assert call is not None and call.language == started.language
    await world.calls.hang_up(ALICE)
    return agent.properties, started.language, started.language_wanted


async def test_a_spanish_locale_gets_spanish_ears_voice_persona_and_greeting(world: CallWorld) -> None:
    properties, language, wanted = await join_of(world, locale="es-ES")
    spanish = LANGUAGES["es"]
    assert (language, wanted) == ("es", None)
    assert properties["asr"] == {"vendor": "deepgram", "language": "es-ES", "params": {"language": "es"}}
    assert properties["tts"]["params"]["voice_setting"]["voice_id"] == "Spanish_SereneWoman"
    assert properties["tts"]["params"]["language_boost"] == "Spanish"
    assert "always answer in Spanish" in properties["llm"]["system_messages"][0]["content"]
    assert properties["llm"]["greeting_message"] == spanish.greeting
    assert properties["llm"]["failure_message"] == spanish.failure


async def test_an_english_call_sends_what_it_always_sent(world: CallWorld) -> None:
    properties, language, _ = await join_of(world, locale="en-GB")
    assert language == "en"
    assert properties["asr"] == {"vendor": "deepgram", "language": "en-US", "params": {"language": "en-US"}}
    assert properties["tts"]["params"] == {"voice_setting": {"voice_id": world.settings.agora.tts_voice}}
    assert properties["llm"]["system_messages"][0]["content"].startswith(world.settings.memory.persona)
    assert "always answer" not in properties["llm"]["system_messages"][0]["content"]
    assert properties["llm"]["greeting_message"] == world.settings.agora.greeting


async def test_the_members_choice_then_the_servers_default(world: CallWorld) -> None:
    await world.store.update_guild_settings(GUILD, world.clock(), language="fr")
    properties, language, _ = await join_of(world, locale="pl")
    assert language == "fr" and properties["asr"]["language"] == "fr-FR"
    await world.store.set_user_language(ALICE, "de", world.clock())
    properties, language, _ = await join_of(world, locale="es-ES")
    assert language == "de" and properties["asr"]["language"] == "de-DE"


async def test_a_voice_that_cannot_speak_the_language_gives_an_english_call(tmp_path: Path) -> None:
    own_voice = {"tts_vendor": "microsoft", "tts_params": {"key": "k", "region": "eastus", "voice_name": "en-US-A"}}
    async with call_world(tmp_path, agora=own_voice) as world:
        properties, language, wanted = await join_of(world, locale="es-ES")
    assert (language, wanted) == ("en", "es")
    assert properties["asr"]["language"] == "en-US"
    assert properties["tts"] == {"vendor": "microsoft", "params": own_voice["tts_params"]}


async def test_a_voice_agora_refuses_gives_an_english_call_that_says_so(world: CallWorld) -> None:
    """Agora spec §13.2: no Agora page lists which voices a managed MiniMax preset accepts, so a refused join of a
    Hindi call is tried once more in English, and the call says which language it fell back from."""
    world.emu.fail_next(1, 400, operation="join", detail="properties.tts.params.voice_setting.voice_id: not available")
    properties, language, wanted = await join_of(world, locale="hi")
    assert (language, wanted) == ("en", "hi")
    assert properties["asr"]["language"] == "en-US"
    assert properties["tts"]["params"] == {"voice_setting": {"voice_id": world.settings.agora.tts_voice}}
    assert "always answer" not in properties["llm"]["system_messages"][0]["content"]
    assert properties["llm"]["greeting_message"] == world.settings.agora.greeting
    assert [request.status for request in joins(world)] == [400, 200]


async def test_an_english_join_refused_is_not_tried_again(world: CallWorld) -> None:
    world.emu.fail_next(1, 400, operation="join")
    await world.store.set_consent(ALICE, True, world.clock())
    with pytest.raises(VoiceUnavailable):
        await world.calls.start(user_id=ALICE, guild_id=GUILD, locale="en-US")
    assert [request.status for request in joins(world)] == [400] and not world.emu.agents


def joins(world: CallWorld) -> list[RequestRecord]:
    return [request for request in world.emu.requests if request.path.endswith("/join")]
