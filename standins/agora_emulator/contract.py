"""What the ConvoAI contract fixes and the emulator checks against: the test project's credentials, the API's path
prefix, the agent statuses and limits, and the presets, languages and vendors a join may name (spec §4, §12)."""

from __future__ import annotations

TEST_APP_ID = "970CA35de60c44645bbae8a215061b33"
TEST_APP_CERTIFICATE = "5CFd2fd1755d40ecb72977518be15d3b"
TEST_CUSTOMER_ID = "3f0c9a1e5b7d4c2a8e6f1b3d5a7c9e0f"
TEST_CUSTOMER_SECRET = "9b8a7c6d5e4f3a2b1c0d9e8f7a6b5c4d"
TEST_WEBHOOK_SECRET = "emulator-webhook-secret"

API_PREFIX = "/api/conversational-ai-agent"
STATUS_CODES = {
    "IDLE": 0,
    "STARTING": 1,
    "RUNNING": 2,
    "STOPPING": 3,
    "STOPPED": 4,
    "RECOVERING": 5,
    "FAILED": 6,
}
ACTIVE_STATUSES = frozenset({"STARTING", "RUNNING"})
TERMINAL_STATUSES = frozenset({"STOPPED", "FAILED"})
MAX_LIFETIME_SECONDS = 72 * 3600
TOKEN_EXPIRY_WARNING_SECONDS = 30
STARTUP_SECONDS = 1.0
DEFAULT_IDLE_TIMEOUT = 30
DEFAULT_MAX_HISTORY = 32
MAX_CHANNEL_BYTES = 64
MAX_SPEAK_BYTES = 512
LIST_DEFAULT_WINDOW_SECONDS = 2 * 3600
TURNS_RETENTION_SECONDS = 7 * 86400
TURNS_PAGE_SIZES = (10, 200)
TURNS_DEFAULT_PAGE_SIZE = 50

ASR_PRESETS = frozenset({"deepgram_nova_2", "deepgram_nova_3"})
LLM_PRESETS = frozenset({"openai_gpt_4o_mini", "openai_gpt_4_1_mini", "openai_gpt_5_nano", "openai_gpt_5_mini"})
TTS_PRESETS = frozenset({"minimax_speech_2_6_turbo", "minimax_speech_2_8_turbo", "openai_tts_1"})
MINIMAX_PRESETS = frozenset({"minimax_speech_2_6_turbo", "minimax_speech_2_8_turbo"})
ASR_LANGUAGES = frozenset(
    "ar-EG ar-JO ar-SA ar-AE bn-IN zh-CN zh-HK zh-TW nl-NL en-IN en-US fil-PH fr-FR de-DE gu-IN he-IL hi-IN id-ID "  # noqa: SIM905
    "it-IT ja-JP kn-IN ko-KR ms-MY fa-IR pt-PT ru-RU es-ES ta-IN te-IN th-TH tr-TR vi-VN".split()
)
"""``asr.language`` values Agora documents (agora-agents 2.12.0, ``agora_agent.types.asr_language.AsrLanguage``)."""
MINIMAX_LANGUAGE_BOOSTS = frozenset(
    "auto Chinese Chinese,Yue English Arabic Russian Spanish French Portuguese German Turkish Dutch Ukrainian "  # noqa: SIM905
    "Vietnamese Indonesian Japanese Italian Korean Thai Polish Romanian Greek Czech Finnish Hindi Bulgarian Danish "
    "Hebrew Malay Persian Slovak Swedish Croatian Filipino Hungarian Norwegian Slovenian Catalan Nynorsk Tamil "
    "Afrikaans".split(" ")
)
"""MiniMax's ``language_boost`` values (its T2A API reference)."""
PARAMLESS_LLM_PRESETS = frozenset({"openai_gpt_5_nano", "openai_gpt_5_mini"})
TTS_VENDORS = frozenset(
    {
        "microsoft",
        "elevenlabs",
        "minimax",
        "deepgram",
        "murf",
        "cartesia",
        "openai",
        "humeai",
        "rime",
        "fishaudio",
        "google",
        "amazon",
        "sarvam",
        "xai",
    }
)
LLM_VENDORS = frozenset({"openai", "azure", "xai", "custom"})
LLM_STYLES = frozenset({"openai", "gemini", "anthropic", "dify", "bedrock"})
SPEAK_PRIORITIES = frozenset({"INTERRUPT", "APPEND", "IGNORE"})
