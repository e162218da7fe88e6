"""What the ConvoAI contract fixes and the emulator checks against: the test project's credentials, the API's path
prefix, the agent statuses and limits, and the presets, languages, voices and vendors a join may name (spec §4, §12,
§13)."""

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
MINIMAX_SYSTEM_VOICES = frozenset(
    {
        # Spec §4.1 (the join agora-agents 2.12.0 sends) and §8 (its MiniMaxTTS example).
        "English_captivating_female1",
        # Spec §13.2: "System voices include Hindi (`hindi_male_1_v2`, `hindi_female_2_v1`, `hindi_female_1_v2`)
        # and Thai (`Thai_male_1_sample8`, `Thai_male_2_sample2`, `Thai_female_1_sample1`, `Thai_female_2_sample2`),
        # beside the ones the bot uses for the other languages."
        "hindi_male_1_v2",
        "hindi_female_2_v1",
        "hindi_female_1_v2",
        "Thai_male_1_sample8",
        "Thai_male_2_sample2",
        "Thai_female_1_sample1",
        "Thai_female_2_sample2",
        # ... and the ones the bot used for its other languages when §13.2 was written.
        "Spanish_SereneWoman",
        "German_SweetLady",
        "French_FemaleAnchor",
        "Portuguese_SentimentalLady",
        "Italian_BraveHeroine",
        "Dutch_kindhearted_girl",
        "Russian_BrightHeroine",
        "Turkish_CalmWoman",
        "Japanese_KindLady",
        "Korean_SweetGirl",
        "Chinese (Mandarin)_Sweet_Lady",
        "Indonesian_CalmWoman",
        "Vietnamese_kindhearted_girl",
    }
)
"""The MiniMax system voices the spec documents. §13.2: "No Agora page lists which voices a managed MiniMax preset
accepts: treat the documented system voices as accepted", so a managed MiniMax preset refuses any other (the
harshest reading: a voice the docs do not name is one the engine may refuse)."""
DEEPGRAM_LANGUAGE_CODES = frozenset(ASR_LANGUAGES | {tag.split("-", 1)[0] for tag in ASR_LANGUAGES})
"""What ``asr.params.language`` may say with a Deepgram preset. The spec documents no Deepgram list of its own: its
join examples pair ``asr.language`` (one of ``ASR_LANGUAGES``, §4.1 and the SDK's ``AsrLanguage``) with
``"params": {"language": "en"}`` (§4.1's captured request, §8's ``DeepgramSTT(language="en")``), so a code is
documented when it is one of those tags or the bare language of one, exactly as written ("es", "es-ES", "zh-CN");
anything else ("es-MX", "EN", "english") is refused."""
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
