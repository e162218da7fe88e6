"""The join request for one call's agent, from settings, server overrides and the memory context, and what the
agent's status and exit message mean for the call.

This module is the one place that shapes the ``/join`` body (and the ``/update`` that renews the agent's token).
"""

from __future__ import annotations

import re
from typing import Any

from bot.calls.language import ENGLISH, LANGUAGES, Language, tts_kind
from bot.config import AgoraSettings
from bot.store.models import EndReason

LLM_PRESETS = ("openai_gpt",)
TTS_PRESETS = ("minimax_", "openai_tts")
MINIMAX_PRESETS = ("minimax_",)
DEEPGRAM_PRESETS = ("deepgram_",)
PARAMLESS_LLM_PRESETS = ("openai_gpt_5",)
"""GPT-5 models refuse ``max_tokens`` and any ``temperature`` but the default: send them no sampling params."""
DEFAULT_LLM_PARAMS: dict[str, Any] = {"max_tokens": 400, "temperature": 0.7}
FAILURE_MESSAGE = LANGUAGES[ENGLISH].failure


def _preset_names(settings: AgoraSettings) -> list[str]:
    return [name for name in (p.strip() for p in settings.preset.split(",")) if name]


def _managed_minimax_voice(settings: AgoraSettings) -> bool:
    """True when the admin's TTS settings only pick a voice for Agora's managed MiniMax (no key of their own)."""
    return settings.tts_vendor is None or (settings.tts_vendor == "minimax" and "key" not in settings.tts_params)


def preset_for(settings: AgoraSettings, *, live_recall: bool = False) -> str | None:
    """Agora-managed presets, minus the categories an admin configured themselves (with live recall the bot is
    the LLM, so the LLM preset goes; ASR and TTS presets stay)."""
    keep = []
    own_llm = bool(settings.llm_url) or live_recall
    for name in _preset_names(settings):
        if own_llm and name.startswith(LLM_PRESETS):
            continue
        if (
            name.startswith(TTS_PRESETS)
            and settings.tts_vendor
            and not (name.startswith(MINIMAX_PRESETS) and _managed_minimax_voice(settings))
        ):
            continue
        keep.append(name)
    return ",".join(keep) or None


def llm_params(settings: AgoraSettings, *, live_recall: bool = False) -> dict[str, Any]:
    """``llm.params``: the admin's ``agora.llm_params`` when set, else safe defaults for the LLM in use. With live
    recall the bot's route picks the model (``llm.model``), so none is sent."""
    if live_recall:
        params = dict(settings.llm_params if settings.llm_params is not None else DEFAULT_LLM_PARAMS)
        params.pop("model", None)
        return params
    if settings.llm_params is not None:
        params = dict(settings.llm_params)
    elif not settings.llm_url and any(p.startswith(PARAMLESS_LLM_PRESETS) for p in _preset_names(settings)):
        params = {}
    else:
        params = dict(DEFAULT_LLM_PARAMS)
    if settings.llm_url and settings.llm_model:
        params["model"] = settings.llm_model
    return params


def tts_config(settings: AgoraSettings, preset: str | None, language: Language | None = None) -> dict[str, Any] | None:
    """``tts``: the voice for a MiniMax preset (always sent), the admin's own vendor, or nothing. A call in
    another language than English gets that language's MiniMax voice and ``language_boost`` (the params Agora's SDK
    sends for ``MiniMaxTTS(voice_id=..., language_boost=...)``); OpenAI's voices speak any language as they are."""
    presets = [p.strip() for p in (preset or "").split(",")]
    foreign = language is not None and language.code != ENGLISH
    if any(p.startswith(MINIMAX_PRESETS) for p in presets):
        params = dict(settings.tts_params)
        voice_setting = dict(params.get("voice_setting") or {})
        voice_setting.setdefault("voice_id", settings.tts_voice)
        params["voice_setting"] = voice_setting
        tts = {"vendor": "minimax", "params": params}
        return _in_language(tts, language) if foreign else tts
    if settings.tts_vendor:
        own = {"vendor": settings.tts_vendor, "params": dict(settings.tts_params)}
        return _in_language(own, language) if foreign and tts_kind(settings) == "minimax" else own
    return None


def _in_language(tts: dict[str, Any], language: Language | None) -> dict[str, Any]:
    """A MiniMax ``tts`` speaking ``language``: its system voice and ``language_boost``."""
    assert language is not None and language.minimax_voice is not None, "bot.calls.language.supported checks this"
    params = dict(tts["params"])
    params["voice_setting"] = {**(params.get("voice_setting") or {}), "voice_id": language.minimax_voice}
    if language.minimax_boost:
        params["language_boost"] = language.minimax_boost
    return {**tts, "params": params}


def asr_config(settings: AgoraSettings, preset: str | None, language: Language | None = None) -> dict[str, Any]:
    """``asr``: with a Deepgram preset, vendor ``deepgram`` and the language in its params as well, exactly what
    Agora's SDK sends for ``DeepgramSTT(model="nova-3", language=...)`` behind the same preset (and what Agora's
    preset join examples send); otherwise the language alone (Agora's default recognizer). English calls use
    ``agora.asr_language``; other languages the table's Agora and Deepgram codes."""
    if language is None or language.code == ENGLISH:
        language_tag, deepgram = settings.asr_language, settings.asr_language
    else:
        language_tag, deepgram = language.asr, language.deepgram
    presets = [p.strip() for p in (preset or "").split(",")]
    if any(p.startswith(DEEPGRAM_PRESETS) for p in presets):
        return {"vendor": "deepgram", "language": language_tag, "params": {"language": deepgram}}
    return {"language": language_tag}


def join_properties(
    settings: AgoraSettings,
    *,
    channel: str,
    agent_token: str,
    agent_uid: int,
    user_uid: int,
    system_messages: list[dict[str, str]],
    greeting: str,
    labels: dict[str, str],
    live_llm: tuple[str, str] | None = None,
    language: Language | None = None,
) -> dict[str, Any]:
    """`live_llm` is (url, key) of the bot's own LLM route: the agent then sends every turn through the bot.
    `language` is the call's (`bot.calls.language.call_language`); None or English: the bot-wide settings."""
    live = live_llm is not None
    preset = preset_for(settings, live_recall=live)
    llm: dict[str, Any] = {
        "system_messages": system_messages,
        "max_history": settings.max_history,
        "greeting_message": greeting,
        "failure_message": (language or LANGUAGES[ENGLISH]).failure,
    }
    params = llm_params(settings, live_recall=live)
    if params:
        llm["params"] = params
    if settings.llm_url:
        llm["url"] = settings.llm_url
        llm["api_key"] = settings.llm_api_key.get_secret_value() if settings.llm_api_key else ""
    if live_llm is not None:
        # vendor "custom" makes Agora add turn_id and timestamp to each request.
        llm.update(url=live_llm[0], api_key=live_llm[1], vendor="custom", style="openai")
    properties: dict[str, Any] = {
        "channel": channel,
        "token": agent_token,
        "agent_rtc_uid": str(agent_uid),
        "remote_rtc_uids": [str(user_uid)],
        "enable_string_uid": False,
        "idle_timeout": settings.idle_timeout_seconds,
        "labels": labels,
        "asr": asr_config(settings, preset, language),
        "llm": llm,
    }
    tts = tts_config(settings, preset, language)
    if tts is not None:
        properties["tts"] = tts
    return properties


def token_update(agent_token: str) -> dict[str, Any]:
    """The ``/update`` properties that give a running agent a fresh token (nothing else changes)."""
    return {"token": agent_token}


STOP_REASONS: dict[str, EndReason] = {
    "Idle for too long": "idle_timeout",
    "Task lifetime limit exceeded": "agent_lifetime",
    "Connecting for too long": "agent_failed",
    "RTC connection error": "agent_failed",
    "OK": "agent_stopped",
}
RUNNING_STATUSES = frozenset({"IDLE", "STARTING", "RUNNING", "RECOVERING"})
_REASON_WRAPPER = re.compile(r"reason:\s*(?P<reason>.*)$", re.IGNORECASE | re.DOTALL)


def stop_reason(message: str | None) -> EndReason:
    """Our end reason for Agora's exit message, bare ("Idle for too long") as NCS 102 sends it or wrapped
    ("agent exits with reason: Idle for too long") as the query endpoint does."""
    text = (message or "").strip()
    wrapped = _REASON_WRAPPER.search(text)
    if wrapped:
        text = wrapped.group("reason").strip().rstrip(".").strip()
    if text in STOP_REASONS:
        return STOP_REASONS[text]
    lowered = text.lower()
    for known, reason in STOP_REASONS.items():
        if known != "OK" and known.lower() in lowered:
            return reason
    return "agent_stopped"
