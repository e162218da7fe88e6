"""A join body checked field by field as spec §4.1 and §12 describe, with the preset rules of the package
docstring; the first problem is raised as an :class:`ApiError`."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from standins.agora_emulator.contract import (
    ASR_LANGUAGES,
    ASR_PRESETS,
    DEEPGRAM_LANGUAGE_CODES,
    LLM_PRESETS,
    LLM_STYLES,
    LLM_VENDORS,
    MAX_CHANNEL_BYTES,
    MINIMAX_LANGUAGE_BOOSTS,
    MINIMAX_PRESETS,
    MINIMAX_SYSTEM_VOICES,
    PARAMLESS_LLM_PRESETS,
    TTS_PRESETS,
    TTS_VENDORS,
)
from standins.agora_emulator.fields import (
    ApiError,
    check_int_range,
    check_object,
    check_optional_bool,
    check_system_messages,
    is_numeric_uid,
    required,
)


class JoinValidator:
    """Validates a join body per spec §4.1 and §12; raises ApiError on the first problem."""

    def __init__(self, body: dict[str, Any], check_token: Callable[..., None]) -> None:
        """``check_token(token, channel, uid, enable_rtm=...)`` checks the agent's token, last."""
        self._body = body
        self._check_token = check_token

    def validate(self) -> dict[str, Any]:
        body = self._body
        name = required(body, "name", "name")
        if not isinstance(name, str) or not name.strip():
            raise ApiError(400, "InvalidFieldValue", "name must be a non-empty string")
        presets = self._presets(body.get("preset"))
        pipeline_id = body.get("pipeline_id")
        if pipeline_id is not None and not isinstance(pipeline_id, str):
            raise ApiError(400, "InvalidFieldValue", "pipeline_id must be a string")
        properties = required(body, "properties", "properties")
        check_object(properties, "properties")
        for key in ("channel", "token", "agent_rtc_uid", "remote_rtc_uids"):
            required(properties, key, f"properties.{key}")
        channel = properties["channel"]
        if not isinstance(channel, str) or not channel:
            raise ApiError(400, "InvalidFieldValue", "properties.channel must be a non-empty string")
        if len(channel.encode()) > MAX_CHANNEL_BYTES:
            raise ApiError(400, "InvalidFieldValue", f"properties.channel must be at most {MAX_CHANNEL_BYTES} bytes")
        agent_uid = self._uids(properties)
        check_int_range(properties, "idle_timeout", "properties.idle_timeout", 0, 259_200)
        self._labels(properties.get("labels"))
        enable_rtm = self._enable_rtm(properties.get("advanced_features"))
        uses_mllm = self._uses_mllm(properties.get("mllm"))
        has_pipeline = bool(pipeline_id)
        self._llm(properties.get("llm"), required=not (presets & LLM_PRESETS or has_pipeline or uses_mllm))
        self._tts(properties.get("tts"), required=not (presets & TTS_PRESETS or has_pipeline or uses_mllm))
        if properties.get("asr") is not None:
            check_object(properties["asr"], "properties.asr")
            language = properties["asr"].get("language")
            if language is not None and language not in ASR_LANGUAGES:
                raise ApiError(
                    400, "InvalidFieldValue", f"properties.asr.language {language!r} is not a supported language"
                )
        self._preset_needs(presets, properties)
        self._check_token(properties["token"], channel, agent_uid, enable_rtm=enable_rtm)
        return properties

    @staticmethod
    def _presets(raw: Any) -> set[str]:
        if raw is None:
            return set()
        if not isinstance(raw, str):
            raise ApiError(400, "InvalidFieldValue", "preset must be a comma-separated string")
        names = {part.strip() for part in raw.split(",") if part.strip()}
        unknown = names - (ASR_PRESETS | LLM_PRESETS | TTS_PRESETS)
        if unknown:
            raise ApiError(400, "InvalidFieldValue", f"preset: unknown preset(s) {sorted(unknown)}")
        return names

    @staticmethod
    def _uids(properties: dict[str, Any]) -> str:
        """Checks both UIDs and returns the agent's."""
        agent_uid = properties["agent_rtc_uid"]
        remote_uids = properties["remote_rtc_uids"]
        enable_string_uid = properties.get("enable_string_uid")
        if enable_string_uid is not None and not isinstance(enable_string_uid, bool):
            raise ApiError(400, "InvalidFieldValue", "properties.enable_string_uid must be a boolean")
        if not isinstance(agent_uid, str):
            raise ApiError(400, "InvalidFieldValue", "properties.agent_rtc_uid must be a string")
        if not isinstance(remote_uids, list) or not all(isinstance(uid, str) for uid in remote_uids):
            raise ApiError(400, "InvalidFieldValue", "properties.remote_rtc_uids must be an array of strings")
        if len(remote_uids) != 1:
            raise ApiError(400, "InvalidFieldValue", "properties.remote_rtc_uids: exactly one user ID is supported")
        remote_uid = remote_uids[0]
        for label, uid in (
            ("properties.agent_rtc_uid", agent_uid),
            ("properties.remote_rtc_uids", remote_uid),
        ):
            if enable_string_uid:
                if not uid or len(uid) > 255:
                    raise ApiError(400, "InvalidFieldValue", f"{label}: string user IDs are 1-255 characters")
            elif not is_numeric_uid(uid):
                raise ApiError(
                    400,
                    "InvalidFieldValue",
                    f"{label} must be a numeric string (0..2^32-1) without enable_string_uid",
                )
        if agent_uid == remote_uid:
            raise ApiError(400, "InvalidFieldValue", "properties.agent_rtc_uid must differ from the remote user ID")
        return agent_uid

    @staticmethod
    def _labels(raw: Any) -> None:
        if raw is None:
            return
        if not isinstance(raw, dict) or not all(
            isinstance(key, str) and isinstance(value, str) for key, value in raw.items()
        ):
            raise ApiError(400, "InvalidFieldValue", "properties.labels must map strings to strings")

    @staticmethod
    def _enable_rtm(raw: Any) -> bool:
        if raw is None:
            return False
        check_object(raw, "properties.advanced_features")
        check_optional_bool(raw, "enable_rtm", "properties.advanced_features.enable_rtm")
        check_optional_bool(raw, "enable_tools", "properties.advanced_features.enable_tools")
        return bool(raw.get("enable_rtm"))

    @staticmethod
    def _uses_mllm(raw: Any) -> bool:
        if raw is None:
            return False
        check_object(raw, "properties.mllm")
        return raw.get("enable") is True

    @staticmethod
    def _llm(raw: Any, *, required: bool) -> None:
        if raw is None:
            if required:
                raise ApiError(400, "MissingRequiredField", "properties.llm is required")
            return
        check_object(raw, "properties.llm")
        url = raw.get("url")
        if url is None and required:
            raise ApiError(400, "MissingRequiredField", "properties.llm.url is required")
        if url is not None and (not isinstance(url, str) or not re.match(r"https?://\S+$", url)):
            raise ApiError(400, "InvalidFieldValue", "properties.llm.url must be an http(s) URL")
        check_int_range(raw, "max_history", "properties.llm.max_history", 1, 1024)
        if raw.get("system_messages") is not None:
            check_system_messages(raw["system_messages"])
        if raw.get("params") is not None:
            check_object(raw["params"], "properties.llm.params")
        for key in ("greeting_message", "failure_message", "api_key"):
            if raw.get(key) is not None and not isinstance(raw[key], str):
                raise ApiError(400, "InvalidFieldValue", f"properties.llm.{key} must be a string")
        if raw.get("vendor") is not None and raw["vendor"] not in LLM_VENDORS:
            raise ApiError(400, "InvalidFieldValue", f"properties.llm.vendor must be one of {sorted(LLM_VENDORS)}")
        if raw.get("style") is not None and raw["style"] not in LLM_STYLES:
            raise ApiError(400, "InvalidFieldValue", f"properties.llm.style must be one of {sorted(LLM_STYLES)}")
        if raw.get("mcp_servers") is not None:
            check_mcp_servers(raw["mcp_servers"])

    @staticmethod
    def _preset_needs(presets: set[str], properties: dict[str, Any]) -> None:
        """What a preset needs from the request and what it refuses (see the package docstring)."""
        if presets & ASR_PRESETS:
            asr = properties.get("asr") or {}
            if asr.get("vendor") not in (None, "deepgram"):
                raise ApiError(
                    400, "InvalidFieldValue", "properties.asr.vendor must be deepgram with a Deepgram ASR preset"
                )
            params = asr.get("params")
            if params is not None:
                check_object(params, "properties.asr.params")
                language = params.get("language")
                if language is not None and language not in DEEPGRAM_LANGUAGE_CODES:
                    raise ApiError(
                        400,
                        "InvalidFieldValue",
                        f"properties.asr.params.language {language!r} is not a documented Deepgram language code",
                    )
                heard = asr.get("language")
                if (
                    isinstance(language, str)
                    and isinstance(heard, str)
                    and primary_language(language) != primary_language(heard)
                ):
                    raise ApiError(
                        400,
                        "InvalidFieldValue",
                        f"properties.asr.params.language {language!r} is another language than asr.language {heard!r}",
                    )
        if presets & MINIMAX_PRESETS:
            tts = properties.get("tts") or {}
            voice = ((tts.get("params") or {}).get("voice_setting") or {}).get("voice_id")
            if not isinstance(voice, str) or not voice.strip():
                raise ApiError(
                    400,
                    "MissingRequiredField",
                    "properties.tts.params.voice_setting.voice_id is required with a MiniMax TTS preset",
                )
            if voice not in MINIMAX_SYSTEM_VOICES:
                raise ApiError(
                    400,
                    "InvalidFieldValue",
                    f"properties.tts.params.voice_setting.voice_id {voice!r} is not a documented MiniMax system voice",
                )
            if tts.get("vendor") not in (None, "minimax"):
                raise ApiError(400, "InvalidFieldValue", "properties.tts.vendor must be minimax with a MiniMax preset")
            boost = (tts.get("params") or {}).get("language_boost")
            if boost is not None and boost not in MINIMAX_LANGUAGE_BOOSTS:
                raise ApiError(
                    400, "InvalidFieldValue", f"properties.tts.params.language_boost {boost!r} is not a MiniMax value"
                )
        if presets & PARAMLESS_LLM_PRESETS:
            params = (properties.get("llm") or {}).get("params") or {}
            refused = sorted(set(params) & {"max_tokens", "temperature"})
            if refused:
                raise ApiError(
                    400, "InvalidFieldValue", f"properties.llm.params: {refused} are not supported by this model"
                )

    @staticmethod
    def _tts(raw: Any, *, required: bool) -> None:
        if raw is None:
            if required:
                raise ApiError(400, "MissingRequiredField", "properties.tts is required")
            return
        check_object(raw, "properties.tts")
        vendor = raw.get("vendor")
        if vendor is None:
            if required:
                raise ApiError(400, "MissingRequiredField", "properties.tts.vendor is required")
            return
        if vendor not in TTS_VENDORS:
            raise ApiError(400, "InvalidFieldValue", f"properties.tts.vendor must be one of {sorted(TTS_VENDORS)}")


def primary_language(language: str) -> str:
    """The language of a BCP-47 tag, without its region: "es" for "es-ES" and "es"."""
    return language.split("-", 1)[0].lower()


MCP_SERVER_NAME = re.compile(r"[A-Za-z0-9]{1,48}")


def check_mcp_servers(servers: Any) -> None:
    """``llm.mcp_servers``: spec §4.1, "object[] | `name`, `endpoint`, `transport`, `headers`, `allowed_tools`,
    `timeout_ms`"; spec §13.1, "`llm.mcp_servers[].name`: at most 48 characters, English letters and numbers only
    (join.mdx)". The emulator also wants a name and an http(s) ``endpoint`` in each (◇: a server it cannot name
    or reach is one no engine could use) and each other field of the type its name says."""
    if not isinstance(servers, list):
        raise ApiError(400, "InvalidFieldValue", "properties.llm.mcp_servers must be an array")
    for index, server in enumerate(servers):
        label = f"properties.llm.mcp_servers[{index}]"
        check_object(server, label)
        name = required(server, "name", f"{label}.name")
        if not isinstance(name, str) or MCP_SERVER_NAME.fullmatch(name) is None:
            raise ApiError(
                400,
                "InvalidFieldValue",
                f"{label}.name {name!r}: at most 48 characters, English letters and numbers only",
            )
        endpoint = required(server, "endpoint", f"{label}.endpoint")
        if not isinstance(endpoint, str) or not re.match(r"https?://\S+$", endpoint):
            raise ApiError(400, "InvalidFieldValue", f"{label}.endpoint must be an http(s) URL")
        if server.get("transport") is not None and not isinstance(server["transport"], str):
            raise ApiError(400, "InvalidFieldValue", f"{label}.transport must be a string")
        headers = server.get("headers")
        if headers is not None and not (
            isinstance(headers, dict) and all(isinstance(v, str) for v in headers.values())
        ):
            raise ApiError(400, "InvalidFieldValue", f"{label}.headers must map strings to strings")
        allowed = server.get("allowed_tools")
        if allowed is not None and not (isinstance(allowed, list) and all(isinstance(t, str) for t in allowed)):
            raise ApiError(400, "InvalidFieldValue", f"{label}.allowed_tools must be an array of strings")
        check_int_range(server, "timeout_ms", f"{label}.timeout_ms", 0, 2**31 - 1)
