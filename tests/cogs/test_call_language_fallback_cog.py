"""A language this bot's voice cannot speak: the call is in English and its card says so (a bot whose admin set
their own TTS vendor, which speaks English only)."""

from __future__ import annotations

import pytest

from standins.harness import CallWorld

OWN_VOICE = {"tts_vendor": "microsoft", "tts_params": {"key": "k", "region": "eastus", "voice_name": "en-US-A"}}


pytestmark = pytest.mark.call_world(agora=OWN_VOICE)


async def test_a_language_the_voice_cannot_speak_falls_back_to_english_with_a_note(
    simcord_env, world: CallWorld, member, discord_locales
) -> None:
    _, channel, alice = member
    await world.store.set_consent(alice.id, True, world.clock())
    card = await alice.slash(channel, "call", language="es")
    call = await world.store.open_call_for_user(alice.id)
    assert call is not None and call.language == "en"
    properties = world.emu.agent_by_label("call_id", call.call_id).properties
    assert properties["asr"]["language"] == "en-US"
    assert properties["tts"] == {"vendor": "microsoft", "params": OWN_VOICE["tts_params"]}
    assert "Calls in **Spanish (Español)** are not available" in card.response.content
