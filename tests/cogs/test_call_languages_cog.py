"""Call languages as members and admins meet them: the join body the Agora emulator receives follows the member's
choice, their Discord language, the server's default, else English (SimCord runs the real command tree)."""

from __future__ import annotations

import pytest

from bot.calls.language import LANGUAGES
from standins.harness import CallWorld


async def call_join(world: CallWorld, alice, channel, **options) -> tuple[dict, str]:
    """Alice's /call: the join properties the emulator accepted, and the card's text; the call, its language
    recorded as the join's, is hung up."""
    card = await alice.slash(channel, "call", **options)
    shown = card.response.content  # before the hang-up edits the card
    call = await world.store.open_call_for_user(alice.id)
    assert call is not None, shown
    properties = world.emu.agent_by_label("call_id", call.call_id).properties
    assert properties["asr"]["language"] == LANGUAGES[call.language].asr
    await world.calls.hang_up(alice.id)
    return properties, shown


async def test_a_member_whose_discord_is_in_spanish_gets_a_spanish_call(
    simcord_env, world: CallWorld, server, discord_locales
) -> None:
    _, channel, _, alice = server
    discord_locales[alice.id] = "es-ES"
    await world.store.set_consent(alice.id, True, world.clock())
    properties, card = await call_join(world, alice, channel)
    spanish = LANGUAGES["es"]
    assert properties["asr"] == {"vendor": "deepgram", "language": "es-ES", "params": {"language": "es"}}
    assert properties["tts"]["params"]["voice_setting"]["voice_id"] == spanish.minimax_voice
    assert "always answer in Spanish" in properties["llm"]["system_messages"][0]["content"]
    assert properties["llm"]["greeting_message"] == spanish.greeting
    assert "Esta llamada es en **español**;" in card, "named in the member's own language, as a Spanish sentence does"


async def test_call_language_overrides_discords_and_is_remembered_until_automatic(
    simcord_env, world: CallWorld, server, discord_locales
) -> None:
    _, channel, _, alice = server
    discord_locales[alice.id] = "es-ES"
    await world.store.set_consent(alice.id, True, world.clock())
    properties, card = await call_join(world, alice, channel, language="de")
    assert properties["asr"]["language"] == "de-DE" and "en **alemán (Deutsch)**" in card
    properties, _ = await call_join(world, alice, channel)
    assert properties["asr"]["language"] == "de-DE", "the choice is remembered"
    assert properties["tts"]["params"]["voice_setting"]["voice_id"] == LANGUAGES["de"].minimax_voice

    panel = await alice.slash(channel, "memory", language="auto")
    assert "idioma de Discord" in panel.response.content
    assert (await world.store.get_user(alice.id)).language is None
    properties, _ = await call_join(world, alice, channel)
    assert properties["asr"]["language"] == "es-ES", "back to Discord's language"


async def test_an_admins_server_default_is_the_language_of_a_member_with_none_of_their_own(
    simcord_env, world: CallWorld, server, discord_locales
) -> None:
    guild, channel, carol, alice = server
    done = await carol.slash(channel, "settings language", language="fr")
    assert done.ephemeral and "Calls here are now in **French (Français)**" in done.response.content
    assert (await world.store.get_guild_settings(guild.id)).language == "fr"
    shown = await carol.slash(channel, "settings show")
    assert "Français (French)" in shown.response.content

    discord_locales[alice.id] = "pl"  # a Discord language calls cannot be held in
    await world.store.set_consent(alice.id, True, world.clock())
    properties, _ = await call_join(world, alice, channel)
    assert properties["asr"] == {"vendor": "deepgram", "language": "fr-FR", "params": {"language": "fr"}}
    assert properties["llm"]["greeting_message"] == LANGUAGES["fr"].greeting

    discord_locales[alice.id] = "en-US"
    properties, _ = await call_join(world, alice, channel)
    assert properties["asr"]["language"] == "en-US", "Discord's language comes before the server's"


@pytest.mark.parametrize(
    ("code", "asr", "voice", "boost", "native"),
    [("hi", "hi-IN", "hindi_female_2_v1", "Hindi", "हिन्दी"), ("th", "th-TH", "Thai_female_1_sample1", "Thai", "ไทย")],
)
async def test_hindi_and_thai_calls_speak_with_a_voice_minimax_documents(
    simcord_env, world: CallWorld, server, discord_locales, code, asr, voice, boost, native
) -> None:
    """MiniMax documents Hindi and Thai system voices and both ``language_boost`` values (Agora spec §13.2): a
    member whose Discord is in Hindi or Thai gets a call in their language, not English."""
    _, channel, _, alice = server
    discord_locales[alice.id] = code  # Discord's locales "hi" and "th"
    await world.store.set_consent(alice.id, True, world.clock())
    card = await alice.slash(channel, "call")
    call = await world.store.open_call_for_user(alice.id)
    assert call is not None and call.language == code, card.response.content
    properties = world.emu.agent_by_label("call_id", call.call_id).properties
    assert properties["tts"]["params"]["voice_setting"]["voice_id"] == voice
    assert properties["tts"]["params"]["language_boost"] == boost
    assert properties["asr"] == {"vendor": "deepgram", "language": asr, "params": {"language": code}}
    assert properties["llm"]["greeting_message"] == LANGUAGES[code].greeting
    # named in the reader's words (English: Discord's "hi" and "th" have no catalogue), then in its own
    assert f"This call is in **{LANGUAGES[code].name} ({native})**" in card.response.content
    await world.calls.hang_up(alice.id)
