"""Starting a call: the server's and the member's limits, the call's row, the memory context and the agent's join;
and the live-recall key a starting or active call's agent presents to the bot's LLM route."""

from __future__ import annotations

import logging
import secrets
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from bot.agora import AgentStarted, AgoraError, AgoraLimitExceeded, ConvoAIClient
from bot.calls.agent import join_properties, preset_for
from bot.calls.agent_control import AgentControl
from bot.calls.checkpoints import Checkpoints
from bot.calls.errors import (
    CallAlreadyActive,
    CallsDisabled,
    CapacityReached,
    ConsentRequired,
    QuotaReached,
    VoiceUnavailable,
)
from bot.calls.language import (
    ENGLISH,
    LANGUAGES,
    CallLanguage,
    Language,
    call_language,
    greeting_for,
    persona_for,
    tts_kind,
    welcome_back,
)
from bot.calls.leases import Leases
from bot.calls.links import LinkTokens
from bot.calls.llm_keys import call_id_of, hash_llm_key, key_matches, new_llm_key
from bot.calls.model import GuildUsage, StartedCall, start_of_day
from bot.calls.traffic import MembersWaiting
from bot.config import Settings
from bot.memory.greeting import greets_personally
from bot.memory.service import MemoryService
from bot.monitor import Counters
from bot.store.models import (
    CallMemoryState,
    CallRecord,
    CallStartCheck,
    CallState,
    GuildSettings,
    needs_consent,
    remembers,
)
from bot.store.repository import OpenCallExists

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Joining:
    """What a call's join is made of besides its language (which can fall back to English between two tries)."""

    call: CallRecord
    check: CallStartCheck
    remember: bool
    private: bool
    name: str | None
    llm_key: str | None


class StartStore(Protocol):
    async def call_start_check(self, user_id: int, guild_id: int | None, since: float) -> CallStartCheck: ...
    async def create_call(self, call: CallRecord) -> None: ...
    async def open_call_for_user(self, user_id: int) -> CallRecord | None: ...
    async def transition_call(
        self, call_id: str, from_states: Sequence[CallState], to_state: CallState, **fields: Any
    ) -> bool: ...
    async def update_call(self, call_id: str, **fields: Any) -> None: ...
    async def count_guild_calls_since(self, guild_id: int, since: float) -> int: ...
    async def open_calls(self) -> list[CallRecord]: ...
    async def call_memory_state(self, call_id: str) -> CallMemoryState | None: ...


class CallStarter:
    def __init__(
        self,
        store: StartStore,
        memory: MemoryService,
        agora: ConvoAIClient,
        settings: Settings,
        *,
        agents: AgentControl,
        checkpoints: Checkpoints,
        leases: Leases,
        links: LinkTokens,
        members: MembersWaiting,
        counters: Counters,
        clock: Callable[[], float],
    ):
        self.store = store
        self.memory = memory
        self.agora = agora
        self.settings = settings
        self.agents = agents
        self.checkpoints = checkpoints
        self.leases = leases
        self.links = links
        self.members = members
        self.counters = counters
        self.clock = clock
        self.public_url = settings.web.public_url.rstrip("/")
        self._starting: set[str] = set()  # calls this process is starting right now (a takeover leaves them alone)

    # ---- policy ----------------------------------------------------------------------------------------

    def effective_max_minutes(self, guild: GuildSettings) -> int:
        return guild.max_call_minutes or self.settings.calls.max_minutes

    def effective_daily_limit(self, guild: GuildSettings) -> int:
        return guild.calls_per_member_per_day or self.settings.calls.calls_per_member_per_day

    async def usage_today(self, guild_id: int) -> GuildUsage:
        since = start_of_day(self.clock())
        calls = await self.store.count_guild_calls_since(guild_id, since)
        active = len([c for c in await self.store.open_calls() if c.guild_id == guild_id])
        return GuildUsage(calls_today=calls, active_now=active)

    # ---- start -----------------------------------------------------------------------------------------

    def is_starting(self, call_id: str) -> bool:
        return call_id in self._starting

    async def start(
        self,
        *,
        user_id: int,
        guild_id: int | None,
        private: bool = False,
        locale: str | None = None,
        name: str | None = None,
    ) -> StartedCall:
        """`locale` is the member's Discord language (the interaction's), for `bot.calls.language.call_language`;
        `name` their Discord display name, which the agent greets them by when it knows no name they told."""
        with self.members.waiting():
            return await self._start(user_id=user_id, guild_id=guild_id, private=private, locale=locale, name=name)

    async def _start(
        self, *, user_id: int, guild_id: int | None, private: bool, locale: str | None, name: str | None
    ) -> StartedCall:
        now = self.clock()
        check = await self.store.call_start_check(user_id, guild_id, start_of_day(now))
        guild = check.guild
        if not guild.calls_enabled:
            raise CallsDisabled()
        user = check.user
        if not private and needs_consent(user):
            raise ConsentRequired()
        if check.open_call_id is not None:
            raise CallAlreadyActive(check.open_call_id)
        limit = self.effective_daily_limit(guild)
        if check.calls_today >= limit:
            raise QuotaReached(limit, start_of_day(now) + 86400)
        if check.open_calls >= self.settings.agora.max_concurrent_agents:
            raise CapacityReached()

        remember = remembers(user, private=private)
        agora = self.settings.agora
        language = call_language(
            agora, choice=user.language if user else None, locale=locale, server_default=guild.language
        )
        max_minutes = self.effective_max_minutes(guild)
        call_id = uuid.uuid4().hex
        user_uid = secrets.randbelow(9_000_000) + 1000
        agent_uid = secrets.randbelow(90_000_000) + 10_000_000
        link = self.links.new()
        link_expires = now + self.settings.web.link_ttl_minutes * 60
        live = self.settings.live_recall_enabled
        llm_key = new_llm_key(call_id) if live else None
        call = CallRecord(
            call_id=call_id,
            user_id=user_id,
            guild_id=guild_id,
            channel=f"call-{call_id[:20]}",
            agent_name=f"memcall-{call_id}",
            user_uid=user_uid,
            agent_uid=agent_uid,
            state="starting",
            max_minutes=max_minutes,
            started_at=now,
            private=not remember,
            link_hash=self.links.hash(link),
            link_expires_at=link_expires,
            owner=self.leases.owner,
            lease_until=now + self.leases.starting_seconds,
            llm_key_hash=hash_llm_key(llm_key) if llm_key else None,
            language=language.code,
        )
        self._starting.add(call_id)
        try:
            try:
                await self.store.create_call(call)
            except OpenCallExists as exc:
                active = await self.store.open_call_for_user(user_id)
                raise CallAlreadyActive(active.call_id if active else "") from exc

            try:
                joining = Joining(call, check, remember=remember, private=private, name=name, llm_key=llm_key)
                (started, remembers_earlier), language = await self._join_or_english(joining, language)
            except AgoraLimitExceeded as exc:
                await self.abandon(call, f"agora refused: {exc}")
                raise CapacityReached() from exc
            except (AgoraError, ValueError) as exc:
                await self.abandon(call, str(exc))
                raise VoiceUnavailable(str(exc)) from exc
            except BaseException:
                await self.abandon(call, "start interrupted")
                raise

            if not await self.store.transition_call(
                call_id,
                ["starting"],
                "active",
                agent_id=started.agent_id,
                lease_until=self.clock() + self.leases.seconds,
                language=language.code,
            ):
                # Someone ended it meanwhile (e.g. /forget everything): the agent must not outlive the call.
                await self.agents.leave_quietly(started.agent_id)
                raise VoiceUnavailable("call was ended while starting")
            self.checkpoints.watch(call_id)
            self.counters.calls_started += 1
            log.info("call started", extra={"call_id": call_id, "user_id": user_id, "guild_id": guild_id})
            return StartedCall(
                call_id=call_id,
                link_url=f"{self.public_url}/call/{link}",
                link_expires_at=link_expires,
                max_minutes=max_minutes,
                private=not remember,
                memory_paused=not private and user is not None and not user.memory_enabled,
                language=language.code,
                language_wanted=language.fallback_from.code if language.fallback_from else None,
                remembers_earlier=remembers_earlier,
            )
        finally:
            self._starting.discard(call_id)

    def greeting(self, check: CallStartCheck, language: Language, *, private: bool, name: str | None) -> str:
        """What the agent says first: a returning member's own greeting (`bot.memory.greeting`: by the name they
        told, else ``name``; the question prepared on their last conversation when it is in this language), else
        the server's."""
        prepared = check.greeting
        known_name = (prepared.name if prepared is not None else None) or name
        if known_name and greets_personally(check, private=private):
            follow_up = prepared.follow_up if prepared is not None and prepared.language == language.code else None
            return welcome_back(language, known_name, follow_up)
        guild = check.guild
        return greeting_for(
            language,
            bot_greeting=self.settings.agora.greeting,
            server_greeting=guild.greeting,
            server_language=guild.language or ENGLISH,
            name=name,
        )

    async def _join_or_english(
        self, joining: Joining, language: CallLanguage
    ) -> tuple[tuple[AgentStarted, bool], CallLanguage]:
        """The agent's join in the call's language. When Agora refuses (400) the join of a call held in another
        language than English with one of our MiniMax voices, the call is held in English instead and says so
        (`CallLanguage.fallback_from`): Agora spec §13.2, "No Agora page lists which voices a managed MiniMax
        preset accepts: treat the documented system voices as accepted and keep a clear fallback when the engine
        refuses one"."""
        try:
            return await self._join(joining, language), language
        except AgoraError as exc:
            voiced = language.code != ENGLISH and tts_kind(self.settings.agora) == "minimax"
            if isinstance(exc, AgoraLimitExceeded) or exc.status != 400 or not voiced:
                raise
            log.warning(
                "Agora refused the %s join of call %s (%s): the call is held in English",
                language.language.name,
                joining.call.call_id,
                exc,
                extra={"call_id": joining.call.call_id},
            )
        english = CallLanguage(LANGUAGES[ENGLISH], language.source, fallback_from=language.language)
        return await self._join(joining, english), english

    async def _join(self, joining: Joining, language: CallLanguage) -> tuple[AgentStarted, bool]:
        """The agent started, and whether its instructions carry memory of earlier conversations."""
        call, check = joining.call, joining.check
        agora = self.settings.agora
        guild = check.guild
        persona = persona_for(guild.persona or self.settings.memory.persona, language.language)
        if joining.remember:
            system_messages = await self.memory.build_context(call.user_id, persona=persona, memory_enabled=True)
        else:
            system_messages = [{"role": "system", "content": persona}]
        properties = join_properties(
            agora,
            channel=call.channel,
            agent_token=self.agents.agent_token(call),
            agent_uid=call.agent_uid,
            user_uid=call.user_uid,
            system_messages=system_messages,
            greeting=self.greeting(check, language.language, private=joining.private, name=joining.name),
            labels={"call_id": call.call_id},
            live_llm=(self.live_llm_url, joining.llm_key) if joining.llm_key else None,
            language=language.language,
        )
        live = self.settings.live_recall_enabled
        started = await self.agora.join(call.agent_name, properties, preset=preset_for(agora, live_recall=live))
        return started, len(system_messages) > 1

    async def abandon(self, call: CallRecord, why: str) -> None:
        """A start failed after the call row existed: mark it failed and stop any agent it may have created."""
        log.warning("call %s could not start: %s", call.call_id, why, extra={"call_id": call.call_id})
        await self.store.transition_call(
            call.call_id, ["starting"], "failed", ended_at=self.clock(), end_reason="start_failed", link_hash=None
        )
        try:
            for info in await self.agora.list_agents(channel=call.channel, states=(0, 1, 2)):
                await self.agents.leave_quietly(info.agent_id)
        except AgoraError as exc:
            log.warning("could not check for an orphan agent of call %s: %s", call.call_id, exc)

    async def remember_card(self, call_id: str, token: str, message_id: int) -> None:
        """Where the member's card is, so whichever process ends the call can update it."""
        await self.store.update_call(call_id, notify_token=token, card_message_id=message_id)

    # ---- live recall -----------------------------------------------------------------------------------

    @property
    def live_llm_url(self) -> str:
        return f"{self.public_url}/llm/v1/chat/completions"

    async def call_for_llm_key(self, key: str) -> CallMemoryState | None:
        """The call whose LLM-route key this is, while that call is starting or active, with its member's memory
        state (read with the call's row in the same trip: a voice turn's first read); None otherwise."""
        call_id = call_id_of(key)
        found = await self.store.call_memory_state(call_id) if call_id else None
        if found is None or not key_matches(key, found.call.llm_key_hash):
            return None
        return found if found.call.state in ("starting", "active") else None
