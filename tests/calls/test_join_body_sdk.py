"""The bot's ``/join`` body next to what Agora's Python SDK (``agora-agents``) builds and accepts for the same
pipeline."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from bot.agora.tokens import build_rtc_token
from bot.calls.agent import join_properties, preset_for
from bot.calls.language import LANGUAGES, Language
from bot.config import AgoraSettings
from standins.agora_emulator import TEST_APP_CERTIFICATE, TEST_APP_ID

CHANNEL, AGENT_UID, USER_UID = "call-sdk", 1001, 2002
SYSTEM = [{"role": "system", "content": "You are a helpful voice assistant."}]
PRESET_SUPPLIED = {(("params", field), "missing") for field in ("key", "api_key", "model", "url")}
"""What a preset provides for its category: "you do not need to supply the provider's endpoint URL, API key, or
model name" (Agora's presets page)."""


def bot_body(
    settings: AgoraSettings, *, live_llm: tuple[str, str] | None = None, language: Language | None = None
) -> tuple[str | None, dict[str, Any]]:
    properties = join_properties(
        settings,
        channel=CHANNEL,
        agent_token=build_rtc_token(TEST_APP_ID, TEST_APP_CERTIFICATE, CHANNEL, AGENT_UID, 3600),
        agent_uid=AGENT_UID,
        user_uid=USER_UID,
        system_messages=SYSTEM,
        greeting=settings.greeting,
        labels={"call_id": "c1"},
        live_llm=live_llm,
        language=language,
    )
    return preset_for(settings, live_recall=live_llm is not None), properties


def sdk_body(
    monkeypatch: pytest.MonkeyPatch, settings: AgoraSettings, language: Language | None = None
) -> dict[str, Any]:
    """The start request Agora's SDK sends for the bot's default pipeline (Agora-managed Deepgram nova-3, GPT-4o
    mini and MiniMax speech-2.6-turbo), captured on a mock transport; with `language`, held in that language (the
    SDK's ``asr.language`` is its turn detection's)."""
    monkeypatch.setenv("AGORA_AGENTS_API_BASE_URL", "http://127.0.0.1:9")
    from agora_agent import Agora, Area
    from agora_agent.agentkit import Agent
    from agora_agent.agentkit.vendors import DeepgramSTT, MiniMaxTTS, OpenAI

    sent: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json={"agent_id": "A1", "create_ts": 1, "status": "RUNNING"})

    client = Agora(
        area=Area.US,
        app_id=TEST_APP_ID,
        app_certificate=TEST_APP_CERTIFICATE,
        httpx_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )
    stt = DeepgramSTT(model="nova-3", language=language.deepgram if language else settings.asr_language)
    tts = (
        MiniMaxTTS(model="speech_2_6_turbo", voice_id=language.minimax_voice, language_boost=language.minimax_boost)
        if language
        else MiniMaxTTS(model="speech_2_6_turbo", voice_id=settings.tts_voice)
    )
    turn_detection = {"language": language.asr} if language else None
    agent = (
        Agent(
            client=client, greeting=settings.greeting, max_history=settings.max_history, turn_detection=turn_detection
        )
        .with_stt(stt)
        .with_llm(OpenAI(model="gpt-4o-mini", system_messages=SYSTEM))
        .with_tts(tts)
    )
    session = agent.create_session(channel=CHANNEL, agent_uid=str(AGENT_UID), remote_uids=[str(USER_UID)], name="n")
    session.start()
    (body,) = sent
    return body


def test_the_deepgram_preset_join_sends_the_asr_agoras_sdk_sends(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = AgoraSettings()
    preset, properties = bot_body(settings)
    sdk = sdk_body(monkeypatch, settings)

    assert preset == sdk["preset"] == "deepgram_nova_3,openai_gpt_4o_mini,minimax_speech_2_6_turbo"
    assert properties["asr"] == sdk["properties"]["asr"]
    assert properties["asr"] == {"vendor": "deepgram", "language": "en-US", "params": {"language": "en-US"}}
    assert properties["tts"] == sdk["properties"]["tts"]


def test_a_spanish_call_sends_the_asr_and_voice_agoras_sdk_sends_for_spanish(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = AgoraSettings()
    spanish = LANGUAGES["es"]
    _, properties = bot_body(settings, language=spanish)
    sdk = sdk_body(monkeypatch, settings, spanish)

    assert properties["asr"] == sdk["properties"]["asr"]
    assert properties["asr"] == {"vendor": "deepgram", "language": "es-ES", "params": {"language": "es"}}
    assert properties["tts"] == sdk["properties"]["tts"]
    assert properties["tts"]["params"] == {
        "voice_setting": {"voice_id": "Spanish_SereneWoman"},
        "language_boost": "Spanish",
    }
    assert properties["llm"]["failure_message"] == spanish.failure


def preset_supplied_gaps(properties: dict[str, Any], category: str) -> list[tuple[Any, ...]]:
    """Where ``properties[category]`` falls short of the SDK's model for its own vendor (``Asr_Deepgram``,
    ``Tts_Minimax``...), everything else parsed strictly; empty when it parses."""
    from agora_agent.agents.types.start_agents_request_properties import StartAgentsRequestProperties
    from agora_agent.core.pydantic_utilities import parse_obj_as
    from pydantic import ValidationError

    others = {key: value for key, value in properties.items() if key not in ("asr", "llm", "tts")}
    try:
        parse_obj_as(StartAgentsRequestProperties, {**others, category: properties[category]})
    except ValidationError as exc:
        member = f"{category.capitalize()}_{str(properties[category].get('vendor', '')).capitalize()}"
        return [(error["loc"][2:], error["type"]) for error in exc.errors() if error["loc"][1:2] == (member,)]
    return []


@pytest.mark.parametrize(
    ("agora", "live_llm"),
    [
        ({}, None),
        ({"asr_language": "de-DE", "preset": "deepgram_nova_2,openai_gpt_5_mini,openai_tts_1"}, None),
        ({"preset": "openai_gpt_4o_mini,minimax_speech_2_6_turbo"}, None),
        ({"llm_url": "https://llm.example.test/v1/chat/completions", "llm_model": "m"}, None),
        ({}, ("https://bot.example.test/agora/llm/c1", "route-key")),
        ({"tts_vendor": "microsoft", "tts_params": {"key": "k", "region": "eastus", "voice_name": "en-US-A"}}, None),
    ],
)
@pytest.mark.parametrize("language", [None, "es", "ja"])
def test_the_join_body_validates_through_the_sdks_models(
    agora: dict[str, Any], live_llm: tuple[str, str] | None, language: str | None
) -> None:
    """The SDK's own check before a start request (``AgentSession._request_properties_for_start``) passes, and,
    stricter than that check (which stops looking once a preset-covered category fails), every part of the body
    parses as the SDK's models, except what an Agora-managed preset supplies in its place (URL, key, model)."""
    from agora_agent.agentkit.agent_session import AgentSession
    from agora_agent.agentkit.presets import get_preset_category

    settings = AgoraSettings(**agora)
    preset, properties = bot_body(settings, live_llm=live_llm, language=LANGUAGES[language] if language else None)

    AgentSession._request_properties_for_start(properties, resolved_preset=preset, pipeline_id=None)
    covered = {get_preset_category(name) for name in (preset or "").split(",")}
    for category in ("asr", "llm", "tts"):
        if category not in properties:
            continue
        gaps = preset_supplied_gaps(properties, category)
        if category in covered:
            assert set(gaps) <= PRESET_SUPPLIED, gaps
        else:
            assert gaps == [], gaps
    if "asr" not in covered:
        assert properties["asr"] == {"language": LANGUAGES[language].asr if language else settings.asr_language}
