"""The join request for one call's agent, from settings, server overrides and the memory context."""

from __future__ import annotations

from typing import Any

from bot.config import AgoraSettings

LLM_PRESETS = ("openai_",)
TTS_PRESETS = ("minimax_", "openai_tts")
FAILURE_MESSAGE = "Sorry, I lost my train of thought for a moment. Could you say that again?"


def preset_for(settings: AgoraSettings, *, live_recall: bool = False) -> str | None:
    """Agora-managed presets, minus the categories an admin configured themselves (with live recall the bot is
    the LLM, so the LLM preset goes; ASR and TTS presets stay)."""
    keep = []
    own_llm = bool(settings.llm_url) or live_recall
    for name in (p.strip() for p in settings.preset.split(",")):
        if not name:
            continue
        if own_llm and name.startswith(LLM_PRESETS) and not name.startswith("openai_tts"):
            continue
        if settings.tts_vendor and name.startswith(TTS_PRESETS):
            continue
        keep.append(name)
    return ",".join(keep) or None


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
) -> dict[str, Any]:
    """`live_llm` is (url, key) of the bot's own LLM route: the agent then sends every turn through the bot."""
    llm: dict[str, Any] = {
        "system_messages": system_messages,
        "max_history": settings.max_history,
        "greeting_message": greeting,
        "failure_message": FAILURE_MESSAGE,
        "params": {"max_tokens": 400, "temperature": 0.7},
    }
    if settings.llm_url:
        llm["url"] = settings.llm_url
        llm["api_key"] = settings.llm_api_key.get_secret_value() if settings.llm_api_key else ""
        if settings.llm_model:
            llm["params"]["model"] = settings.llm_model
    if live_llm is not None:
        # vendor "custom" makes Agora add turn_id and timestamp to each request; the bot picks the model.
        llm.update(url=live_llm[0], api_key=live_llm[1], vendor="custom", style="openai")
        llm["params"].pop("model", None)
    properties: dict[str, Any] = {
        "channel": channel,
        "token": agent_token,
        "agent_rtc_uid": str(agent_uid),
        "remote_rtc_uids": [str(user_uid)],
        "enable_string_uid": False,
        "idle_timeout": settings.idle_timeout_seconds,
        "labels": labels,
        "asr": {"language": settings.asr_language},
        "llm": llm,
    }
    if settings.tts_vendor:
        properties["tts"] = {"vendor": settings.tts_vendor, "params": dict(settings.tts_params)}
    return properties
