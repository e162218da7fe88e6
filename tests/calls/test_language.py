"""The call-language rule (bot.calls.language): which language a call is held in, and what the presets can serve."""

from __future__ import annotations

from typing import get_args

import pytest

from bot.calls.language import (
    LANGUAGES,
    call_language,
    greeting_for,
    language_of_locale,
    persona_for,
    supported,
)
from bot.config import AgoraSettings

DEFAULT = AgoraSettings()


def test_every_language_uses_an_asr_language_agora_documents() -> None:
    from agora_agent.types.asr_language import AsrLanguage

    documented = set(get_args(get_args(AsrLanguage)[0]))
    assert {language.asr for language in LANGUAGES.values()} <= documented


@pytest.mark.parametrize(
    ("choice", "locale", "server", "expected", "source"),
    [
        ("de", "es-ES", "fr", "de", "choice"),
        (None, "es-ES", "fr", "es", "discord"),
        (None, "es-419", None, "es", "discord"),
        (None, "pt-BR", None, "pt", "discord"),
        (None, "pl", "fr", "fr", "server"),
        (None, None, "fr", "fr", "server"),
        (None, "pl", None, "en", "default"),
        ("xx", None, None, "en", "default"),
    ],
)
def test_choice_then_discord_locale_then_server_default_then_english(
    choice: str | None, locale: str | None, server: str | None, expected: str, source: str
) -> None:
    picked = call_language(DEFAULT, choice=choice, locale=locale, server_default=server)
    assert (picked.code, picked.source, picked.fallback_from) == (expected, source, None)


def test_a_language_the_voice_cannot_speak_falls_back_to_english_and_says_which() -> None:
    own_voice = AgoraSettings(tts_vendor="elevenlabs", tts_params={"key": "k", "voice_id": "v"})
    picked = call_language(own_voice, choice="es", locale=None, server_default=None)
    assert picked.code == "en"
    assert picked.fallback_from == LANGUAGES["es"]
    assert supported(own_voice) == {"en"}


def test_the_minimax_presets_speak_every_language_with_a_documented_voice_as_openai_tts_does() -> None:
    """MiniMax documents Hindi and Thai system voices (Agora spec §13.2): no language falls back with its presets."""
    assert supported(DEFAULT) == set(LANGUAGES)
    assert LANGUAGES["hi"].minimax_voice == "hindi_female_2_v1"
    assert LANGUAGES["th"].minimax_voice == "Thai_female_1_sample1"
    picked = call_language(DEFAULT, choice="th", locale=None, server_default=None)
    assert (picked.code, picked.fallback_from) == ("th", None)
    openai_voice = AgoraSettings(preset="deepgram_nova_3,openai_gpt_4o_mini,openai_tts_1")
    assert supported(openai_voice) == set(LANGUAGES)


def test_locales() -> None:
    assert [language_of_locale(x) for x in ("de", "zh-TW", "en-GB", "sv-SE", "", None)] == [
        "de",
        "zh",
        "en",
        None,
        None,
        None,
    ]


def test_the_persona_asks_for_the_language_and_english_keeps_it_as_it_is() -> None:
    assert persona_for("Be kind.", LANGUAGES["en"]) == "Be kind."
    spanish = persona_for("Be kind.", LANGUAGES["es"])
    assert spanish.startswith("Be kind.") and "always answer in Spanish" in spanish


def test_the_greeting_is_the_servers_only_in_the_servers_language() -> None:
    es, en = LANGUAGES["es"], LANGUAGES["en"]
    assert greeting_for(es, bot_greeting="Hi", server_greeting="¡Buenas!", server_language="es") == "¡Buenas!"
    assert greeting_for(es, bot_greeting="Hi", server_greeting="Howdy", server_language="en") == es.greeting
    assert greeting_for(en, bot_greeting="Hi", server_greeting=None, server_language="en") == "Hi"
    assert greeting_for(en, bot_greeting="Hi", server_greeting="Howdy", server_language="en") == "Howdy"
