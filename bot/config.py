"""Settings: `config.toml` for plain settings, the environment (and `.env`) for secrets and overrides.

Every setting has one environment name, `SECTION_KEY` in upper case (for example `AGORA_APP_ID`,
`WEB_PUBLIC_URL`); secrets can only come from the environment. The result is one frozen, validated
`Settings` object; invalid input raises `ConfigError`, whose message lists every problem at once.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

DEFAULT_CONFIG_PATH = Path("config.toml")
KEYGEN_HINT = "see below"
"""Where the message about a malformed master key points: `python -m bot` prints the command that works where the
operator is under the list of problems (bot.invocation; config imports no other part of the bot)."""
AGORA_DEFAULT_PRESET = "deepgram_nova_3,openai_gpt_4o_mini,minimax_speech_2_6_turbo"
AGORA_DEFAULT_SDK_URL = "https://download.agora.io/sdk/release/AgoraRTC_N-4.24.8.js"
AGORA_DEFAULT_TTS_VOICE = "English_captivating_female1"
"""A MiniMax English voice, the one Agora's SDK documents for ``voice_setting.voice_id``."""
MAX_CALL_MINUTES = 4320
"""Agora stops every agent after 72 hours (its task lifetime cap); tokens are renewed well before expiry."""
DEFAULT_PERSONA = (
    "You are a warm, concise voice assistant talking with a member of a Discord server. "
    "Keep replies to one or two sentences. If you know something about the person from earlier "
    "conversations, use it naturally; never read your notes back verbatim."
)


MAX_LINK_TTL_MINUTES = 1440
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


def _http_url(value: str, expected: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be {expected}; got {value!r}")
    return value


MASTER_KEY_BYTES = 32


def _same_database(a: str, b: str) -> bool:
    """Whether two PostgreSQL URLs name the same database on the same server (credentials aside)."""

    def where(url: str) -> tuple[str, str]:
        rest = url.split("://", 1)[-1].rsplit("@", 1)[-1]
        server, _, database = rest.partition("/")
        name, _, query = database.partition("?")
        return server + "?" + query, name

    return where(a) == where(b)


def decode_master_key(text: str) -> bytes | None:
    """The 32 bytes of a master key written as URL-safe base64 (padding optional); None when it is not one."""
    cleaned = text.strip()
    try:
        raw = base64.urlsafe_b64decode(cleaned + "=" * (-len(cleaned) % 4))
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == MASTER_KEY_BYTES else None


class ConfigError(Exception):
    """Raised when settings are missing or invalid; the message names every setting at fault."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("Configuration problems:\n" + "\n".join(f"  - {p}" for p in problems))


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DiscordSettings(_Section):
    token: SecretStr | None = None
    dev_guild_id: int | None = None
    call_cooldown_seconds: float = Field(default=20.0, ge=0)
    user_installs: bool = True
    """Members may add the bot to their own account (a user install) and use it in servers that did not add it, in
    its DMs and in group DMs; false registers the commands for server installs only and refuses the rest."""
    shard_count: int | None = Field(default=None, ge=1)
    shard_ids: list[int] | None = None

    @field_validator("shard_ids", mode="before")
    @classmethod
    def _shard_ids_from_text(cls, value: Any) -> Any:
        """From the environment, shard ids come as text: "0,1,2"."""
        if isinstance(value, str):
            try:
                return [int(part) for part in value.replace(" ", "").split(",") if part]
            except ValueError:
                raise ValueError("must be shard numbers separated by commas, such as 0,1") from None
        return value

    @model_validator(mode="after")
    def _shards_fit(self) -> DiscordSettings:
        if self.shard_ids is not None:
            if self.shard_count is None:
                raise ValueError("discord.shard_ids needs discord.shard_count (the total number of shards)")
            wrong = [i for i in self.shard_ids if not 0 <= i < self.shard_count]
            if wrong or not self.shard_ids or len(set(self.shard_ids)) != len(self.shard_ids):
                raise ValueError(
                    f"discord.shard_ids must be distinct numbers from 0 to {self.shard_count - 1} "
                    "(discord.shard_count - 1)"
                )
        return self


class AgoraSettings(_Section):
    app_id: str | None = None
    app_certificate: SecretStr | None = None
    customer_id: SecretStr | None = None
    customer_secret: SecretStr | None = None
    webhook_secret: SecretStr | None = None
    api_base_url: str = "https://api.agora.io/api/conversational-ai-agent"
    preset: str = AGORA_DEFAULT_PRESET
    llm_url: str | None = None
    llm_api_key: SecretStr | None = None
    llm_model: str | None = None
    tts_vendor: str | None = None
    tts_params: dict[str, Any] = Field(default_factory=dict)
    tts_voice: str = Field(default=AGORA_DEFAULT_TTS_VOICE, min_length=1)
    llm_params: dict[str, Any] | None = None
    token_format: Literal["007", "006"] = "007"
    asr_language: str = "en-US"
    idle_timeout_seconds: int = Field(default=30, ge=0, le=259200)
    max_history: int = Field(default=32, ge=1, le=1024)
    max_concurrent_agents: int = Field(default=20, ge=1)
    checkpoint_seconds: float = Field(default=10.0, gt=0)
    request_timeout_seconds: float = Field(default=10.0, gt=0)
    greeting: str = "Hi! Good to hear from you. What's on your mind?"
    sdk_url: str = AGORA_DEFAULT_SDK_URL
    emulator: bool = False
    """The Agora API is the local emulator of ``python3 tasks.py demo`` (standins/agora_emulator/): the call
    page offers a "type instead of speaking" box whose lines the emulator's agent hears as the member's speech.
    Refused unless ``api_base_url`` is on this machine (127.0.0.1, ::1 or localhost), so a bot talking to the real
    Agora never shows it."""

    @field_validator("api_base_url")
    @classmethod
    def _api_base_url_is_absolute(cls, value: str) -> str:
        return _http_url(value, "the http(s):// address of Agora's ConvoAI REST API")

    @field_validator("llm_url")
    @classmethod
    def _llm_url_is_absolute(cls, value: str | None) -> str | None:
        return value and _http_url(value, "the http(s):// address of your chat-completions endpoint")

    @field_validator("sdk_url")
    @classmethod
    def _sdk_url_is_a_script_address(cls, value: str) -> str:
        if value.startswith("/") and not value.startswith("//"):
            return value  # served by the bot itself, e.g. /static/vendor/AgoraRTC.js
        return _http_url(value, "an http(s):// address of the Agora Web SDK script, or a path such as /static/x.js")

    @field_validator("app_id")
    @classmethod
    def _app_id_is_hex(cls, value: str | None) -> str | None:
        if value is not None and (len(value) != 32 or any(c not in "0123456789abcdefABCDEF" for c in value)):
            raise ValueError("must be the 32-character hex App ID from Agora Console")
        return value

    @model_validator(mode="after")
    def _emulator_only_on_loopback(self) -> AgoraSettings:
        if self.emulator and urlsplit(self.api_base_url).hostname not in LOOPBACK_HOSTS:
            raise ValueError(
                "agora.emulator (AGORA_EMULATOR) is only for the local Agora emulator of `python3 tasks.py demo`: "
                f"agora.api_base_url must then be on 127.0.0.1, ::1 or localhost, not {self.api_base_url!r}"
            )
        return self

    @property
    def emulator_controls_url(self) -> str | None:
        """The emulator's test controls (``/_emulator`` beside its API), when ``emulator`` is set."""
        if not self.emulator:
            return None
        parts = urlsplit(self.api_base_url)
        return f"{parts.scheme}://{parts.netloc}/_emulator"


class LLMSettings(_Section):
    base_url: str | None = None
    api_key: SecretStr | None = None
    model: str = "gpt-4o-mini"
    timeout_seconds: float = Field(default=30.0, gt=0)
    embedding_model: str | None = None
    """Dense retrieval with the embedding model on the same server (``POST {base_url}/embeddings``), in place of
    the embedded model (``memory.semantic_search``); unset: the embedded model."""

    @field_validator("base_url")
    @classmethod
    def _base_url_is_absolute(cls, value: str | None) -> str | None:
        return value and _http_url(value, "an OpenAI-compatible API address such as https://api.openai.com/v1")

    @field_validator("embedding_model")
    @classmethod
    def _embedding_model_named(cls, value: str | None) -> str | None:
        return value.strip() or None if value is not None else None

    @property
    def enabled(self) -> bool:
        return bool(self.base_url)

    @property
    def dense_enabled(self) -> bool:
        """Whether lines and facts are embedded by the server's model (needs the server and the model)."""
        return self.enabled and self.embedding_model is not None


class WebSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    public_url: str = "http://localhost:8080"
    link_ttl_minutes: int = Field(default=60, ge=1, le=MAX_LINK_TTL_MINUTES)
    link_signing_key: SecretStr | None = None

    @field_validator("public_url")
    @classmethod
    def _public_url_is_absolute(cls, value: str) -> str:
        return _http_url(value, "the address members' browsers use, with its scheme, e.g. https://calls.example.org")


class MemorySettings(_Section):
    database_path: Path = Path("data/bot.db")
    key_store: Path | None = None
    master_key: SecretStr | None = None
    new_master_key: SecretStr | None = None
    database_url: SecretStr | None = None
    key_store_url: SecretStr | None = None
    """The member key store in its own PostgreSQL database (for a PostgreSQL memory database); unset: the SQLite
    file ``key_store``."""
    pool_size: int = Field(default=10, ge=1, le=1000)
    """PostgreSQL only: the most connections this process keeps open to the database at once."""

    @field_validator("database_url", "key_store_url")
    @classmethod
    def _postgres_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().startswith(("postgresql://", "postgres://")):
            raise ValueError("must be a PostgreSQL URL (postgresql://user:password@host:5432/dbname)")
        return value

    context_budget_tokens: int = Field(default=1500, ge=100, le=32000)
    persona: str = DEFAULT_PERSONA
    chat_idle_minutes: float = Field(default=30.0, gt=0)
    lock_timeout_seconds: float = Field(default=5.0, gt=0, le=600)
    live_recall: bool | None = None
    """The bot is the voice agent's LLM (memory per utterance, every turn stored at once). None: on when
    llm.base_url is set."""
    voice_tools: bool = True
    """The model is offered the memory tools (remember, correct, forget) in calls with live recall and in
    remembered text chats, so members can shape their memory by asking. False for an upstream that refuses
    OpenAI's ``tools``."""
    semantic_search: bool = True
    """Lines and facts are also matched by meaning, with the embedded model (``bot.memory.embedded``) unless
    ``llm.embedding_model`` names a server's; false: by words (BM25) only, unless ``llm.embedding_model`` is set."""

    @field_validator("master_key", "new_master_key")
    @classmethod
    def _is_a_master_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and decode_master_key(value.get_secret_value()) is None:
            raise ValueError(f"must be 32 bytes in URL-safe base64: create one with the keygen command ({KEYGEN_HINT})")
        return value

    @model_validator(mode="after")
    def _key_store_apart_from_memory(self) -> MemorySettings:
        if self.key_store_url is not None and self.database_url is not None:
            if _same_database(self.key_store_url.get_secret_value(), self.database_url.get_secret_value()):
                raise ValueError(
                    "memory.key_store_url (MEMORY_KEY_STORE_URL) names the same database as memory.database_url "
                    "(MEMORY_DATABASE_URL): the member keys must live apart from the memory they unlock, so a "
                    "backup of the memory holds no keys; point it at another database"
                )
        return self

    @property
    def key_store_path(self) -> Path:
        """The member key store: ``memory.key_store``, by default a file beside the database (bot.keys.db)."""
        if self.key_store is not None:
            return self.key_store
        return self.database_path.with_name(self.database_path.stem + ".keys.db")

    def master_key_bytes(self) -> bytes | None:
        """The master key's 32 bytes (validated when the settings were loaded), or None when it is not set."""
        return decode_master_key(self.master_key.get_secret_value()) if self.master_key is not None else None


class CallSettings(_Section):
    max_minutes: int = 30
    calls_per_member_per_day: int = Field(default=20, ge=1)
    shutdown_grace_seconds: float = Field(default=10.0, ge=0)
    page_close_grace_seconds: float = Field(default=8.0, ge=0, le=60)

    @field_validator("max_minutes")
    @classmethod
    def _within_agoras_lifetime(cls, value: int) -> int:
        if not 1 <= value <= MAX_CALL_MINUTES:
            raise ValueError(
                f"must be from 1 to {MAX_CALL_MINUTES} minutes: Agora stops every agent after 72 hours, got {value}"
            )
        return value


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class LogSettings(_Section):
    level: str = "INFO"
    format: Literal["text", "json"] = "text"
    third_party_level: str = "WARNING"

    @field_validator("level", "third_party_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        if value.upper() not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
        return value.upper()


class Settings(_Section):
    discord: DiscordSettings = DiscordSettings()
    agora: AgoraSettings = AgoraSettings()
    llm: LLMSettings = LLMSettings()
    web: WebSettings = WebSettings()
    memory: MemorySettings = MemorySettings()
    calls: CallSettings = CallSettings()
    log: LogSettings = LogSettings()

    def secret_values(self) -> list[str]:
        """Every secret that is set, as plain text: the log formatter blanks them out of every line."""
        values = []
        for section, key in SECRET_SETTINGS:
            secret = getattr(getattr(self, section), key)
            if secret is not None:
                values.append(secret.get_secret_value())
        return values

    @property
    def live_recall_enabled(self) -> bool:
        """Whether the voice agent's LLM requests go through the bot (it needs an upstream LLM)."""
        wanted = self.memory.live_recall
        return self.llm.enabled and (wanted is None or wanted)

    def live_recall_reason(self) -> str:
        """Why live recall is on or off, for `check`."""
        wanted = self.memory.live_recall
        if wanted is False:
            return "memory.live_recall is false, so the agent hears only the call-start memory"
        if not self.llm.enabled:
            if wanted:
                return "memory.live_recall is true but llm.base_url (LLM_BASE_URL) is not set"
            return "llm.base_url is not set, so the agent hears only the call-start memory"
        why = "memory.live_recall is true" if wanted else "llm.base_url is set (memory.live_recall default)"
        return (
            f"{why}: the agent's LLM requests go to {self.web.public_url.rstrip('/')}/llm/v1/chat/completions "
            f"and on to {self.llm.base_url} (model {self.llm.model})"
        )

    @property
    def embeddings_source(self) -> Literal["server", "embedded"] | None:
        """Where dense retrieval's embeddings come from: ``llm.embedding_model`` on the LLM server when both are
        set, else the embedded model unless ``memory.semantic_search`` is false (None: BM25 only)."""
        if self.llm.dense_enabled:
            return "server"
        return "embedded" if self.memory.semantic_search else None

    def dense_retrieval_reason(self) -> str:
        """Whether dense retrieval is on and why, for `check`."""
        model = self.llm.embedding_model
        embedded = (
            "lines and facts are embedded in process after each conversation with the embedded model (wordllama) "
            "and fused with BM25"
        )
        if model is None:
            if self.memory.semantic_search:
                return f"llm.embedding_model is not set: {embedded}"
            return "llm.embedding_model is not set and memory.semantic_search is false: BM25 only"
        if not self.llm.enabled:
            fallback = embedded if self.memory.semantic_search else "BM25 only"
            return f"llm.embedding_model is {model!r} but llm.base_url (LLM_BASE_URL) is not set: {fallback}"
        return (
            f"llm.embedding_model is {model!r}: lines and facts are embedded after each conversation through "
            f"{self.llm.base_url}/embeddings and fused with BM25"
        )

    @property
    def agora_configured(self) -> bool:
        a = self.agora
        return bool(a.app_id and a.app_certificate and a.customer_id and a.customer_secret)


def section_models() -> dict[str, type[BaseModel]]:
    """Each [section] of Settings and the model that validates it."""
    models: dict[str, type[BaseModel]] = {}
    for section, field in Settings.model_fields.items():
        model = field.annotation
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise TypeError(f"Settings.{section} must be a pydantic model, not {model!r}")
        models[section] = model
    return models


SECRET_SETTINGS: frozenset[tuple[str, str]] = frozenset(
    (section, key)
    for section, model in section_models().items()
    for key, field in model.model_fields.items()
    if "SecretStr" in str(field.annotation)
)


def env_name(section: str, key: str) -> str:
    return f"{section}_{key}".upper()


def all_settings() -> list[tuple[str, str, Any, bool]]:
    """(section, key, default, secret) for every setting, in declaration order: drives docs and `check`."""
    rows = []
    for section, model in section_models().items():
        for key, sub in model.model_fields.items():
            default = sub.get_default(call_default_factory=True)
            rows.append((section, key, default, (section, key) in SECRET_SETTINGS))
    return rows


def load_settings(
    config_path: Path | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    load_dotenv_file: bool = True,
) -> Settings:
    """Read config.toml (optional), then `.env`, then the process environment; validate once."""
    if environ is None:
        if load_dotenv_file:
            from dotenv import load_dotenv

            load_dotenv(Path(".env"), override=False)
        environ = os.environ
    path = config_path or Path(environ.get("BOT_CONFIG", DEFAULT_CONFIG_PATH))
    problems: list[str] = []
    raw: dict[str, dict[str, Any]] = {}
    if path.exists():
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError([f"{path} is not valid TOML: {exc}"]) from exc
    elif config_path is not None:
        raise ConfigError([f"{path} does not exist (copy config.example.toml to {path})"])

    merged: dict[str, dict[str, Any]] = {}
    sources: dict[tuple[str, str], str] = {}
    for section, model in section_models().items():
        file_section = raw.pop(section, {})
        if not isinstance(file_section, dict):
            problems.append(f"[{section}] in {path} must be a table")
            file_section = {}
        values: dict[str, Any] = {}
        for key in model.model_fields:
            secret = (section, key) in SECRET_SETTINGS
            if key in file_section:
                value = file_section.pop(key)
                if secret:
                    problems.append(
                        f"{section}.{key} is a secret: remove it from {path} and set {env_name(section, key)} "
                        "in the environment or .env"
                    )
                    continue
                values[key] = value
                sources[(section, key)] = f"in {path}"
            env_value = environ.get(env_name(section, key))
            if env_value not in (None, ""):
                values[key] = env_value
                sources[(section, key)] = f"({env_name(section, key)})"
        problems.extend(f"{section}.{key} in {path} is not a known setting" for key in file_section)
        merged[section] = values
    problems.extend(f"[{section}] in {path} is not a known section" for section in raw)

    def where(section: str, key: str) -> str:
        return f"{section}.{key} {sources.get((section, key), f'({env_name(section, key)})')}"

    try:
        settings = Settings.model_validate(_parse_env_json(merged))
    except ValidationError as exc:
        for error in exc.errors():
            loc = [str(part) for part in error["loc"]]
            if len(loc) < 2:  # a rule across settings: its message names them
                problems.append(_plain(error, secret=True))
            else:
                secret = (loc[0], loc[1]) in SECRET_SETTINGS
                plain = _plain(error, secret)
                if (loc[0], loc[1]) == ("web", "port") and error["type"].endswith("than_equal"):
                    plain = f"{PORT_RANGE}, not {error.get('input')!r}"
                problems.append(f"{where(loc[0], loc[1])}{''.join(f'[{p}]' for p in loc[2:])}: {plain}")
        raise ConfigError(problems) from None
    if settings.web.port == 0:
        problems.append(
            f"{where('web', 'port')}: {PORT_RANGE} (0 would listen on a random port that neither the proxy nor the "
            "call links can find)"
        )
    if problems:
        raise ConfigError(problems)
    return settings


PORT_RANGE = "must be a port from 1 to 65535, e.g. 8080"


def _plain(error: ErrorDetails, secret: bool) -> str:
    """A validation error in plain words (pydantic says "Value error, ..." or "Input should be a valid integer,
    unable to parse string as an integer"), with the value given unless the setting is a secret."""
    kind, context, value = error["type"], error.get("ctx") or {}, error.get("input")
    given = "" if secret or not isinstance(value, str | int | float) else f", not {value!r}"
    if kind in ("value_error", "assertion_error"):
        return error["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
    words = {
        "int_parsing": "must be a whole number",
        "int_type": "must be a whole number",
        "int_from_float": "must be a whole number",
        "float_parsing": "must be a number",
        "float_type": "must be a number",
        "bool_parsing": "must be true or false",
        "bool_type": "must be true or false",
        "greater_than_equal": f"must be {context.get('ge')} or more",
        "less_than_equal": f"must be {context.get('le')} or less",
        "greater_than": f"must be more than {context.get('gt')}",
        "less_than": f"must be less than {context.get('lt')}",
    }
    plain = words.get(kind) or error["msg"].replace("Input should be", "must be")
    return plain + given


def _parse_env_json(merged: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Dict settings (agora.tts_params, agora.llm_params) may be given as JSON text in the environment."""
    for key in ("tts_params", "llm_params"):
        params = merged.get("agora", {}).get(key)
        if isinstance(params, str) and params.lstrip().startswith("{"):
            # Malformed JSON stays text, so validation reports "agora.<key>: Input should be a valid dictionary".
            with contextlib.suppress(json.JSONDecodeError):
                merged["agora"][key] = json.loads(params)
    return merged
