"""The emulator itself: its agents and their lifecycle (start, greeting, idle timeout, the 72 h cap, the token-expiry
warning, stop), its clock, and the test controls that play the member's side of a call. The REST API, NCS webhooks,
the custom-LLM client and failure injection are the mixins it is made of."""

from __future__ import annotations

import copy
import re
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal, Self

from aiohttp import web

from bot.agora.tokens import build_rtc_token, token_expires_at
from standins.agora_emulator.agents import EmulatedAgent, Message, random_id
from standins.agora_emulator.contract import (
    API_PREFIX,
    MAX_LIFETIME_SECONDS,
    STARTUP_SECONDS,
    TEST_APP_CERTIFICATE,
    TEST_APP_ID,
    TEST_CUSTOMER_ID,
    TEST_CUSTOMER_SECRET,
    TOKEN_EXPIRY_WARNING_SECONDS,
)
from standins.agora_emulator.custom_llm import CustomLLMClient
from standins.agora_emulator.faults import FaultInjection
from standins.agora_emulator.rest_api import ConvoAIRoutes
from standins.agora_emulator.webhooks import (
    DEFAULT_WEBHOOK_RETRY_DELAYS,
    NCS_RECEIVER_TIMEOUT_SECONDS,
    NcsWebhooks,
    WebhookMode,
)


class AgoraEmulator(ConvoAIRoutes, CustomLLMClient, NcsWebhooks, FaultInjection):
    """The ConvoAI emulator: ``await emu.start()`` or ``running_emulator(...)``; see the package docstring."""

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
        self.start_status = start_status
        self.auto_user_join = auto_user_join
        self.agents: dict[str, EmulatedAgent] = {}
        self._clock = clock
        self._clock_offset = 0.0
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._listen_port = 0
        self._agent_sequence = 0
        self._init_rest_api()
        self._init_webhooks(
            webhook_url=webhook_url,
            webhook_secret=webhook_secret,
            webhook_mode=webhook_mode,
            webhook_timeout=webhook_timeout,
            webhook_max_retries=webhook_max_retries,
            webhook_retry_delays=webhook_retry_delays,
        )
        self._init_custom_llm()
        self._init_faults()

    async def start(self) -> Self:
        app = web.Application(middlewares=[self._pipeline])
        self._add_routes(app)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self._listen_port)
        await site.start()
        self._port = int(self._runner.addresses[0][1])
        self._start_webhooks()
        return self

    async def stop(self) -> None:
        await self._stop_webhooks()
        await self._close_llm_session()
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
            self._append(
                agent, "assistant", substitute_variables(greeting, agent.llm.get("template_variables")), "greeting"
            )

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

    def _create_agent(self, body: dict[str, Any], properties: dict[str, Any]) -> EmulatedAgent:
        now = int(self.now())
        self._agent_sequence += 1
        agent = EmulatedAgent(
            agent_id=random_id(28),
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


def substitute_variables(text: str, variables: Any) -> str:
    if not isinstance(variables, dict):
        return text
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda match: str(variables.get(match[1], match[0])), text)


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
