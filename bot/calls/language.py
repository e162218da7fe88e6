"""The language a member's call is held in, and what that language changes in the agent's join request.

One rule, here and nowhere else: the member's own choice (``/call language:`` or ``/memory language:``,
remembered), else their Discord language (the interaction's locale), else the server's default (``/settings
language``), else English. A language the configured ASR and TTS presets cannot serve falls back to English, and
the call says so (``CallLanguage.fallback_from``).

The table names, per language, what Agora's documented ``asr.language`` values call it (the ``AsrLanguage`` list of
Agora's SDK, ``agora-agents``), the Deepgram language code Agora's SDK puts in ``asr.params.language``, a MiniMax
system voice and ``language_boost`` for the managed MiniMax presets (voices from MiniMax's system voice list; Hindi's
and Thai's are the ones the Agora spec's §13.2 names), and what the agent says first and when its LLM
fails. English keeps the bot-wide settings (``agora.asr_language``, ``agora.tts_voice``, ``agora.greeting``), so an
English call's join request is what it always was.

No Discord types here: the cogs pass the locale's text (``"es-ES"``)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from bot.config import AGORA_DEFAULT_TTS_VOICE, AgoraSettings

ENGLISH = "en"
AUTOMATIC = "auto"
"""What a member picks to drop their choice: their Discord language (or the server's default) applies again."""

Source = Literal["choice", "discord", "server", "default"]


@dataclass(frozen=True)
class Language:
    code: str
    """What members pick and the call record stores (``calls.language``): a bare ISO 639-1 code."""
    name: str
    native: str
    asr: str
    """``asr.language``: one of the values Agora documents (its SDK's ``AsrLanguage``)."""
    deepgram: str
    """``asr.params.language`` with a Deepgram preset."""
    minimax_voice: str | None
    """A MiniMax system voice for this language (None: MiniMax documents none, and the call falls back to English)."""
    minimax_boost: str | None
    """MiniMax's ``language_boost`` for this language."""
    greeting: str
    failure: str
    """Spoken when the agent's LLM fails (``llm.failure_message``)."""
    welcome: str = "Welcome back, {name}!"
    """A returning member's first words (``{name}``: how they are greeted), before a question on their last
    conversation or ``ask``."""
    ask: str = "What would you like to talk about today?"

    @property
    def label(self) -> str:
        """ "Español (Spanish)"; English alone for English."""
        return self.name if self.native == self.name else f"{self.native} ({self.name})"


def _language(
    code: str,
    name: str,
    native: str,
    asr: str,
    voice: str | None,
    boost: str | None,
    greeting: str,
    failure: str,
    *,
    deepgram: str | None = None,
) -> Language:
    welcome, ask = _WELCOMES[code]
    return Language(code, name, native, asr, deepgram or code, voice, boost, greeting, failure, welcome, ask)


_WELCOMES: dict[str, tuple[str, str]] = {
    "en": ("Welcome back, {name}!", "What would you like to talk about today?"),
    "es": ("¡Hola de nuevo, {name}!", "¿De qué quieres hablar hoy?"),
    "de": ("Willkommen zurück, {name}!", "Worüber möchtest du heute sprechen?"),
    "fr": ("Re-bonjour, {name} !", "De quoi veux-tu parler aujourd'hui ?"),
    "pt": ("Que bom ouvir você de novo, {name}!", "Sobre o que quer conversar hoje?"),
    "it": ("Ciao di nuovo, {name}!", "Di cosa vuoi parlare oggi?"),
    "nl": ("Welkom terug, {name}!", "Waar wil je het vandaag over hebben?"),
    "ru": ("С возвращением, {name}!", "О чём хочешь поговорить сегодня?"),
    "tr": ("Tekrar hoş geldin, {name}!", "Bugün ne hakkında konuşmak istersin?"),
    "ja": ("{name}さん、おかえりなさい！", "今日は何を話しましょうか？"),
    "ko": ("{name}님, 다시 오셨네요!", "오늘은 어떤 이야기를 할까요?"),
    "zh": ("{name}，欢迎回来！", "今天想聊些什么？"),
    "id": ("Selamat datang kembali, {name}!", "Mau ngobrol tentang apa hari ini?"),
    "vi": ("Chào mừng bạn quay lại, {name}!", "Hôm nay bạn muốn nói về điều gì?"),
    "hi": ("फिर से स्वागत है, {name}!", "आज आप किस बारे में बात करना चाहेंगे?"),
    "th": ("ยินดีต้อนรับกลับมา {name}!", "วันนี้อยากคุยเรื่องอะไรดี?"),
}
"""Per language: how a returning member is welcomed by name, and the question said when there is no follow-up."""


LANGUAGES: dict[str, Language] = {
    language.code: language
    for language in (
        _language(
            "en",
            "English",
            "English",
            "en-US",
            AGORA_DEFAULT_TTS_VOICE,
            None,
            AgoraSettings.model_fields["greeting"].default,
            "Sorry, I lost my train of thought for a moment. Could you say that again?",
        ),
        _language(
            "es",
            "Spanish",
            "Español",
            "es-ES",
            "Spanish_SereneWoman",
            "Spanish",
            "¡Hola! Qué alegría oírte. ¿De qué quieres hablar?",
            "Perdona, se me ha ido el hilo un momento. ¿Me lo repites?",
        ),
        _language(
            "de",
            "German",
            "Deutsch",
            "de-DE",
            "German_SweetLady",
            "German",
            "Hallo! Schön, von dir zu hören. Worüber möchtest du sprechen?",
            "Entschuldige, ich habe kurz den Faden verloren. Kannst du das noch einmal sagen?",
        ),
        _language(
            "fr",
            "French",
            "Français",
            "fr-FR",
            "French_FemaleAnchor",
            "French",
            "Bonjour ! Ça me fait plaisir de t'entendre. De quoi veux-tu parler ?",
            "Pardon, j'ai perdu le fil un instant. Tu peux répéter ?",
        ),
        _language(
            "pt",
            "Portuguese",
            "Português",
            "pt-PT",
            "Portuguese_SentimentalLady",
            "Portuguese",
            "Olá! Que bom ouvir você. Sobre o que quer conversar?",
            "Desculpe, perdi o fio da meada por um momento. Pode repetir?",
        ),
        _language(
            "it",
            "Italian",
            "Italiano",
            "it-IT",
            "Italian_BraveHeroine",
            "Italian",
            "Ciao! Che bello sentirti. Di cosa vuoi parlare?",
            "Scusa, ho perso il filo per un attimo. Puoi ripetere?",
        ),
        _language(
            "nl",
            "Dutch",
            "Nederlands",
            "nl-NL",
            "Dutch_kindhearted_girl",
            "Dutch",
            "Hallo! Leuk je te horen. Waar wil je het over hebben?",
            "Sorry, ik was even de draad kwijt. Kun je dat nog eens zeggen?",
        ),
        _language(
            "ru",
            "Russian",
            "Русский",
            "ru-RU",
            "Russian_BrightHeroine",
            "Russian",
            "Привет! Рада тебя слышать. О чём хочешь поговорить?",
            "Извини, я на секунду потеряла мысль. Повтори, пожалуйста?",
        ),
        _language(
            "tr",
            "Turkish",
            "Türkçe",
            "tr-TR",
            "Turkish_CalmWoman",
            "Turkish",
            "Merhaba! Sesini duymak güzel. Ne hakkında konuşmak istersin?",
            "Kusura bakma, bir an konuyu kaçırdım. Tekrar söyler misin?",
        ),
        _language(
            "ja",
            "Japanese",
            "日本語",
            "ja-JP",
            "Japanese_KindLady",
            "Japanese",
            "こんにちは！お話しできてうれしいです。今日は何を話しましょうか？",
            "すみません、少し考えがまとまりませんでした。もう一度言っていただけますか？",
        ),
        _language(
            "ko",
            "Korean",
            "한국어",
            "ko-KR",
            "Korean_SweetGirl",
            "Korean",
            "안녕하세요! 목소리 들으니 반가워요. 어떤 이야기를 할까요?",
            "죄송해요, 잠깐 생각을 놓쳤어요. 다시 말씀해 주시겠어요?",
        ),
        _language(
            "zh",
            "Chinese",
            "中文",
            "zh-CN",
            "Chinese (Mandarin)_Sweet_Lady",
            "Chinese",
            "你好！很高兴听到你的声音。想聊些什么？",
            "抱歉，我刚才走神了。你能再说一遍吗？",
            deepgram="zh-CN",
        ),
        _language(
            "id",
            "Indonesian",
            "Bahasa Indonesia",
            "id-ID",
            "Indonesian_CalmWoman",
            "Indonesian",
            "Halo! Senang mendengar suaramu. Mau ngobrol tentang apa?",
            "Maaf, aku kehilangan alur sebentar. Bisa diulang?",
        ),
        _language(
            "vi",
            "Vietnamese",
            "Tiếng Việt",
            "vi-VN",
            "Vietnamese_kindhearted_girl",
            "Vietnamese",
            "Xin chào! Rất vui được nghe giọng bạn. Bạn muốn nói về điều gì?",
            "Xin lỗi, mình vừa bị mất mạch một chút. Bạn nói lại được không?",
        ),
        _language(
            "hi",
            "Hindi",
            "हिन्दी",
            "hi-IN",
            "hindi_female_2_v1",
            "Hindi",
            "नमस्ते! आपकी आवाज़ सुनकर अच्छा लगा। आप किस बारे में बात करना चाहेंगे?",
            "माफ़ कीजिए, मेरा ध्यान एक पल के लिए भटक गया। क्या आप फिर से कह सकते हैं?",
        ),
        _language(
            "th",
            "Thai",
            "ไทย",
            "th-TH",
            "Thai_female_1_sample1",
            "Thai",
            "สวัสดี! ดีใจที่ได้ยินเสียงคุณ อยากคุยเรื่องอะไรดี?",
            "ขอโทษนะ เมื่อกี้หลุดไปนิดหนึ่ง พูดอีกครั้งได้ไหม?",
        ),
    )
}
"""Every language a call can be held in: Agora documents its ``asr.language`` and Discord has a locale for it."""

_DEEPGRAM_CALL_LANGUAGES = frozenset(
    {"en", "es", "de", "fr", "pt", "it", "nl", "ru", "tr", "ja", "ko", "zh", "id", "vi", "hi", "th"}
)
DEEPGRAM_LANGUAGES: dict[str, frozenset[str]] = {
    # Deepgram's models-and-languages page and changelog: Nova-2's 36 languages include all of the table's; Nova-3's
    # monolingual models came for de/nl (Aug 2025), es/fr/pt, it/tr/id (Sep 2025), hi/ja/ko/ru/vi (Nov 2025), th and
    # zh (Mar 2026).
    "deepgram_nova_2": _DEEPGRAM_CALL_LANGUAGES,
    "deepgram_nova_3": _DEEPGRAM_CALL_LANGUAGES,
}
OPENAI_TTS_LANGUAGES = frozenset(LANGUAGES)
"""OpenAI's TTS voices speak the text in whatever language it is written in (Whisper's languages)."""
MINIMAX_LANGUAGES = frozenset(code for code, language in LANGUAGES.items() if language.minimax_voice)


def _presets(settings: AgoraSettings) -> list[str]:
    return [name for name in (p.strip() for p in settings.preset.split(",")) if name]


def tts_kind(settings: AgoraSettings) -> Literal["minimax", "openai", "own"]:
    """Whose voice speaks: MiniMax (Agora's presets or the admin's own key, the same system voices), OpenAI's
    (the ``openai_tts_1`` preset or the admin's key) or another vendor the admin configured."""
    if settings.tts_vendor in (None, "minimax") and any(p.startswith("minimax_") for p in _presets(settings)):
        return "minimax"
    if settings.tts_vendor == "minimax":
        return "minimax"
    if settings.tts_vendor == "openai" or (settings.tts_vendor is None and "openai_tts_1" in _presets(settings)):
        return "openai"
    return "own"


def supported(settings: AgoraSettings) -> frozenset[str]:
    """The languages this bot's ASR and TTS settings can hold a call in (always English)."""
    hearing = frozenset(LANGUAGES)
    for preset in _presets(settings):
        if preset in DEEPGRAM_LANGUAGES:
            hearing &= DEEPGRAM_LANGUAGES[preset]
    speaking = {"minimax": MINIMAX_LANGUAGES, "openai": OPENAI_TTS_LANGUAGES, "own": frozenset()}[tts_kind(settings)]
    return (hearing & speaking) | {ENGLISH}


def supported_report(settings: AgoraSettings) -> str:
    """What `check` says of the languages calls can be held in with these ASR and TTS settings."""
    codes = sorted(supported(settings))
    if codes == [ENGLISH]:
        return (
            "English only: the speech recognition and voice these settings name serve no other language this bot "
            "knows (a member who asks for another is answered in English, and their call card says so); for "
            "members who speak others, leave agora.tts_vendor unset to use the default preset's voices"
        )
    missing = sorted(set(LANGUAGES) - set(codes))
    listed = ", ".join(f"{code} {LANGUAGES[code].name}" for code in codes)
    unserved = f"; not {', '.join(LANGUAGES[code].name for code in missing)} (answered in English)" if missing else ""
    return f"{len(codes)} languages: {listed}{unserved}"


def language_of_locale(locale: str | None) -> str | None:
    """The table's language for a Discord locale ("es-ES", "es-419", "pt-BR", "zh-TW", "de"), or None."""
    if not locale:
        return None
    primary = locale.replace("_", "-").split("-", 1)[0].lower()
    return primary if primary in LANGUAGES else None


def known(code: str | None) -> str | None:
    """``code`` when the table has it (a stored choice from a later version may not be), else None."""
    return code if code in LANGUAGES else None


@dataclass(frozen=True)
class CallLanguage:
    language: Language
    source: Source
    fallback_from: Language | None = None
    """The language the rule picked when this bot cannot hold calls in it (the call is then in English)."""

    @property
    def code(self) -> str:
        return self.language.code


def call_language(
    settings: AgoraSettings,
    *,
    choice: str | None,
    locale: str | None,
    server_default: str | None,
) -> CallLanguage:
    """The one rule: choice, else Discord locale, else the server's default, else English; then English when the
    configured presets cannot serve the language picked."""
    picked: tuple[str, Source] = (ENGLISH, "default")
    candidates: Iterable[tuple[str | None, Source]] = (
        (known(choice), "choice"),
        (language_of_locale(locale), "discord"),
        (known(server_default), "server"),
    )
    for code, source in candidates:
        if code is not None:
            picked = (code, source)
            break
    wanted = LANGUAGES[picked[0]]
    if wanted.code in supported(settings):
        return CallLanguage(wanted, picked[1])
    return CallLanguage(LANGUAGES[ENGLISH], picked[1], fallback_from=wanted)


def persona_for(persona: str, language: Language) -> str:
    """The persona with the instruction to speak the call's language (English calls: the persona as it is)."""
    if language.code == ENGLISH:
        return persona
    return (
        f"{persona}\n\nThe member speaks {language.name} ({language.native}): always answer in {language.name}, "
        f"even when your notes about them are in another language."
    )


def greeting_for(
    language: Language,
    *,
    bot_greeting: str,
    server_greeting: str | None,
    server_language: str,
    name: str | None = None,
) -> str:
    """The server's own greeting when the call is in the server's language; the bot-wide greeting for English;
    else the table's greeting for the language (an admin's text is not translated). A ``{name}`` in it is the
    member's ``name`` (left out, with the comma before it, when none is known)."""
    if server_greeting and language.code == server_language:
        text = server_greeting
    elif language.code == ENGLISH:
        text = bot_greeting
    else:
        text = language.greeting
    if "{name}" not in text:
        return text
    return text.replace("{name}", name) if name else _NO_NAME.sub("", text)


_NO_NAME = re.compile(r"[ \t]*,?[ \t]*\{name\}")


def welcome_back(language: Language, name: str, follow_up: str | None) -> str:
    """A returning member's greeting: welcomed by name, then the question on their last conversation (one
    prepared in this language) or the language's plain question."""
    return f"{language.welcome.format(name=name)} {follow_up or language.ask}"
