"""A strict local stand-in for the Agora Conversational AI REST API and its NCS webhooks.

It implements the contract of ``/work/shared/specs/agora-convoai.md`` (§4, §5, §6 and the behaviour table of
§12) on 127.0.0.1 and rejects what the real service is documented to reject. Where the spec marks behaviour
UNVERIFIED, the choice made here is written down next to the code that makes it. Summary of those choices:

* Auth (spec §2): HTTP Basic with the configured customer ID/secret (scheme case-insensitive), or
  ``Authorization: agora token=<007 token>`` (what Agora's SDK sends by default, with a fresh RTC+RTM token per
  request): the token must be an AccessToken2 of this app ID, signed with the app certificate and not expired.
  Its channel, uid and services are not checked (the SDK signs ``leave`` with a token for channel "stop", uid
  0). Anything else is 401 ``{"detail", "reason": "InvalidPermission"}``.
* An ``{appid}`` in the path other than the emulator's app ID gets 401 ``InvalidPermission`` (the credentials
  are not valid for that project). 401 rather than 404 so a misconfigured app ID can never pass for
  "agent already gone" on ``leave``.
* ``properties.token`` must be a valid ``007`` AccessToken2 or ``006`` token for (channel, agent_rtc_uid) signed
  with the emulator's app certificate and not expired (the token's expiry and its join privilege's), else 400
  ``InvalidFieldValue`` (spec §7.4). With ``advanced_features.enable_rtm: true`` the token must also carry the
  RTM login privilege for the agent's uid, which only ``007`` tokens can.
* A MiniMax TTS preset needs ``tts.params.voice_setting.voice_id`` (every documented preset example sends one):
  without it the join is 400 ``MissingRequiredField``. The ``openai_gpt_5_*`` LLM presets reject
  ``llm.params.max_tokens`` and ``llm.params.temperature`` (those models take neither) with 400. A Deepgram ASR
  preset refuses an ``asr.vendor`` other than ``deepgram`` and an empty or non-string ``asr.params.language``
  (400 ``InvalidFieldValue``); neither field is required, since Agora's Deepgram page documents a preset join
  with only ``asr.language`` (its join examples and the SDK send ``vendor: "deepgram"`` and
  ``params.language``, which the bot sends too).
* ``asr.language`` must be one of the languages Agora documents (``ASR_LANGUAGES``, the SDK's ``AsrLanguage``),
  else 400 ``InvalidFieldValue``. With a Deepgram preset, ``asr.params.language`` must name the same language
  as ``asr.language`` ("es" or "es-ES" with "es-ES"): the docs do not say what Agora does with two different
  languages (UNVERIFIED), so the emulator refuses them, which catches a body whose recognizer and turn detection
  disagree. A MiniMax preset's ``tts.params.language_boost``, when sent, must be one of MiniMax's values
  (``MINIMAX_LANGUAGE_BOOSTS``).
* The (*) rule for ``llm``/``tts``: an LLM preset, a non-null ``pipeline_id`` or ``mllm.enable: true`` makes
  ``llm`` optional, otherwise ``llm.url`` is required; a TTS preset, ``pipeline_id`` or ``mllm.enable:
  true`` makes ``tts`` optional, otherwise ``tts.vendor`` (one of the documented vendors) is required.
  ``asr`` is never required. Unknown preset names are rejected.
* ``channel`` longer than 64 bytes is rejected (the RTC channel-name limit; not stated in the ConvoAI docs).
* Names are unique project-wide among agents that are not STOPPED/FAILED.
* The greeting (``llm.greeting_message``, ``{{var}}`` substituted from ``llm.template_variables``) becomes the
  first assistant message when the user joins: call :meth:`AgoraEmulator.user_joined`, or construct with
  ``auto_user_join=True`` to have the user present from the start. If the user never joins, nothing times out.
* ``think`` appends ``{"role": "user", "content": "[think API injected] <text>"}`` to the history (docs
  example); ``speak`` and ``interrupt`` are only recorded.
* History items carry the extra short-term-memory fields ``turn_id``, ``timestamp`` and ``metadata`` (allowed by
  the spec) so clients are tested to ignore unknown fields. History of an agent that is not STARTING/RUNNING is
  404 ``TaskNotFound``.
* ``query`` of a running agent reports ``stop_ts: 0`` and ``message: ""``; stopped agents stay queryable and
  report ``message: "agent exits with reason: <the 102 message>"`` (the docs' query example wraps the reason).
* History is served only while the agent is RUNNING ("Only supports querying the running agent"): a STARTING
  agent gets 404 ``TaskNotFound`` like a stopped one.
* ``/turns`` (spec §4.10, the SDK's ``GetTurnsAgentsResponse``) is derived from the agent's conversation: the
  greeting starts a ``greeting`` turn, a user message from speech (source ``asr``) a ``voice_input`` turn, a
  silence reminder a ``silence_timeout`` turn; the assistant reply after a voice input belongs to its turn. A
  turn ends ``ok`` once spoken, ``interrupted`` (``start_of_speech``) when what it said was cut or the next turn
  began first, ``error`` (``LLM_REQUEST_ERR``) with the LLM's failure message, ``interrupted`` (``api_leave``)
  when the agent stopped before replying. Typed messages, ``think`` and ``speak`` start no listed turn (no
  documented start type fits them). Only ended turns are listed, for running and stopped agents alike; an
  agent stopped more than 7 days ago, or unknown, is 404 ``TaskNotFound``; ``page_size`` outside 10 to 200 or
  ``page_index`` below 1 is 400 ``InvalidFieldValue``; a page past the last is empty.
* ``start_status="STARTING"``: the agent reports STARTING until the user joins or one emulator-clock second
  has passed (checked on each request or :meth:`AgoraEmulator.advance`).
* Custom LLM (``llm.url`` set): :meth:`AgoraEmulator.user_says` plays one user utterance the way ConvoAI does.
  The utterance joins the short-term memory, then the agent POSTs ``llm.params`` + ``messages`` (the system
  messages, then its last ``max_history`` messages, which end with the new user message) + ``stream: true`` to
  ``llm.url`` with ``Authorization: Bearer <llm.api_key>`` (and ``llm.headers``); with ``llm.vendor = "custom"``
  every message carries all of its short-term-memory fields (``turn_id``, ``timestamp``, ``metadata`` with
  ``source``, ``user``, ``interrupted``, ``interrupt_timestamp``, ``original``) and the body also carries
  ``turn_id``, ``timestamp`` (ms), ``interruptable: true``, ``model`` and, when ``llm_context`` is set,
  ``context`` (spec §4.11); ``/history`` and NCS 103 hold the same message fields. The SSE answer is read
  strictly: a non-200 status, a non-event-stream body, an event that is not ``data: <JSON chunk>``, an ``error``
  chunk, or an end without ``data: [DONE]`` is an LLM failure, and the agent says ``llm.failure_message`` (history
  source ``llm_failure``). ``interrupt_after=n`` closes the stream after n content deltas (the user spoke over
  the agent): the history keeps what was spoken (by default every delta received but the last), marked
  interrupted with the received text as ``original``. :meth:`AgoraEmulator.silence_reminder` adds a ``silence`` message.
* Time is ``clock() + offset``; :meth:`AgoraEmulator.advance` moves the offset and fires due timers (idle
  timeout, 72 h cap, NCS 104 thirty seconds before the agent token's join privilege expires).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import copy
import hmac
import json
import logging
import re
import secrets
import string
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple, Self

import aiohttp
from aiohttp import web

from bot.agora.tokens import (
    build_rtc_token,
    token_expires_at,
    verify_access_token_007,
    verify_rtc_token,
)
from bot.agora.webhooks import sign_body

logger = logging.getLogger(__name__)

TEST_APP_ID = "970CA35de60c44645bbae8a215061b33"
TEST_APP_CERTIFICATE = "5CFd2fd1755d40ecb72977518be15d3b"
TEST_CUSTOMER_ID = "3f0c9a1e5b7d4c2a8e6f1b3d5a7c9e0f"
TEST_CUSTOMER_SECRET = "9b8a7c6d5e4f3a2b1c0d9e8f7a6b5c4d"
TEST_WEBHOOK_SECRET = "emulator-webhook-secret"
DEFAULT_WEBHOOK_RETRY_DELAYS = (0.0, 0.1, 0.3)
"""Waits before NCS retries 1, 2 and 3: at once, then increasing (see ``AgoraEmulator._deliver``)."""
NCS_RECEIVER_TIMEOUT_SECONDS = 10.0
"""The receiver must answer 200 with a JSON body "within 10 seconds" or NCS resends (spec §6, DOCS-NCS)."""

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

DEFAULT_REASONS = {
    400: "InvalidFieldValue",
    401: "InvalidPermission",
    403: "ServiceNotEnabled",
    404: "TaskNotFound",
    409: "TaskConflict",
    422: "ConcurrencyLimitExceeded",
    429: "TooManyRequests",
    500: "InternalError",
    502: "ServiceUnavailable",
    503: "ServiceUnavailable",
    504: "TaskOperationTimeout",
}

WebhookMode = Literal["normal", "duplicate", "reverse", "off"]


class ApiError(Exception):
    """Raised anywhere in a handler; the middleware turns it into the documented error body."""

    def __init__(self, status: int, reason: str, detail: str) -> None:
        super().__init__(f"{status} {reason}: {detail}")
        self.status = status
        self.reason = reason
        self.detail = detail


class RequestRecord(NamedTuple):
    method: str
    path: str
    status: int


class CallRecord(NamedTuple):
    operation: str
    status: int


class WebhookAttempt(NamedTuple):
    notice_id: str
    event_type: int
    status: int | None
    error: str | None
    sent_at: float = 0.0  # time.monotonic() when the attempt was made


@dataclass
class Message:
    role: str
    content: str
    turn_id: int
    timestamp_ms: int
    source: str
    interrupted: bool = False
    original: str | None = None
    user: str | None = None
    """The speaker's RTC uid, for a user message from speech (``metadata.user``)."""
    interrupt_timestamp_ms: int | None = None

    def metadata(self) -> dict[str, Any]:
        """Agora's short-term-memory ``metadata`` (spec §4.11)."""
        metadata: dict[str, Any] = {"source": self.source}
        if self.user is not None:
            metadata["user"] = self.user
        if self.interrupted:
            metadata.update(interrupted=True, interrupt_timestamp=self.interrupt_timestamp_ms, original=self.original)
        return metadata

    def as_llm_message(self, *, custom: bool) -> dict[str, Any]:
        """What a request to ``llm.url`` holds for this message: every short-term-memory field with
        ``llm.vendor = "custom"``, only ``role`` and ``content`` otherwise (DOCS-STM)."""
        if not custom:
            return {"role": self.role, "content": self.content}
        return self.as_history_item()

    def as_history_item(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "content": self.content,
            "turn_id": self.turn_id,
            "timestamp": self.timestamp_ms,
            "metadata": self.metadata(),
        }


@dataclass
class LLMTurn:
    """One utterance sent to a custom LLM: what was sent, how it ended and what the agent kept."""

    request: dict[str, Any]
    headers: dict[str, str]
    outcome: Literal["ok", "interrupted", "failed"]
    status: int | None
    reply: str
    error: str | None = None
    seconds: float = 0.0
    deltas: tuple[str, ...] = ()
    """The content deltas received, in order."""


@dataclass
class EmulatedAgent:
    """One agent. ``request`` is the join body exactly as received; ``properties`` reflects later updates."""

    agent_id: str
    name: str
    channel: str
    request: dict[str, Any]
    properties: dict[str, Any]
    status: str
    create_ts: int
    start_ts: int
    sequence: int
    stop_ts: int | None = None
    message: str = ""
    conversation: list[Message] = field(default_factory=list)
    user_present: bool = False
    user_left_at: float | None = None
    joins: int = 0
    current_turn: int = 0
    updates: list[dict[str, Any]] = field(default_factory=list)
    spoken: list[dict[str, Any]] = field(default_factory=list)
    thoughts: list[dict[str, Any]] = field(default_factory=list)
    interrupts: int = 0
    token_warning_sent_for: str | None = None
    llm_turns: list[LLMTurn] = field(default_factory=list)

    @property
    def llm(self) -> dict[str, Any]:
        llm = self.properties.get("llm")
        return llm if isinstance(llm, dict) else {}

    @property
    def system_messages(self) -> list[dict[str, Any]]:
        return list(self.llm.get("system_messages") or [])

    @property
    def llm_params(self) -> dict[str, Any]:
        return dict(self.llm.get("params") or {})

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.properties.get("labels") or {})

    @property
    def token(self) -> str:
        return str(self.properties.get("token", ""))

    @property
    def agent_rtc_uid(self) -> str:
        return str(self.properties["agent_rtc_uid"])

    @property
    def remote_rtc_uids(self) -> list[str]:
        return list(self.properties["remote_rtc_uids"])

    @property
    def idle_timeout(self) -> int:
        value = self.properties.get("idle_timeout")
        return DEFAULT_IDLE_TIMEOUT if value is None else int(value)

    @property
    def max_history(self) -> int:
        value = self.llm.get("max_history")
        return DEFAULT_MAX_HISTORY if value is None else int(value)

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    def window(self) -> list[Message]:
        """What ``/history`` (and NCS 103) returns: the last ``max_history`` messages."""
        return self.conversation[-self.max_history :]

    def history_contents(self) -> list[dict[str, Any]]:
        return [message.as_history_item() for message in self.window()]


@dataclass
class _FailureRule:
    remaining: int
    status: int
    operation: str | None
    reason: str
    detail: str
    after_processing: bool
    retry_after: float | None
    legacy_body: bool

    def matches(self, operation: str, after_processing: bool) -> bool:
        return (
            self.remaining > 0
            and self.after_processing == after_processing
            and (self.operation is None or self.operation == operation)
        )


@dataclass
class ResponseGate:
    """See ``AgoraEmulator.hold_responses``: ``reached`` is set when a held answer is ready."""

    reached: asyncio.Event = field(default_factory=asyncio.Event)
    opened: asyncio.Event = field(default_factory=asyncio.Event)

    def release(self) -> None:
        self.opened.set()


@dataclass(frozen=True)
class _Notification:
    envelope: dict[str, Any]
    body: bytes

    @property
    def notice_id(self) -> str:
        return str(self.envelope["noticeId"])

    @property
    def event_type(self) -> int:
        return int(self.envelope["eventType"])


class AgoraEmulator:
    """The ConvoAI emulator: ``await emu.start()`` or ``running_emulator(...)``; see the module docstring."""

    def __init__(
        self,
        *,
        app_id: str = TEST_APP_ID,
        app_certificate: str = TEST_APP_CERTIFICATE,
        customer_id: str = TEST_CUSTOMER_ID,
        customer_secret: str = TEST_CUSTOMER_SECRET,
        max_concurrent: int = 20,
        webhook_url: str | None = None,
        webhook_secret: str | None = None,
        clock: Callable[[], float] = time.time,
        start_status: Literal["RUNNING", "STARTING"] = "RUNNING",
        auto_user_join: bool = False,
        webhook_mode: WebhookMode = "normal",
        webhook_timeout: float = NCS_RECEIVER_TIMEOUT_SECONDS,
        webhook_max_retries: int = 3,
        webhook_retry_delays: Sequence[float] = DEFAULT_WEBHOOK_RETRY_DELAYS,
    ) -> None:
        self.app_id = app_id
        self.app_certificate = app_certificate
        self.customer_id = customer_id
        self.customer_secret = customer_secret
        self.max_concurrent = max_concurrent
        self.webhook_url = webhook_url
        self.webhook_secret = webhook_secret or TEST_WEBHOOK_SECRET
        self.webhook_mode: WebhookMode = webhook_mode
        self.webhook_timeout = webhook_timeout
        self.webhook_max_retries = webhook_max_retries
        self.webhook_retry_delays = tuple(webhook_retry_delays)
        self.start_status = start_status
        self.auto_user_join = auto_user_join
        self.latency = 0.0
        self.agents: dict[str, EmulatedAgent] = {}
        self.requests: list[RequestRecord] = []
        self.calls: list[CallRecord] = []
        self.emitted: list[dict[str, Any]] = []
        self.delivered: list[dict[str, Any]] = []
        self.undelivered: list[dict[str, Any]] = []
        self.webhook_attempts: list[WebhookAttempt] = []
        self._clock = clock
        self._clock_offset = 0.0
        self._failure_rules: list[_FailureRule] = []
        self._held: list[_Notification] | None = None
        self._outbox: asyncio.Queue[_Notification] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None
        self._webhook_session: aiohttp.ClientSession | None = None
        self._llm_session: aiohttp.ClientSession | None = None
        self.llm_timeout = 15.0
        self.llm_context: dict[str, Any] | None = None
        """Sent as the top-level ``context`` of custom-LLM requests when set (DOCS-CLLM's request model)."""
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._listen_port = 0
        self._agent_sequence = 0
        self._gates: dict[str, ResponseGate] = {}

    async def start(self) -> Self:
        app = web.Application(middlewares=[self._pipeline])
        self._add_routes(app)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self._listen_port)
        await site.start()
        self._port = int(self._runner.addresses[0][1])
        # One connection per notification, as independent deliveries; no idle keep-alive left on the receiver.
        self._webhook_session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))
        self._worker = asyncio.get_running_loop().create_task(self._deliver_webhooks_forever())
        return self

    async def stop(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
            self._worker = None
        if self._webhook_session is not None:
            await self._webhook_session.close()
            self._webhook_session = None
        if self._llm_session is not None:
            await self._llm_session.close()
            self._llm_session = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the emulator is not started")
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{API_PREFIX}"

    @property
    def project_url(self) -> str:
        return f"{self.base_url}/v2/projects/{self.app_id}"

    def now(self) -> float:
        return self._clock() + self._clock_offset

    def agent(self, agent_id: str) -> EmulatedAgent:
        try:
            return self.agents[agent_id]
        except KeyError:
            raise LookupError(f"no agent {agent_id!r}; known: {sorted(self.agents)}") from None

    def only_agent(self) -> EmulatedAgent:
        if len(self.agents) != 1:
            raise AssertionError(f"expected exactly one agent, found {len(self.agents)}: {sorted(self.agents)}")
        return next(iter(self.agents.values()))

    def agents_by_label(self, key: str, value: str) -> list[EmulatedAgent]:
        """Agents whose join labels carry ``key=value``, oldest first."""
        matches = [agent for agent in self.agents.values() if agent.labels.get(key) == value]
        return sorted(matches, key=lambda agent: agent.sequence)

    def agent_by_label(self, key: str, value: str) -> EmulatedAgent:
        """The most recently started agent labelled ``key=value``."""
        matches = self.agents_by_label(key, value)
        if not matches:
            raise LookupError(f"no agent labelled {key}={value!r}")
        return matches[-1]

    def user_joined(self, agent_id: str) -> None:
        """The remote user joins: cancels the idle timer and speaks the greeting (per greeting_configs)."""
        agent = self._active_agent(agent_id)
        agent.user_present = True
        agent.user_left_at = None
        agent.joins += 1
        if agent.status == "STARTING":
            agent.status = "RUNNING"
        greeting = agent.llm.get("greeting_message")
        mode = (agent.llm.get("greeting_configs") or {}).get("mode", "single_every")
        if greeting and (mode != "single_first" or agent.joins == 1):
            self._append(agent, "assistant", _substitute(greeting, agent.llm.get("template_variables")), "greeting")

    def user_left(self, agent_id: str) -> None:
        """The remote user leaves: the idle timer starts (the agent stops ``idle_timeout`` s later)."""
        agent = self._active_agent(agent_id)
        agent.user_present = False
        agent.user_left_at = self.now()

    def advance(self, seconds: float) -> None:
        """Move the emulator clock forward and fire every timer that became due."""
        if seconds < 0:
            raise ValueError("the emulator clock cannot go back")
        self._clock_offset += seconds
        self._tick()

    def say(self, agent_id: str, role: str, content: str, *, source: str | None = None) -> Message:
        """Append one message to the agent's conversation (what ASR or the LLM would have produced)."""
        if role not in ("user", "assistant"):
            raise ValueError("history roles are 'user' and 'assistant' (system messages are never in history)")
        agent = self._active_agent(agent_id)
        return self._append(agent, role, content, source or ("asr" if role == "user" else "llm"))

    def script(self, agent_id: str, messages: Iterable[tuple[str, str]]) -> None:
        for role, content in messages:
            self.say(agent_id, role, content)

    async def user_says(
        self,
        agent_id: str,
        text: str,
        *,
        interrupt_after: int | None = None,
        heard: str | None = None,
        source: Literal["asr", "message"] = "asr",
    ) -> LLMTurn:
        """The user says ``text`` to an agent with a custom LLM (``source="message"``: sends it as text): see the
        module docstring. With ``interrupt_after``, ``heard`` is what was spoken of the reply before the user cut
        in (default: every delta received but the last, which was still queued for speech)."""
        agent = self._active_agent(agent_id)
        url = agent.llm.get("url")
        if not url:
            raise ValueError(f"agent {agent_id} has no llm.url: its LLM is an Agora preset")
        message = self._append(agent, "user", text, source)
        message.user = agent.remote_rtc_uids[0] if agent.remote_rtc_uids else None
        custom = agent.llm.get("vendor") == "custom"
        body: dict[str, Any] = {
            **agent.llm_params,
            "messages": [*agent.system_messages, *(m.as_llm_message(custom=custom) for m in agent.window())],
            "stream": True,
        }
        if custom:
            body.update(
                turn_id=message.turn_id,
                timestamp=message.timestamp_ms,
                interruptable=True,
                model=str(agent.llm_params.get("model", "")),
            )
            if self.llm_context is not None:
                body["context"] = copy.deepcopy(self.llm_context)
        headers = {"Content-Type": "application/json", **dict(agent.llm.get("headers") or {})}
        if agent.llm.get("api_key"):
            headers["Authorization"] = f"Bearer {agent.llm['api_key']}"
        turn = await self.post_llm_request(url, body, headers, interrupt_after=interrupt_after)
        agent.llm_turns.append(turn)
        if turn.outcome == "failed":
            self._append(agent, "assistant", str(agent.llm.get("failure_message") or ""), "llm_failure")
        elif turn.outcome == "interrupted":
            spoken = heard if heard is not None else "".join(turn.deltas[:-1])
            reply = self._append(agent, "assistant", turn.reply, "llm")
            self._cut(reply, spoken)
        elif turn.reply or turn.outcome == "ok":
            self._append(agent, "assistant", turn.reply, "llm")
        return turn

    def silence_reminder(self, agent_id: str, text: str) -> Message:
        """The user stayed silent and the agent spoke a reminder (``parameters.silence_config``): an assistant
        message with source ``silence``."""
        return self._append(self._active_agent(agent_id), "assistant", text, "silence")

    async def resend_llm_request(self, agent_id: str) -> LLMTurn:
        """Send the agent's latest LLM request again unchanged (ConvoAI retrying a turn); history is untouched."""
        agent = self.agent(agent_id)
        if not agent.llm_turns:
            raise ValueError(f"agent {agent_id} has sent no LLM request yet")
        last = agent.llm_turns[-1]
        return await self.post_llm_request(str(agent.llm["url"]), last.request, last.headers)

    async def post_llm_request(
        self, url: str, body: dict[str, Any], headers: dict[str, str], *, interrupt_after: int | None = None
    ) -> LLMTurn:
        """POST one chat-completions request and read the SSE answer as a strict client would."""
        if self._llm_session is None:
            self._llm_session = aiohttp.ClientSession()
        started = time.monotonic()
        status: int | None = None
        parts: list[str] = []

        def ended(outcome: Literal["ok", "interrupted", "failed"], error: str | None = None) -> LLMTurn:
            return LLMTurn(
                body, headers, outcome, status, "".join(parts), error, time.monotonic() - started, tuple(parts)
            )

        try:
            async with asyncio.timeout(self.llm_timeout):
                async with self._llm_session.post(url, json=body, headers=headers) as response:
                    status = response.status
                    if status != 200:
                        return ended("failed", f"HTTP {status}: {(await response.text())[:300]}")
                    kind = response.headers.get("Content-Type", "")
                    if not kind.startswith("text/event-stream"):
                        return ended("failed", f"not an event stream: {kind!r}")
                    deltas = 0
                    data_lines: list[str] = []
                    async for raw_line in response.content:
                        line = raw_line.decode("utf-8").rstrip("\r\n")
                        if line.startswith(":"):
                            continue
                        if line:
                            if not line.startswith("data:"):
                                return ended("failed", f"unexpected SSE line {line[:80]!r}")
                            data_lines.append(line[5:].lstrip(" "))
                            continue
                        if not data_lines:
                            continue
                        data, data_lines = "\n".join(data_lines), []
                        if data == "[DONE]":
                            return ended("ok")
                        problem = _chunk_problem(data)
                        if problem is not None:
                            return ended("failed", problem)
                        choices = json.loads(data)["choices"]
                        delta = choices[0].get("delta", {}).get("content") if choices else None
                        if delta:
                            parts.append(delta)
                            deltas += 1
                            if interrupt_after is not None and deltas >= interrupt_after:
                                response.close()  # the user spoke over the agent: stop listening at once
                                return ended("interrupted")
                    return ended("failed", "the stream ended without data: [DONE]")
        except TimeoutError:
            return ended("failed", f"no complete answer within {self.llm_timeout:g} s")
        except aiohttp.ClientError as exc:
            return ended("failed", f"{type(exc).__name__}: {exc}")

    def interrupt_last(self, agent_id: str, truncated_text: str) -> Message:
        """The user cut the latest assistant reply short: its stored content becomes ``truncated_text``."""
        message = self._last_assistant_message(agent_id)
        self._cut(message, truncated_text)
        return message

    def _cut(self, message: Message, spoken: str) -> None:
        """The user spoke over ``message``: it keeps what was spoken (DOCS-STM), the whole reply in ``original``."""
        message.original = message.original if message.interrupted else message.content
        message.content = spoken
        message.interrupted = True
        message.interrupt_timestamp_ms = int(self.now() * 1000)

    def grow_last(self, agent_id: str, extra_text: str) -> Message:
        """The latest assistant reply is still being generated: ``extra_text`` is appended to it."""
        message = self._last_assistant_message(agent_id)
        message.content += extra_text
        return message

    def fail_agent(self, agent_id: str, message: str = "RTC connection error") -> None:
        """The agent crashes: FAILED, NCS 102 (with ``message``) and 103."""
        self._stop_agent(self._active_agent(agent_id), "FAILED", message)

    def expire_lifetime(self, agent_id: str) -> None:
        """The 72 h session cap is hit now: STOPPED with "Task lifetime limit exceeded", NCS 102 and 103."""
        self._stop_agent(self._active_agent(agent_id), "STOPPED", "Task lifetime limit exceeded")

    def fail_next(
        self,
        n: int,
        status: int,
        *,
        operation: str | None = None,
        reason: str | None = None,
        detail: str | None = None,
        retry_after: float | None = None,
        legacy_body: bool = False,
    ) -> None:
        """The next ``n`` requests for ``operation`` (any operation when None) fail with ``status`` without
        being processed. Operations: join, leave, query, list, update, history, speak, interrupt, think, turns."""
        self._add_failure(n, status, operation, reason, detail, retry_after, legacy_body, after_processing=False)

    def fail_after_processing_next(
        self,
        n: int,
        status: int,
        operation: str | None = None,
        *,
        reason: str | None = None,
        detail: str | None = None,
    ) -> None:
        """The next ``n`` requests for ``operation`` ARE processed (a join creates its agent) but the answer
        is the error ``status``: a response lost after the service acted."""
        self._add_failure(n, status, operation, reason, detail, None, False, after_processing=True)

    def hold_responses(self, operation: str) -> ResponseGate:
        """Requests for ``operation`` are processed but their answers wait until the gate is released: a
        request in flight, for races ("forget while the hang-up's history read is on its way")."""
        gate = ResponseGate()
        self._gates[operation] = gate
        return gate

    def clear_failures(self) -> None:
        self._failure_rules.clear()

    def count_calls(self, operation: str, status: int | None = None) -> int:
        return sum(1 for call in self.calls if call.operation == operation and status in (None, call.status))

    def hold_webhooks(self) -> None:
        """Keep notifications back until :meth:`release_webhooks`."""
        if self._held is None:
            self._held = []

    @property
    def held_webhooks(self) -> list[dict[str, Any]]:
        return [notification.envelope for notification in self._held or []]

    async def release_webhooks(self, order: Sequence[int] | None = None) -> None:
        """Deliver the held notifications, in ``order`` (indices into :attr:`held_webhooks`; default: as held,
        indices may repeat to duplicate or be left out to drop), then wait for delivery."""
        held = self._held or []
        self._held = None
        chosen = [held[index] for index in order] if order is not None else held
        for notification in chosen:
            self._outbox.put_nowait(notification)
        await self.wait_webhooks_idle()

    async def wait_webhooks_idle(self, within_seconds: float = 10.0) -> None:
        """Wait until every queued notification was delivered or given up (loopback I/O only)."""
        async with asyncio.timeout(within_seconds):
            await self._outbox.join()

    def _add_failure(
        self,
        n: int,
        status: int,
        operation: str | None,
        reason: str | None,
        detail: str | None,
        retry_after: float | None,
        legacy_body: bool,
        *,
        after_processing: bool,
    ) -> None:
        if n < 1:
            raise ValueError("n must be at least 1")
        self._failure_rules.append(
            _FailureRule(
                remaining=n,
                status=status,
                operation=operation,
                reason=reason or DEFAULT_REASONS.get(status, "InternalError"),
                detail=detail or f"injected failure (HTTP {status})",
                after_processing=after_processing,
                retry_after=retry_after,
                legacy_body=legacy_body,
            )
        )

    def _take_failure(self, operation: str, *, after_processing: bool) -> _FailureRule | None:
        for rule in self._failure_rules:
            if rule.matches(operation, after_processing):
                rule.remaining -= 1
                return rule
        return None

    def _active_agent(self, agent_id: str) -> EmulatedAgent:
        agent = self.agent(agent_id)
        if not agent.is_active:
            raise ValueError(f"agent {agent_id} is {agent.status}, not running")
        return agent

    def _last_assistant_message(self, agent_id: str) -> Message:
        agent = self._active_agent(agent_id)
        for message in reversed(agent.conversation):
            if message.role == "assistant":
                return message
        raise ValueError(f"agent {agent_id} has no assistant message yet")

    def _append(self, agent: EmulatedAgent, role: str, content: str, source: str) -> Message:
        if role == "user":
            agent.current_turn += 1
        message = Message(role, content, agent.current_turn, int(self.now() * 1000), source)
        agent.conversation.append(message)
        return message

    def _tick(self) -> None:
        now = self.now()
        for agent in list(self.agents.values()):
            if not agent.is_active:
                continue
            if agent.status == "STARTING" and now >= agent.create_ts + STARTUP_SECONDS:
                agent.status = "RUNNING"
            if agent.user_left_at is not None and agent.idle_timeout > 0:
                idle_deadline = agent.user_left_at + agent.idle_timeout
                if now >= idle_deadline:
                    self._stop_agent(agent, "STOPPED", "Idle for too long", stop_ts=int(idle_deadline))
                    continue
            lifetime_deadline = agent.start_ts + MAX_LIFETIME_SECONDS
            if now >= lifetime_deadline:
                self._stop_agent(agent, "STOPPED", "Task lifetime limit exceeded", stop_ts=lifetime_deadline)
                continue
            self._warn_if_token_expiring(agent, now)

    def _warn_if_token_expiring(self, agent: EmulatedAgent, now: float) -> None:
        if agent.token_warning_sent_for == agent.token:
            return
        expiry = token_expires_at(agent.token)
        if expiry and now >= expiry - TOKEN_EXPIRY_WARNING_SECONDS:
            agent.token_warning_sent_for = agent.token
            self._emit(104, {**self._payload_base(agent), "message": "Task exceeded maximum lifetime"})

    def _stop_agent(self, agent: EmulatedAgent, status: str, message: str, *, stop_ts: int | None = None) -> None:
        agent.status = status
        agent.stop_ts = int(self.now()) if stop_ts is None else stop_ts
        agent.message = message
        agent.user_left_at = None
        left = {
            **self._payload_base(agent),
            "stop_ts": agent.stop_ts,
            "status": status,
            "message": message,
        }
        history = {
            **self._payload_base(agent),
            "stop_ts": agent.stop_ts,
            "contents": agent.history_contents(),
        }
        events = [(102, left), (103, history)]
        if self.webhook_mode == "reverse":
            events.reverse()
        for event_type, payload in events:
            self._emit(event_type, payload)

    @staticmethod
    def _payload_base(agent: EmulatedAgent) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "agent_id": agent.agent_id,
            "name": agent.name,
            "channel": agent.channel,
            "start_ts": agent.start_ts,
        }
        if agent.properties.get("labels"):
            payload["labels"] = dict(agent.properties["labels"])
        return payload

    def _emit(self, event_type: int, payload: dict[str, Any]) -> None:
        envelope = {
            "sid": _random_id(16),
            "noticeId": str(uuid.uuid4()),
            "productId": 17,
            "eventType": event_type,
            "notifyMs": int(self.now() * 1000),
            "payload": payload,
        }
        self.emitted.append(envelope)
        if self.webhook_mode == "off" or not self.webhook_url:
            return
        notification = _Notification(envelope, _envelope_body(envelope))
        copies = 2 if self.webhook_mode == "duplicate" else 1
        for _ in range(copies):
            if self._held is not None:
                self._held.append(notification)
            else:
                self._outbox.put_nowait(notification)

    async def _deliver_webhooks_forever(self) -> None:
        while True:
            notification = await self._outbox.get()
            try:
                await self._deliver(notification)
            except Exception:
                logger.exception("emulator failed delivering notification %s", notification.notice_id)
                self.undelivered.append(notification.envelope)
            finally:
                self._outbox.task_done()

    async def _deliver(self, notification: _Notification) -> None:
        """POST with both signatures; retried up to ``webhook_max_retries`` times unless the receiver answers
        200 with a JSON body: the first retry at once, the next ones after increasing waits
        (``webhook_retry_delays``), as NCS documents (spec §6: "resends immediately, then at increasing
        intervals, and gives up after 3 retries"). The real intervals are not published; the defaults here
        are short so tests stay fast, and a test that needs a longer window sets its own. Each resend carries
        a fresh ``notifyMs`` ("This value is updated when the Agora server resends the notification callback",
        DOCS-NCS request-header-body), so its body and both signatures are new; ``noticeId`` stays."""
        assert self._webhook_session is not None
        url = self.webhook_url
        if not url:
            return
        timeout = aiohttp.ClientTimeout(total=self.webhook_timeout)
        envelope, body = notification.envelope, notification.body
        for attempt in range(1 + self.webhook_max_retries):
            if attempt > 0:
                if self.webhook_retry_delays:
                    delays = self.webhook_retry_delays
                    await asyncio.sleep(delays[min(attempt - 1, len(delays) - 1)])
                envelope = {**notification.envelope, "notifyMs": int(self.now() * 1000)}
                body = _envelope_body(envelope)
            headers = {"Content-Type": "application/json", **sign_body(self.webhook_secret, body)}
            sent_at = time.monotonic()
            status: int | None = None
            error: str | None = None
            try:
                async with self._webhook_session.post(url, data=body, headers=headers, timeout=timeout) as response:
                    status = response.status
                    text = await response.text()
                json.loads(text)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                error = f"{type(exc).__name__}: {exc}"
            self.webhook_attempts.append(
                WebhookAttempt(notification.notice_id, notification.event_type, status, error, sent_at)
            )
            if status == 200 and error is None:
                self.delivered.append(envelope)
                return
        logger.warning("emulator gave up delivering notification %s", notification.notice_id)
        self.undelivered.append(notification.envelope)

    def _add_routes(self, app: web.Application) -> None:
        project = API_PREFIX + "/v2/projects/{appid}"
        agent = project + "/agents/{agent_id}"
        app.router.add_post(project + "/join", self._join, name="join")
        app.router.add_get(project + "/agents", self._list, name="list")
        app.router.add_get(agent, self._query, name="query")
        app.router.add_post(agent + "/leave", self._leave, name="leave")
        app.router.add_post(agent + "/update", self._update, name="update")
        app.router.add_get(agent + "/history", self._history, name="history")
        app.router.add_get(agent + "/turns", self._turns, name="turns")
        app.router.add_post(agent + "/speak", self._speak, name="speak")
        app.router.add_post(agent + "/interrupt", self._interrupt, name="interrupt")
        app.router.add_post(agent + "/think", self._think, name="think")

    @web.middleware
    async def _pipeline(self, request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        operation = request.match_info.route.name or "unknown"
        response = await self._respond(request, handler, operation)
        gate = self._gates.get(operation)
        if gate is not None:
            gate.reached.set()
            await gate.opened.wait()
        if self.latency:
            await asyncio.sleep(self.latency)
        self.requests.append(RequestRecord(request.method, request.path, response.status))
        self.calls.append(CallRecord(operation, response.status))
        return response

    async def _respond(
        self, request: web.Request, handler: Callable[[web.Request], Any], operation: str
    ) -> web.StreamResponse:
        if operation == "unknown":
            try:
                return await handler(request)
            except web.HTTPException as exc:
                return _error_response(exc.status, "NotFound" if exc.status == 404 else "InvalidRequest", exc.reason)
        self._tick()
        try:
            self._authenticate(request)
            injected = self._take_failure(operation, after_processing=False)
            if injected is not None:
                return _injected_response(injected)
            response: web.StreamResponse = await handler(request)
        except ApiError as exc:
            return _error_response(exc.status, exc.reason, exc.detail)
        injected = self._take_failure(operation, after_processing=True)
        if injected is not None:
            return _injected_response(injected)
        return response

    def _authenticate(self, request: web.Request) -> None:
        header = request.headers.get("Authorization", "")
        scheme, _, credentials = header.partition(" ")
        if scheme.lower() == "agora":
            self._authenticate_token(credentials)
        elif scheme.lower() != "basic":
            raise ApiError(401, "InvalidPermission", "authentication failed: use Basic or agora token= auth")
        else:
            self._authenticate_basic(credentials)
        if request.match_info["appid"] != self.app_id:
            raise ApiError(401, "InvalidPermission", "authentication failed: credentials not valid for this app id")

    def _authenticate_token(self, credentials: str) -> None:
        name, sep, token = credentials.strip().partition("=")
        if name != "token" or not sep or not token:
            raise ApiError(401, "InvalidPermission", "authentication failed: expected agora token=<token>")
        problem = verify_access_token_007(token, self.app_id, self.app_certificate, self.now())
        if problem is not None:
            raise ApiError(401, "InvalidPermission", f"authentication failed: {problem}")

    def _authenticate_basic(self, credentials: str) -> None:
        try:
            decoded = base64.b64decode(credentials.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise ApiError(401, "InvalidPermission", "authentication failed: malformed Basic credentials") from None
        customer_id, _, customer_secret = decoded.partition(":")
        expected = f"{self.customer_id}:{self.customer_secret}".encode()
        if not hmac.compare_digest(f"{customer_id}:{customer_secret}".encode(), expected):
            raise ApiError(401, "InvalidPermission", "authentication failed")

    async def _join(self, request: web.Request) -> web.Response:
        body = await _json_object_body(request)
        properties = _JoinValidator(self, body).validate()
        name = body["name"]
        for existing in self.agents.values():
            if existing.name == name and existing.status not in TERMINAL_STATUSES:
                raise ApiError(409, "TaskConflict", f"task conflict: agent name {name} already exists")
        active = sum(1 for existing in self.agents.values() if existing.status not in TERMINAL_STATUSES)
        if active >= self.max_concurrent:
            raise ApiError(422, "ConcurrencyLimitExceeded", "concurrency limit exceeded")
        agent = self._create_agent(body, properties)
        return _json_response(200, {"agent_id": agent.agent_id, "create_ts": agent.create_ts, "status": agent.status})

    def _create_agent(self, body: dict[str, Any], properties: dict[str, Any]) -> EmulatedAgent:
        now = int(self.now())
        self._agent_sequence += 1
        agent = EmulatedAgent(
            agent_id=_random_id(28),
            name=body["name"],
            channel=properties["channel"],
            request=copy.deepcopy(body),
            properties=copy.deepcopy(properties),
            status=self.start_status,
            create_ts=now,
            start_ts=now,
            sequence=self._agent_sequence,
        )
        self.agents[agent.agent_id] = agent
        self._emit(101, self._payload_base(agent))
        if self.auto_user_join:
            self.user_joined(agent.agent_id)
        return agent

    def _agent_or_404(self, request: web.Request, *, running: bool) -> EmulatedAgent:
        agent = self.agents.get(request.match_info["agent_id"])
        if agent is None or (running and not agent.is_active):
            raise ApiError(404, "TaskNotFound", "task not found")
        return agent

    async def _leave(self, request: web.Request) -> web.Response:
        agent = self._agent_or_404(request, running=True)
        self._stop_agent(agent, "STOPPED", "OK")
        return _json_response(200, {})

    async def _query(self, request: web.Request) -> web.Response:
        agent = self._agent_or_404(request, running=False)
        return _json_response(
            200,
            {
                "message": f"agent exits with reason: {agent.message}" if agent.message else "",
                "start_ts": agent.start_ts,
                "stop_ts": agent.stop_ts or 0,
                "status": agent.status,
                "name": agent.name,
                "agent_id": agent.agent_id,
            },
        )

    async def _list(self, request: web.Request) -> web.Response:
        query = request.query
        now = int(self.now())
        states = _parse_states(query.get("state", "2"))
        from_time = _query_int(query, "from_time", now - LIST_DEFAULT_WINDOW_SECONDS)
        to_time = _query_int(query, "to_time", now)
        limit = _query_int(query, "limit", 20)
        if limit < 1:
            raise ApiError(400, "InvalidFieldValue", "limit must be at least 1")
        channel = query.get("channel")
        matching = sorted(
            (
                agent
                for agent in self.agents.values()
                if STATUS_CODES[agent.status] in states
                and from_time <= agent.start_ts <= to_time
                and (channel is None or agent.channel == channel)
            ),
            key=lambda agent: agent.sequence,
        )
        start = 0
        cursor = query.get("cursor")
        if cursor:
            cursor_agent = self.agents.get(cursor)
            if cursor_agent is None:
                raise ApiError(400, "InvalidFieldValue", f"cursor {cursor} is not a known agent_id")
            start = next(
                (i for i, agent in enumerate(matching) if agent.sequence >= cursor_agent.sequence),
                len(matching),
            )
        page = matching[start : start + limit]
        rest = matching[start + limit :]
        return _json_response(
            200,
            {
                "data": {
                    "count": len(page),
                    "list": [
                        {"start_ts": agent.start_ts, "status": agent.status, "agent_id": agent.agent_id}
                        for agent in page
                    ],
                },
                "meta": {"cursor": rest[0].agent_id if rest else "", "total": len(matching)},
                "status": "ok",
            },
        )

    async def _update(self, request: web.Request) -> web.Response:
        agent = self._agent_or_404(request, running=True)
        body = await _json_object_body(request)
        properties = body.get("properties")
        if properties is None:
            raise ApiError(400, "MissingRequiredField", "properties is required")
        if not isinstance(properties, dict):
            raise ApiError(400, "InvalidFieldValue", "properties must be an object")
        token = properties.get("token")
        if token is not None:
            enable_rtm = bool((agent.properties.get("advanced_features") or {}).get("enable_rtm"))
            self._check_agent_token(token, agent.channel, agent.agent_rtc_uid, enable_rtm=enable_rtm)
        for section in ("llm", "mllm"):
            if properties.get(section) is not None:
                _check_object(properties[section], f"properties.{section}")
        llm_update = properties.get("llm") or {}
        if llm_update.get("system_messages") is not None:
            _check_system_messages(llm_update["system_messages"])
        for section in ("llm", "mllm"):
            params = (properties.get(section) or {}).get("params")
            if params is not None:
                _check_object(params, f"properties.{section}.params")
        if token is not None:
            agent.properties["token"] = token
        for section in ("llm", "mllm"):
            updates = properties.get(section) or {}
            for key in ("system_messages", "params"):
                if updates.get(key) is not None:
                    agent.properties.setdefault(section, {})[key] = copy.deepcopy(updates[key])
        agent.updates.append(copy.deepcopy(body))
        return _json_response(200, {"agent_id": agent.agent_id, "create_ts": agent.create_ts, "status": agent.status})

    async def _history(self, request: web.Request) -> web.Response:
        agent = self._agent_or_404(request, running=True)
        if agent.status != "RUNNING":
            raise ApiError(404, "TaskNotFound", "history is only available while the agent is running")
        return _json_response(
            200,
            {
                "agent_id": agent.agent_id,
                "start_ts": agent.start_ts,
                "status": "RUNNING",
                "contents": agent.history_contents(),
            },
        )

    async def _turns(self, request: web.Request) -> web.Response:
        agent = self._agent_or_404(request, running=False)
        if agent.stop_ts is not None and not agent.is_active and self.now() - agent.stop_ts > TURNS_RETENTION_SECONDS:
            raise ApiError(404, "TaskNotFound", "turns are kept for sessions of the last 7 days")
        page_index = _query_int(request.query, "page_index", 1)
        page_size = _query_int(request.query, "page_size", TURNS_DEFAULT_PAGE_SIZE)
        if page_index < 1:
            raise ApiError(400, "InvalidFieldValue", "page_index must be at least 1")
        low, high = TURNS_PAGE_SIZES
        if not low <= page_size <= high:
            raise ApiError(400, "InvalidFieldValue", f"page_size must be between {low} and {high}")
        turns = _session_turns(agent)
        total_pages = max(1, -(-len(turns) // page_size))
        return _json_response(
            200,
            {
                "agent_id": agent.agent_id,
                "name": agent.name,
                "channel": agent.channel,
                "total_turn_count": len(turns),
                "pagination": {
                    "page_index": page_index,
                    "total_pages": total_pages,
                    "is_last_page": page_index >= total_pages,
                },
                "turns": turns[(page_index - 1) * page_size : page_index * page_size],
            },
        )

    async def _speak(self, request: web.Request) -> web.Response:
        agent = self._agent_or_404(request, running=True)
        body = await _json_object_body(request)
        text = _required_text(body, "text")
        if len(text.encode()) > MAX_SPEAK_BYTES:
            raise ApiError(400, "InvalidFieldValue", f"text must be at most {MAX_SPEAK_BYTES} bytes")
        priority = body.get("priority")
        if priority is not None and priority not in SPEAK_PRIORITIES:
            raise ApiError(400, "InvalidFieldValue", f"priority must be one of {sorted(SPEAK_PRIORITIES)}")
        _check_optional_bool(body, "interruptable", "interruptable")
        agent.spoken.append(body)
        return self._agent_brief(agent)

    async def _interrupt(self, request: web.Request) -> web.Response:
        agent = self._agent_or_404(request, running=True)
        if (await request.read()).strip():
            await _json_object_body(request)
        agent.interrupts += 1
        return self._agent_brief(agent)

    async def _think(self, request: web.Request) -> web.Response:
        agent = self._agent_or_404(request, running=True)
        body = await _json_object_body(request)
        text = _required_text(body, "text")
        allowed_actions = {
            "on_listening_action": {"interrupt", "inject", "ignore"},
            "on_thinking_action": {"interrupt", "ignore"},
            "on_speaking_action": {"interrupt", "ignore"},
        }
        for key, allowed in allowed_actions.items():
            if body.get(key) is not None and body[key] not in allowed:
                raise ApiError(400, "InvalidFieldValue", f"{key} must be one of {sorted(allowed)}")
        _check_optional_bool(body, "interruptable", "interruptable")
        agent.thoughts.append(body)
        self._append(agent, "user", f"[think API injected] {text}", "command")
        return self._agent_brief(agent)

    @staticmethod
    def _agent_brief(agent: EmulatedAgent) -> web.Response:
        return _json_response(200, {"agent_id": agent.agent_id, "channel": agent.channel, "start_ts": agent.start_ts})

    def _check_agent_token(self, token: Any, channel: str, uid: str, *, enable_rtm: bool) -> None:
        if not isinstance(token, str) or not token:
            raise ApiError(400, "InvalidFieldValue", "properties.token must be a non-empty string")
        problem = verify_rtc_token(
            token, self.app_id, self.app_certificate, channel, uid, self.now(), need_rtm=enable_rtm
        )
        if problem is not None:
            raise ApiError(400, "InvalidFieldValue", f"properties.token is invalid: {problem}")


class _JoinValidator:
    """Validates a join body per spec §4.1 and §12; raises ApiError on the first problem."""

    def __init__(self, emulator: AgoraEmulator, body: dict[str, Any]) -> None:
        self._emulator = emulator
        self._body = body

    def validate(self) -> dict[str, Any]:
        body = self._body
        name = _required(body, "name", "name")
        if not isinstance(name, str) or not name.strip():
            raise ApiError(400, "InvalidFieldValue", "name must be a non-empty string")
        presets = self._presets(body.get("preset"))
        pipeline_id = body.get("pipeline_id")
        if pipeline_id is not None and not isinstance(pipeline_id, str):
            raise ApiError(400, "InvalidFieldValue", "pipeline_id must be a string")
        properties = _required(body, "properties", "properties")
        _check_object(properties, "properties")
        for key in ("channel", "token", "agent_rtc_uid", "remote_rtc_uids"):
            _required(properties, key, f"properties.{key}")
        channel = properties["channel"]
        if not isinstance(channel, str) or not channel:
            raise ApiError(400, "InvalidFieldValue", "properties.channel must be a non-empty string")
        if len(channel.encode()) > MAX_CHANNEL_BYTES:
            raise ApiError(400, "InvalidFieldValue", f"properties.channel must be at most {MAX_CHANNEL_BYTES} bytes")
        agent_uid = self._uids(properties)
        _check_int_range(properties, "idle_timeout", "properties.idle_timeout", 0, 259_200)
        self._labels(properties.get("labels"))
        enable_rtm = self._enable_rtm(properties.get("advanced_features"))
        uses_mllm = self._uses_mllm(properties.get("mllm"))
        has_pipeline = bool(pipeline_id)
        self._llm(properties.get("llm"), required=not (presets & LLM_PRESETS or has_pipeline or uses_mllm))
        self._tts(properties.get("tts"), required=not (presets & TTS_PRESETS or has_pipeline or uses_mllm))
        if properties.get("asr") is not None:
            _check_object(properties["asr"], "properties.asr")
            language = properties["asr"].get("language")
            if language is not None and language not in ASR_LANGUAGES:
                raise ApiError(
                    400, "InvalidFieldValue", f"properties.asr.language {language!r} is not a supported language"
                )
        self._preset_needs(presets, properties)
        self._emulator._check_agent_token(properties["token"], channel, agent_uid, enable_rtm=enable_rtm)
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
            elif not _is_numeric_uid(uid):
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
        _check_object(raw, "properties.advanced_features")
        _check_optional_bool(raw, "enable_rtm", "properties.advanced_features.enable_rtm")
        return bool(raw.get("enable_rtm"))

    @staticmethod
    def _uses_mllm(raw: Any) -> bool:
        if raw is None:
            return False
        _check_object(raw, "properties.mllm")
        return raw.get("enable") is True

    @staticmethod
    def _llm(raw: Any, *, required: bool) -> None:
        if raw is None:
            if required:
                raise ApiError(400, "MissingRequiredField", "properties.llm is required")
            return
        _check_object(raw, "properties.llm")
        url = raw.get("url")
        if url is None and required:
            raise ApiError(400, "MissingRequiredField", "properties.llm.url is required")
        if url is not None and (not isinstance(url, str) or not re.match(r"https?://\S+$", url)):
            raise ApiError(400, "InvalidFieldValue", "properties.llm.url must be an http(s) URL")
        _check_int_range(raw, "max_history", "properties.llm.max_history", 1, 1024)
        if raw.get("system_messages") is not None:
            _check_system_messages(raw["system_messages"])
        if raw.get("params") is not None:
            _check_object(raw["params"], "properties.llm.params")
        for key in ("greeting_message", "failure_message", "api_key"):
            if raw.get(key) is not None and not isinstance(raw[key], str):
                raise ApiError(400, "InvalidFieldValue", f"properties.llm.{key} must be a string")
        if raw.get("vendor") is not None and raw["vendor"] not in LLM_VENDORS:
            raise ApiError(400, "InvalidFieldValue", f"properties.llm.vendor must be one of {sorted(LLM_VENDORS)}")
        if raw.get("style") is not None and raw["style"] not in LLM_STYLES:
            raise ApiError(400, "InvalidFieldValue", f"properties.llm.style must be one of {sorted(LLM_STYLES)}")

    @staticmethod
    def _preset_needs(presets: set[str], properties: dict[str, Any]) -> None:
        """What a preset needs from the request and what it refuses (see the module docstring)."""
        if presets & ASR_PRESETS:
            asr = properties.get("asr") or {}
            if asr.get("vendor") not in (None, "deepgram"):
                raise ApiError(
                    400, "InvalidFieldValue", "properties.asr.vendor must be deepgram with a Deepgram ASR preset"
                )
            params = asr.get("params")
            if params is not None:
                _check_object(params, "properties.asr.params")
                language = params.get("language")
                if language is not None and (not isinstance(language, str) or not language.strip()):
                    raise ApiError(
                        400, "InvalidFieldValue", "properties.asr.params.language must be a Deepgram language code"
                    )
                heard = asr.get("language")
                if isinstance(language, str) and isinstance(heard, str) and _primary(language) != _primary(heard):
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
        _check_object(raw, "properties.tts")
        vendor = raw.get("vendor")
        if vendor is None:
            if required:
                raise ApiError(400, "MissingRequiredField", "properties.tts.vendor is required")
            return
        if vendor not in TTS_VENDORS:
            raise ApiError(400, "InvalidFieldValue", f"properties.tts.vendor must be one of {sorted(TTS_VENDORS)}")


def _primary(language: str) -> str:
    """The language of a BCP-47 tag, without its region: "es" for "es-ES" and "es"."""
    return language.split("-", 1)[0].lower()


def _chunk_problem(data: str) -> str | None:
    """Why one streamed chunk is not a valid chat.completion.chunk, or None (strict-client check)."""
    try:
        chunk = json.loads(data)
    except ValueError:
        return f"a chunk that is not JSON: {data[:80]!r}"
    if not isinstance(chunk, dict):
        return "a chunk that is not a JSON object"
    if "error" in chunk:
        return f"the LLM reported an error: {str(chunk['error'])[:200]}"
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return "a chunk without a choices list"
    for choice in choices:
        if not isinstance(choice, dict) or not isinstance(choice.get("delta", {}), dict):
            return "a chunk with a malformed choice"
        content = choice.get("delta", {}).get("content")
        if content is not None and not isinstance(content, str):
            return "a chunk whose delta content is not a string"
    return None


async def _json_object_body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        body = json.loads(raw)
    except ValueError:
        raise ApiError(400, "InvalidRequestBody", "request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "InvalidRequestBody", "request body must be a JSON object")
    return body


def _required(container: dict[str, Any], key: str, label: str) -> Any:
    value = container.get(key)
    if value is None:
        raise ApiError(400, "MissingRequiredField", f"{label} is required")
    return value


def _required_text(body: dict[str, Any], key: str) -> str:
    value = _required(body, key, key)
    if not isinstance(value, str) or not value:
        raise ApiError(400, "InvalidFieldValue", f"{key} must be a non-empty string")
    return value


def _check_object(value: Any, label: str) -> None:
    if not isinstance(value, dict):
        raise ApiError(400, "InvalidFieldValue", f"{label} must be an object")


def _check_optional_bool(container: dict[str, Any], key: str, label: str) -> None:
    value = container.get(key)
    if value is not None and not isinstance(value, bool):
        raise ApiError(400, "InvalidFieldValue", f"{label} must be a boolean")


def _check_int_range(container: dict[str, Any], key: str, label: str, low: int, high: int) -> None:
    value = container.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ApiError(400, "InvalidFieldValue", f"{label} must be an integer in [{low}, {high}]")


def _check_system_messages(value: Any) -> None:
    if not isinstance(value, list) or not all(
        isinstance(message, dict) and isinstance(message.get("role"), str) and isinstance(message.get("content"), str)
        for message in value
    ):
        raise ApiError(
            400,
            "InvalidFieldValue",
            "properties.llm.system_messages must be a list of {role, content} strings",
        )


def _is_numeric_uid(uid: str) -> bool:
    return uid.isascii() and uid.isdigit() and int(uid) <= 2**32 - 1


def _parse_states(raw: str) -> set[int]:
    try:
        states = {int(part) for part in raw.split(",") if part.strip()}
    except ValueError:
        raise ApiError(400, "InvalidFieldValue", "state must be comma-separated integers") from None
    if not states or not states <= set(STATUS_CODES.values()):
        raise ApiError(400, "InvalidFieldValue", f"state values must be in {sorted(STATUS_CODES.values())}")
    return states


def _query_int(query: Any, key: str, default: int) -> int:
    raw = query.get(key)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ApiError(400, "InvalidFieldValue", f"{key} must be an integer") from None


def _substitute(text: str, variables: Any) -> str:
    if not isinstance(variables, dict):
        return text
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda match: str(variables.get(match[1], match[0])), text)


_TURN_STARTS = {
    ("assistant", "greeting"): "greeting",
    ("user", "asr"): "voice_input",
    ("assistant", "silence"): "silence_timeout",
}
_SPEECH_MS_PER_CHAR = 60
_LATENCIES_MS = {"voice_input": (("asr_ttlw", 310), ("llm_ttft", 420), ("tts_ttfb", 95)), "other": (("tts_ttfb", 95),)}


def _session_turns(agent: EmulatedAgent) -> list[dict[str, Any]]:
    """The agent's ended turns as ``/turns`` lists them (see the module docstring), numbered from 1."""
    spans: list[tuple[str, Message, list[Message]]] = []  # (start type, the starting message, its replies)
    current: list[Message] | None = None
    for message in agent.conversation:
        kind = _TURN_STARTS.get((message.role, message.source))
        if kind is not None:
            current = []
            spans.append((kind, message, current))
        elif message.role == "assistant" and current is not None:
            current.append(message)
        elif message.role == "user":
            current = None  # typed text or a think injection: no listed turn, nor its reply
    turns: list[dict[str, Any]] = []
    greetings = 0
    for index, (kind, first, replies) in enumerate(spans):
        following = spans[index + 1][1] if index + 1 < len(spans) else None
        spoken = replies[-1] if replies else (first if kind != "voice_input" else None)
        if following is None and spoken is None and agent.is_active:
            break  # the member spoke and the reply is still to come
        end = _turn_end(agent, spoken, following)
        start_metadata: dict[str, Any]
        if kind == "greeting":
            greetings += 1
            start_metadata = {"greeting_nth": greetings}
        elif kind == "voice_input":
            start_metadata = {
                "speech_duration_ms": len(first.content) * _SPEECH_MS_PER_CHAR,
                "interrupt_duration_ms": 160,
            }
        else:
            start_metadata = {"action": "speak"}
        segments = _LATENCIES_MS["voice_input" if kind == "voice_input" else "other"]
        turns.append(
            {
                "agent_id": agent.agent_id,
                "channel": agent.channel,
                "turn_id": len(turns) + 1,
                "start": {"start_at": first.timestamp_ms, "type": kind, "metadata": start_metadata},
                "end": end,
                "metrics": {
                    "e2e_latency_ms": sum(latency for _name, latency in segments),
                    "segmented_latency_ms": [{"name": name, "latency": latency} for name, latency in segments],
                },
            }
        )
    return turns


def _turn_end(agent: EmulatedAgent, spoken: Message | None, following: Message | None) -> dict[str, Any]:
    if spoken is None:
        if following is not None:
            return {
                "end_at": following.timestamp_ms,
                "type": "interrupted",
                "metadata": {"caused_by": "start_of_speech"},
            }
        return {"end_at": (agent.stop_ts or 0) * 1000, "type": "interrupted", "metadata": {"caused_by": "api_leave"}}
    if spoken.source == "llm_failure":
        return {
            "end_at": spoken.timestamp_ms,
            "type": "error",
            "metadata": {"reason": "LLM_REQUEST_ERR", "details": "the LLM request failed"},
        }
    if spoken.interrupted:
        at = spoken.interrupt_timestamp_ms or spoken.timestamp_ms
        return {"end_at": at, "type": "interrupted", "metadata": {"caused_by": "start_of_speech"}}
    playback = len(spoken.content) * _SPEECH_MS_PER_CHAR
    end_at = spoken.timestamp_ms + playback
    if following is not None:
        end_at = min(end_at, max(following.timestamp_ms, spoken.timestamp_ms))
    return {"end_at": end_at, "type": "ok", "metadata": {"playback_duration_ms": playback}}


def _random_id(length: int) -> str:
    alphabet = string.ascii_uppercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(length))


def _json_response(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(body, status=status, headers=headers)


def _envelope_body(envelope: dict[str, Any]) -> bytes:
    return json.dumps(envelope, separators=(",", ":"), ensure_ascii=False).encode()


def _error_response(status: int, reason: str, detail: str) -> web.Response:
    return _json_response(status, {"detail": detail, "reason": reason})


def _injected_response(rule: _FailureRule) -> web.Response:
    headers = {"Retry-After": f"{rule.retry_after:g}"} if rule.retry_after is not None else None
    if rule.legacy_body:
        body: dict[str, Any] = {
            "message": rule.detail,
            "requestResponse": {},
            "statusCode": rule.reason,
            "taskId": "",
        }
    else:
        body = {"detail": rule.detail, "reason": rule.reason}
    return _json_response(rule.status, body, headers)


def make_join_properties(
    emulator: AgoraEmulator,
    *,
    channel: str = "call-channel-1",
    agent_uid: str = "1001",
    remote_uid: str = "2002",
    labels: dict[str, str] | None = None,
    token_expires_in: int = 3600,
    **overrides: Any,
) -> dict[str, Any]:
    """A ``properties`` object the emulator accepts without a preset; ``overrides`` replace top-level keys."""
    properties: dict[str, Any] = {
        "channel": channel,
        "token": build_rtc_token(
            emulator.app_id,
            emulator.app_certificate,
            channel,
            int(agent_uid),
            token_expires_in,
            now=int(emulator.now()),
        ),
        "agent_rtc_uid": agent_uid,
        "remote_rtc_uids": [remote_uid],
        "idle_timeout": 30,
        "llm": {
            "url": "https://llm.example.test/v1/chat/completions",
            "api_key": "llm-key",
            "system_messages": [{"role": "system", "content": "You are a helpful voice assistant."}],
            "max_history": 32,
            "greeting_message": "Hello, how can I help?",
            "params": {"model": "gpt-4o-mini"},
        },
        "tts": {"vendor": "microsoft", "params": {"voice_name": "en-US-AndrewMultilingualNeural"}},
        "asr": {"language": "en-US"},
    }
    if labels is not None:
        properties["labels"] = labels
    properties.update(overrides)
    return properties


@asynccontextmanager
async def running_emulator(**kwargs: Any) -> AsyncIterator[AgoraEmulator]:
    """``async with running_emulator(webhook_url=...) as emu:`` — started on 127.0.0.1:0, stopped after."""
    emulator = AgoraEmulator(**kwargs)
    await emulator.start()
    try:
        yield emulator
    finally:
        await emulator.stop()


# ---- HTTP test controls and a standalone process ---------------------------------------------------------
#
# The benchmark runs the emulator in another process so that its CPU time and latency stay out of the bot's
# measurements; the test controls it needs (what ``user_joined``/``script``/``agents_by_label`` do in-process)
# are then HTTP routes under ``/_emulator/``. They take no auth (loopback test controls), are never recorded in
# ``requests``/``calls`` (they are not ConvoAI operations) and never tick the clock or consume injected failures.

CONTROL_PREFIX = "/_emulator"
CONTROL_ROUTE_PREFIX = "_emulator."


class ControlledAgoraEmulator(AgoraEmulator):
    """The emulator plus HTTP test controls, served with the ConvoAI API on one loopback port (``port``; 0 picks
    a free one) and on no other:

    * ``POST /_emulator/agents/{agent_id}/user_joined`` → ``{"agent_id", "status", "messages"}``
    * ``POST /_emulator/agents/{agent_id}/script`` with ``{"messages": [[role, content], ...]}`` (all or nothing)
      → ``{"agent_id", "appended", "messages"}``
    * ``GET /_emulator/agents?label=<key>=<value>`` (repeatable, all must match; none: every agent), oldest first
      → ``{"agents": [{"agent_id", "status", "labels"}]}``
    * ``GET /_emulator/stats`` → ``{"requests", "operations": {op: n}, "statuses": {op: {status: n}},
      "agents": {"total", "active"}}``, counting ConvoAI operations only.
    * ``POST /_emulator/agents/{agent_id}/user_says`` with ``{"text": ...}``: :meth:`user_says` (the agent calls its
      custom LLM) → ``{"agent_id", "outcome", "error", "said": [what the agent said after the line]}``

    The member's browser side, for a call page running against the emulator (``python3 tasks.py demo``):

    * ``GET /_emulator/sdk.js``: the Agora Web SDK stand-in (``agora_sdk_stub.js`` followed by
      ``agora_sdk_emulated.js``): joining the channel calls ``user_joined`` below, leaving ``user_left``.
    * ``POST /_emulator/channels/{channel}/user_joined`` → ``{"agent_id", "agent_uid", "said": [the greeting]}``,
      ``POST .../user_left`` → ``{"agent_id"}`` and ``POST .../user_says`` (as above) act on the channel's running
      agent. The page posts a plain-text JSON body (a CORS "simple" request, no preflight); every control answer
      carries ``Access-Control-Allow-Origin: *``: the emulator binds only 127.0.0.1.

    Errors: unknown agent 404 ``AgentNotFound``, agent not STARTING/RUNNING 409 ``AgentNotRunning``, bad body or
    query 400 ``InvalidControl``, in the emulator's ``{"detail", "reason"}`` shape."""

    def __init__(self, *, port: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._listen_port = port

    @property
    def control_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{CONTROL_PREFIX}"

    def _add_routes(self, app: web.Application) -> None:
        super()._add_routes(app)
        agent = CONTROL_PREFIX + "/agents/{agent_id}"
        name = CONTROL_ROUTE_PREFIX
        app.router.add_post(agent + "/user_joined", self._control_user_joined, name=name + "user_joined")
        app.router.add_post(agent + "/script", self._control_script, name=name + "script")
        app.router.add_get(CONTROL_PREFIX + "/agents", self._control_agents, name=name + "agents")
        app.router.add_get(CONTROL_PREFIX + "/stats", self._control_stats, name=name + "stats")
        app.router.add_post(agent + "/user_says", self._control_user_says, name=name + "user_says")
        app.router.add_get(CONTROL_PREFIX + "/sdk.js", self._control_sdk, name=name + "sdk")
        channel = CONTROL_PREFIX + "/channels/{channel}"
        app.router.add_post(channel + "/user_joined", self._channel_joined, name=name + "channel_joined")
        app.router.add_post(channel + "/user_left", self._channel_left, name=name + "channel_left")
        app.router.add_post(channel + "/user_says", self._control_user_says, name=name + "channel_says")

    @web.middleware
    async def _pipeline(self, request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        if not (request.match_info.route.name or "").startswith(CONTROL_ROUTE_PREFIX):
            return await super()._pipeline(request, handler)
        try:
            response: web.StreamResponse = await handler(request)
        except ApiError as exc:
            response = _error_response(exc.status, exc.reason, exc.detail)
        response.headers["Access-Control-Allow-Origin"] = "*"
        return response

    def _control_agent(self, request: web.Request) -> EmulatedAgent:
        if "channel" in request.match_info:
            return self._channel_agent(request)
        agent_id = request.match_info["agent_id"]
        agent = self.agents.get(agent_id)
        if agent is None:
            raise ApiError(404, "AgentNotFound", f"no agent {agent_id!r}")
        if not agent.is_active:
            raise ApiError(409, "AgentNotRunning", f"agent {agent_id} is {agent.status}, not running")
        return agent

    async def _control_user_joined(self, request: web.Request) -> web.Response:
        agent = self._control_agent(request)
        self.user_joined(agent.agent_id)
        return _json_response(
            200, {"agent_id": agent.agent_id, "status": agent.status, "messages": len(agent.conversation)}
        )

    async def _control_script(self, request: web.Request) -> web.Response:
        agent = self._control_agent(request)
        try:
            body = await _json_object_body(request)
        except ApiError as exc:
            raise ApiError(400, "InvalidControl", exc.detail) from None
        raw = body.get("messages")
        if not isinstance(raw, list):
            raise ApiError(400, "InvalidControl", "messages must be a list of [role, content] pairs")
        messages: list[tuple[str, str]] = []
        for index, item in enumerate(raw):
            if (
                not isinstance(item, list)
                or len(item) != 2
                or item[0] not in ("user", "assistant")
                or not isinstance(item[1], str)
            ):
                raise ApiError(
                    400, "InvalidControl", f"messages[{index}] must be [role, content] with role user or assistant"
                )
            messages.append((item[0], item[1]))
        self.script(agent.agent_id, messages)
        return _json_response(
            200, {"agent_id": agent.agent_id, "appended": len(messages), "messages": len(agent.conversation)}
        )

    async def _control_agents(self, request: web.Request) -> web.Response:
        wanted: list[tuple[str, str]] = []
        for raw in request.query.getall("label", []):
            key, sep, value = raw.partition("=")
            if not sep or not key:
                raise ApiError(400, "InvalidControl", f"label must be <key>=<value>, got {raw!r}")
            wanted.append((key, value))
        matches = sorted(
            (agent for agent in self.agents.values() if all(agent.labels.get(k) == v for k, v in wanted)),
            key=lambda agent: agent.sequence,
        )
        return _json_response(
            200,
            {
                "agents": [
                    {"agent_id": agent.agent_id, "status": agent.status, "labels": agent.labels} for agent in matches
                ]
            },
        )

    async def _control_stats(self, request: web.Request) -> web.Response:
        operations: dict[str, int] = {}
        statuses: dict[str, dict[str, int]] = {}
        for call in self.calls:
            operations[call.operation] = operations.get(call.operation, 0) + 1
            by_status = statuses.setdefault(call.operation, {})
            by_status[str(call.status)] = by_status.get(str(call.status), 0) + 1
        active = sum(1 for agent in self.agents.values() if agent.is_active)
        return _json_response(
            200,
            {
                "requests": len(self.calls),
                "operations": operations,
                "statuses": statuses,
                "agents": {"total": len(self.agents), "active": active},
            },
        )

    def _channel_agent(self, request: web.Request) -> EmulatedAgent:
        channel = request.match_info["channel"]
        running = [agent for agent in self.agents.values() if agent.channel == channel and agent.is_active]
        if not running:
            raise ApiError(404, "AgentNotFound", f"no running agent in channel {channel!r}")
        return max(running, key=lambda agent: agent.sequence)

    async def _control_user_says(self, request: web.Request) -> web.Response:
        agent = self._control_agent(request)
        try:
            text = (await _json_object_body(request)).get("text")
        except ApiError as exc:
            raise ApiError(400, "InvalidControl", exc.detail) from None
        if not isinstance(text, str) or not text.strip():
            raise ApiError(400, "InvalidControl", "text must be a non-empty string")
        if not agent.llm.get("url"):
            raise ApiError(409, "NoCustomLLM", f"agent {agent.agent_id} has no llm.url: its LLM is an Agora preset")
        before = len(agent.conversation)
        turn = await self.user_says(agent.agent_id, text.strip())
        said = [m.content for m in agent.conversation[before:] if m.role == "assistant"]
        body = {"agent_id": agent.agent_id, "outcome": turn.outcome, "error": turn.error, "said": said}
        return _json_response(200, body)

    async def _channel_joined(self, request: web.Request) -> web.Response:
        agent = self._channel_agent(request)
        before = len(agent.conversation)
        self.user_joined(agent.agent_id)
        said = [m.content for m in agent.conversation[before:] if m.role == "assistant"]
        return _json_response(200, {"agent_id": agent.agent_id, "agent_uid": agent.agent_rtc_uid, "said": said})

    async def _channel_left(self, request: web.Request) -> web.Response:
        agent = self._channel_agent(request)
        self.user_left(agent.agent_id)
        return _json_response(200, {"agent_id": agent.agent_id})

    async def _control_sdk(self, request: web.Request) -> web.Response:
        here = Path(__file__).parent
        script = "\n".join((here / name).read_text(encoding="utf-8") for name in SDK_PARTS)
        return web.Response(text=script, content_type="text/javascript", charset="utf-8")


SDK_PARTS = ("agora_sdk_stub.js", "agora_sdk_emulated.js")
"""What ``GET /_emulator/sdk.js`` serves, in order: the recording stub, then its link to the emulator."""


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m standins.agora_emulator [--port N] [--max-concurrent N] [--latency S] [--webhook-url URL]``:
    serves the API and the ``/_emulator/`` controls on that one port of 127.0.0.1 until SIGTERM or SIGINT.
    Prints ``agora-emulator ready <base_url>`` on stdout once it listens (``--port 0``, the default, picks a
    free port)."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(prog="python -m standins.agora_emulator", description=main.__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--max-concurrent", type=int, default=20)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every ConvoAI response")
    parser.add_argument("--webhook-url", default=None)
    args = parser.parse_args(argv)

    async def serve() -> None:
        emulator = ControlledAgoraEmulator(
            port=args.port, max_concurrent=args.max_concurrent, webhook_url=args.webhook_url
        )
        emulator.latency = args.latency
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        async with emulator:
            print(f"agora-emulator ready {emulator.base_url}", flush=True)
            await stop.wait()

    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
