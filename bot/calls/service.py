"""The call lifecycle: start, checkpoint, finalize exactly once, reconcile after a restart.

All call state lives in the store and changes only through conditional transitions, so two routes in one
process, or two processes sharing the database, cannot both finalize a call. In-process tasks (checkpoint
loops, time limits) are conveniences: after a restart `reconcile` rebuilds them from the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Protocol

from bot.agora import AgoraError, AgoraLimitExceeded, AgoraNotFound, ConvoAIClient
from bot.agora.tokens import MAX_TOKEN_LIFETIME_SECONDS, build_rtc_token
from bot.agora.webhooks import EVENT_AGENT_TOKEN_EXPIRING, Notification, parse_notification, verify_signature
from bot.calls.agent import RUNNING_STATUSES, join_properties, preset_for, stop_reason, token_update
from bot.calls.errors import (
    CallAlreadyActive,
    CallsDisabled,
    CapacityReached,
    ConsentRequired,
    NoActiveCall,
    QuotaReached,
    VoiceUnavailable,
    WebhookNotStored,
)
from bot.calls.inbox import WebhookInbox
from bot.calls.links import LinkTokens
from bot.calls.llm_keys import call_id_of, hash_llm_key, key_matches, new_llm_key
from bot.calls.recovery import count_lost_lines
from bot.config import Settings
from bot.logs import bind
from bot.memory.importer import POST_CALL_JOB
from bot.memory.service import MemoryService
from bot.monitor import Counters
from bot.store.models import CallMemoryState, CallRecord, GuildSettings, Role, needs_consent, remembers
from bot.store.repository import (
    NOTICE_KEEP_SECONDS,
    AccountStore,
    CallStepStore,
    ConversationStore,
    GuildSettingsStore,
    JobStore,
    OpenCallExists,
    StorageFull,
)


class CallStore(AccountStore, GuildSettingsStore, ConversationStore, CallStepStore, JobStore, Protocol):
    """What the call lifecycle reads and writes."""


log = logging.getLogger(__name__)

TOKEN_MARGIN_SECONDS = 600
# A call stays with the process that looks after it for this many checkpoint intervals after the last renewal.
LEASE_CHECKPOINTS = 3
# A starting call (joining the agent, with retries) is left alone by other processes for at least this long.
STARTING_LEASE_SECONDS = 120.0
STALE_NOTICE_MARGIN_SECONDS = 86400.0
LEAVE_RETRY_FIRST_SECONDS = 5.0
LEAVE_RETRY_MAX_SECONDS = 300.0
TOKEN_RENEW_BEFORE_SECONDS = 3600
"""A checkpoint renews the agent's token once it has less than this left (Agora also warns with NCS 104)."""
CHECKPOINT_YIELD_MAX_SECONDS = 2.0
"""A checkpoint waits at most this long (and at most a quarter of the checkpoint interval) for the starts and
hang-ups in flight: saving a running call's history can wait a moment, a member who is waiting cannot."""
WEBHOOK_GRACE_SECONDS = 15.0
"""Post-call processing waits at most this long after a call ends, so Agora's history webhook (NCS 103) can land
first; it starts at once when that webhook already arrived or when no webhook is configured."""


@dataclass(frozen=True)
class StartedCall:
    call_id: str
    link_url: str
    link_expires_at: float
    max_minutes: int
    private: bool
    memory_paused: bool = False
    """Private only because the member paused their memory (not a private call they asked for)."""


@dataclass(frozen=True)
class CallEnded:
    call_id: str
    user_id: int
    guild_id: int | None
    reason: str
    turns_stored: int
    private: bool
    card: tuple[str, int] | None = None  # (interaction token, message id) of the member's card, if it was shown
    saved: bool = True
    """False when the disk was full: the call ended and its agent stopped, but it is stored later."""
    lines_lost: int = 0
    """Things the member said while no bot process ran that could not be stored (`bot.calls.recovery`)."""


@dataclass
class _UnsavedEnding:
    """A call that ended while the database could not be written, kept until `save_unsaved` stores it."""

    call_id: str
    reason: str
    at: float
    window: list[tuple[Role, str]] | None = None
    generation: int | None = None
    stopped: bool = True


class CallListener(Protocol):
    async def call_ended(self, ended: CallEnded) -> None: ...


@dataclass(frozen=True)
class GuildUsage:
    calls_today: int
    active_now: int


def start_of_day(ts: float) -> float:
    day = datetime.fromtimestamp(ts, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day.timestamp()


class CallService:
    def __init__(
        self,
        store: CallStore,
        memory: MemoryService,
        agora: ConvoAIClient,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.time,
        owner: str | None = None,
        run_checkpoints: bool = True,
        counters: Counters | None = None,
    ):
        self.store = store
        self.counters = counters if counters is not None else Counters()
        self.memory = memory
        self.agora = agora
        self.settings = settings
        self.clock = clock
        self.owner = owner or uuid.uuid4().hex[:12]
        self.links = LinkTokens(
            settings.web.link_signing_key.get_secret_value() if settings.web.link_signing_key else None
        )
        self.run_checkpoints = run_checkpoints
        self._listeners: list[CallListener] = []
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._background: set[asyncio.Task[object]] = set()
        self._finalizing: dict[str, asyncio.Task[CallEnded | None]] = {}
        self._closing_pages: dict[str, asyncio.Task[None]] = {}
        self._notices_in_flight: set[str] = set()
        self._stopping: dict[str, asyncio.Task[None]] = {}
        self._unsaved: dict[str, _UnsavedEnding] = {}
        self.leave_retry_first_seconds = LEAVE_RETRY_FIRST_SECONDS
        self.leave_retry_max_seconds = LEAVE_RETRY_MAX_SECONDS
        self._token_expires: dict[str, float] = {}
        self._final_history: set[str] = set()
        self._open_pages: dict[str, str] = {}
        self._closing = False
        self._starting: set[str] = set()  # calls this process is starting right now (reconcile leaves them alone)
        self._members_waiting = 0  # starts and endings in flight: a member waits for each
        self._members_idle = asyncio.Event()
        self._members_idle.set()
        self.inbox = WebhookInbox.beside(settings.memory.database_path, master_key=settings.memory.master_key_bytes())

    @property
    def closed(self) -> bool:
        return self._closing

    @property
    def lease_seconds(self) -> float:
        """How long a call stays this process's after its last renewal (every checkpoint renews it). When a
        process dies, another takes its calls over once their leases run out."""
        return LEASE_CHECKPOINTS * self.settings.agora.checkpoint_seconds

    async def _take(self, call_id: str) -> bool:
        now = self.clock()
        return await self.store.take_call_lease(call_id, self.owner, now, now + self.lease_seconds)

    @contextlib.asynccontextmanager
    async def _holding_lease(self, call_id: str) -> AsyncIterator[None]:
        """Keep renewing this process's lease on the call while the block runs.

        Ending a call (last history read, leave, merge) can outlast one lease period on a saturated process;
        without renewal another process would take the ending over and stop the agent and notify a second time."""

        async def renew() -> None:
            while True:
                await asyncio.sleep(self.lease_seconds / 3)
                try:
                    kept = await self._take(call_id)
                except Exception as exc:  # the database is busy or full: try again at the next beat
                    log.warning("call %s: renewing its lease failed: %s", call_id, exc)
                    continue
                if not kept:
                    log.warning("call %s: another bot process took over its lease while it was ending", call_id)
                    return

        renewing = asyncio.get_running_loop().create_task(renew())
        try:
            yield
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing

    # ---- listeners -------------------------------------------------------------------------------------

    def add_listener(self, listener: CallListener) -> None:
        self._listeners.append(listener)

    async def _notify(self, ended: CallEnded) -> None:
        for listener in self._listeners:
            try:
                await listener.call_ended(ended)
            except Exception:
                log.exception("a call-ended listener failed for call %s", ended.call_id)

    # ---- settings and policy ---------------------------------------------------------------------------

    async def guild_settings(self, guild_id: int | None) -> GuildSettings:
        if guild_id is None:
            return GuildSettings(guild_id=0)
        return await self.store.get_guild_settings(guild_id)

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

    async def start(self, *, user_id: int, guild_id: int | None, private: bool = False) -> StartedCall:
        with self._member_waiting():
            return await self._start(user_id=user_id, guild_id=guild_id, private=private)

    @contextlib.contextmanager
    def _member_waiting(self) -> Iterator[None]:
        """Count an operation a member is waiting for (a start, an ending), so checkpoints give way to it."""
        self._members_waiting += 1
        self._members_idle.clear()
        try:
            yield
        finally:
            self._members_waiting -= 1
            if not self._members_waiting:
                self._members_idle.set()

    async def _give_way_to_members(self) -> None:
        """Wait, briefly, until no start or ending is in flight: under a burst of calls the checkpoints of
        running calls (no one waits for them) then do not share the event loop and the database with the
        members who are waiting. Bounded (`CHECKPOINT_YIELD_MAX_SECONDS`, a quarter of the interval), so a
        checkpoint is late by at most that much, far less than it takes to talk past the agent's history window."""
        if self._members_idle.is_set() or self._closing:
            return
        # Spread over half the bound, so the checkpoints held back by one burst do not all resume at once.
        bound = min(CHECKPOINT_YIELD_MAX_SECONDS, self.settings.agora.checkpoint_seconds / 4) * (
            0.5 + random.random() / 2
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._members_idle.wait(), timeout=bound)

    async def _start(self, *, user_id: int, guild_id: int | None, private: bool) -> StartedCall:
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
            owner=self.owner,
            lease_until=now + max(self.lease_seconds, STARTING_LEASE_SECONDS),
            llm_key_hash=hash_llm_key(llm_key) if llm_key else None,
        )
        self._starting.add(call_id)
        try:
            try:
                await self.store.create_call(call)
            except OpenCallExists as exc:
                active = await self.store.open_call_for_user(user_id)
                raise CallAlreadyActive(active.call_id if active else "") from exc

            persona = guild.persona or self.settings.memory.persona
            if remember:
                system_messages = await self.memory.build_context(user_id, persona=persona, memory_enabled=True)
            else:
                system_messages = [{"role": "system", "content": persona}]
            agora = self.settings.agora
            try:
                agent_token = self._agent_token(call)
                properties = join_properties(
                    agora,
                    channel=call.channel,
                    agent_token=agent_token,
                    agent_uid=agent_uid,
                    user_uid=user_uid,
                    system_messages=system_messages,
                    greeting=guild.greeting or agora.greeting,
                    labels={"call_id": call_id},
                    live_llm=(self.live_llm_url, llm_key) if llm_key else None,
                )
                started = await self.agora.join(call.agent_name, properties, preset=preset_for(agora, live_recall=live))
            except AgoraLimitExceeded as exc:
                await self._abandon(call, f"agora refused: {exc}")
                raise CapacityReached() from exc
            except (AgoraError, ValueError) as exc:
                await self._abandon(call, str(exc))
                raise VoiceUnavailable(str(exc)) from exc
            except BaseException:
                await self._abandon(call, "start interrupted")
                raise

            if not await self.store.transition_call(
                call_id,
                ["starting"],
                "active",
                agent_id=started.agent_id,
                lease_until=self.clock() + self.lease_seconds,
            ):
                # Someone ended it meanwhile (e.g. /forget everything): the agent must not outlive the call.
                await self._leave_quietly(started.agent_id)
                raise VoiceUnavailable("call was ended while starting")
            self._watch(call_id)
            self.counters.calls_started += 1
            log.info("call started", extra={"call_id": call_id, "user_id": user_id, "guild_id": guild_id})
            return StartedCall(
                call_id=call_id,
                link_url=f"{self.settings.web.public_url.rstrip('/')}/call/{link}",
                link_expires_at=link_expires,
                max_minutes=max_minutes,
                private=not remember,
                memory_paused=not private and user is not None and not user.memory_enabled,
            )
        finally:
            self._starting.discard(call_id)

    @property
    def live_llm_url(self) -> str:
        return f"{self.settings.web.public_url.rstrip('/')}/llm/v1/chat/completions"

    async def call_for_llm_key(self, key: str) -> CallMemoryState | None:
        """The call whose LLM-route key this is, while that call is starting or active, with its member's memory
        state (read with the call's row in the same trip: a voice turn's first read); None otherwise."""
        call_id = call_id_of(key)
        found = await self.store.call_memory_state(call_id) if call_id else None
        if found is None or not key_matches(key, found.call.llm_key_hash):
            return None
        return found if found.call.state in ("starting", "active") else None

    async def _abandon(self, call: CallRecord, why: str) -> None:
        """A start failed after the call row existed: mark it failed and stop any agent it may have created."""
        log.warning("call %s could not start: %s", call.call_id, why, extra={"call_id": call.call_id})
        await self.store.transition_call(
            call.call_id, ["starting"], "failed", ended_at=self.clock(), end_reason="start_failed", link_hash=None
        )
        try:
            for info in await self.agora.list_agents(channel=call.channel, states=(0, 1, 2)):
                await self._leave_quietly(info.agent_id)
        except AgoraError as exc:
            log.warning("could not check for an orphan agent of call %s: %s", call.call_id, exc)

    async def _leave_quietly(self, agent_id: str) -> bool:
        """Stop an agent; True once it is stopped (or already gone), False when Agora would not stop it."""
        try:
            await self.agora.leave(agent_id)
        except AgoraNotFound:
            return True
        except AgoraError as exc:
            log.warning("could not stop agent %s: %s", agent_id, exc)
            return False
        return True

    def _keep_stopping(self, call_id: str, agent_id: str) -> None:
        """Retry the leave of an ended call's agent in the background until Agora stops it (the flag in the
        store makes the next process carry on after a restart)."""
        if self._closing or call_id in self._stopping:
            return

        async def retry() -> None:
            delay = self.leave_retry_first_seconds
            while True:
                await asyncio.sleep(delay)
                if await self._leave_quietly(agent_id):
                    with contextlib.suppress(StorageFull):  # stored with the ending once there is space
                        await self.store.update_call(call_id, agent_stop_pending=False)
                    log.info("call %s: its agent is stopped at last", call_id)
                    return
                delay = min(delay * 2, self.leave_retry_max_seconds)

        task = asyncio.get_running_loop().create_task(retry(), name=f"stop-agent-{call_id}")
        self._stopping[call_id] = task
        task.add_done_callback(lambda _t: self._stopping.pop(call_id, None))

    async def agents_still_running(self) -> int:
        """Ended calls whose agent Agora has not stopped yet (reported in /healthz)."""
        return len(await self.store.calls_with_agent_to_stop())

    async def remember_card(self, call_id: str, token: str, message_id: int) -> None:
        """Where the member's card is, so whichever process ends the call can update it."""
        await self.store.update_call(call_id, notify_token=token, card_message_id=message_id)

    # ---- while active ----------------------------------------------------------------------------------

    def _watch(self, call_id: str) -> None:
        if not self.run_checkpoints or self._closing or call_id in self._tasks:
            return
        with bind(call_id=call_id):  # every line the loop logs carries the call's id
            task = asyncio.get_running_loop().create_task(self._checkpoint_loop(call_id), name=f"call-{call_id}")
        self._tasks[call_id] = task

        def forget(_task: asyncio.Task[None]) -> None:
            self._tasks.pop(call_id, None)

        task.add_done_callback(forget)

    async def _checkpoint_loop(self, call_id: str) -> None:
        interval = self.settings.agora.checkpoint_seconds
        full = False
        while not self._closing:
            await asyncio.sleep(interval)
            try:
                if not await self._take(call_id):
                    call = await self.store.get_call(call_id)  # ended: nobody looks after it, nothing to say
                    if call is not None and call.state in ("starting", "active", "ending"):
                        log.info("call %s is looked after by another bot process now", call_id)
                    return
                keep_watching, full = await self.checkpoint(call_id), False
            except StorageFull:
                if not full:  # once, not every checkpoint: Agora keeps the lines meanwhile
                    log.warning("call %s: the database is full; checkpoints resume once there is space", call_id)
                keep_watching, full = True, True
            except Exception:
                log.exception("checkpoint of call %s failed; trying again at the next one", call_id)
                keep_watching = True
            if not keep_watching:
                return

    async def checkpoint(self, call_id: str, *, give_way: bool = True) -> bool:
        """Save the agent's current history; finalize if the agent is gone or the time is up.

        With ``give_way`` (the periodic checkpoint) it first lets the starts and endings in flight finish (see
        `_give_way_to_members`); a takeover or shutdown saves at once. Returns False once the call no longer
        needs checkpoints."""
        if give_way:
            await self._give_way_to_members()
        read = await self.store.call_and_generation(call_id)  # the generation before the history read fences it
        if read is None:
            return False
        call, generation = read
        if call.state != "active" or call.agent_id is None:
            return False
        if self.clock() >= call.started_at + call.max_minutes * 60:
            await self.finalize(call_id, "max_duration")
            return False
        if self._token_needs_renewal(call):
            await self.renew_agent_token(call_id)
        try:
            history = await self.agora.history(call.agent_id)
        except AgoraNotFound:
            reason = await self._stopped_reason(call.agent_id)
            if reason is None:
                return True
            await self.finalize(call_id, reason)
            return False
        except AgoraError as exc:
            log.warning("checkpoint of call %s failed, will retry: %s", call_id, exc)
            return True
        if not call.private:
            await self.memory.record_snapshot(
                call,
                [(i.role, i.content) for i in history.contents],
                max_history=self.settings.agora.max_history,
                generation=generation,
                current=call,  # read just above: saves the merge reading it again
            )
        return True

    async def _stopped_reason(self, agent_id: str) -> str | None:
        """After ``/history`` said 404: the end reason if the agent has really stopped, None while it is still
        starting (history is only served once it runs) or cannot be asked right now."""
        try:
            info = await self.agora.query(agent_id)
        except AgoraNotFound:
            return "agent_stopped"
        except AgoraError as exc:
            log.warning("could not ask Agora whether agent %s still runs: %s", agent_id, exc)
            return None
        if info.status in RUNNING_STATUSES:
            return None
        return stop_reason(info.message)

    # ---- the agent's token -----------------------------------------------------------------------------

    def _token_lifetime(self, call: CallRecord) -> int:
        """Seconds the agent's next token should last: to the call's time limit plus a margin, at most 24 h
        (Agora's cap; longer calls get their token renewed)."""
        remaining = call.started_at + call.max_minutes * 60 - self.clock()
        return int(max(60, min(remaining + TOKEN_MARGIN_SECONDS, MAX_TOKEN_LIFETIME_SECONDS)))

    def _agent_token(self, call: CallRecord) -> str:
        agora = self.settings.agora
        lifetime = self._token_lifetime(call)
        token = build_rtc_token(
            agora.app_id or "",
            agora.app_certificate.get_secret_value() if agora.app_certificate else "",
            call.channel,
            call.agent_uid,
            lifetime,
            now=int(self.clock()),
            token_format=agora.token_format,
        )
        self._token_expires[call.call_id] = int(self.clock()) + lifetime
        return token

    def _token_expiry(self, call: CallRecord) -> float:
        """When the agent's current token expires; after a restart, the first token's expiry (a conservative
        guess: renewing early is harmless)."""
        known = self._token_expires.get(call.call_id)
        if known is not None:
            return known
        first = min(call.max_minutes * 60 + TOKEN_MARGIN_SECONDS, MAX_TOKEN_LIFETIME_SECONDS)
        return call.started_at + first

    def _token_needs_renewal(self, call: CallRecord) -> bool:
        """The call will outlive the agent's token, which expires within the hour."""
        expiry = self._token_expiry(call)
        call_end = call.started_at + call.max_minutes * 60
        return expiry < call_end and self.clock() >= expiry - TOKEN_RENEW_BEFORE_SECONDS

    async def renew_agent_token(self, call_id: str) -> bool:
        """Give the call's running agent a fresh token through ``/update``; False when there is nothing to renew
        or Agora refused (the next checkpoint or 104 notice tries again)."""
        call = await self.store.get_call(call_id)
        if call is None or call.state != "active" or call.agent_id is None:
            return False
        try:
            await self.agora.update(call.agent_id, token_update(self._agent_token(call)))
        except AgoraError as exc:
            self._token_expires.pop(call_id, None)
            log.warning("call %s: could not renew the agent's token: %s", call_id, exc)
            return False
        log.info("call %s: renewed the agent's token", call_id)
        return True

    # ---- ending ----------------------------------------------------------------------------------------

    async def hang_up(self, user_id: int, *, reason: str = "hangup") -> CallEnded:
        call = await self.store.open_call_for_user(user_id)
        if call is None:
            raise NoActiveCall()
        ended = await self.finalize(call.call_id, reason)
        if ended is None:
            raise NoActiveCall()
        return ended

    async def finalize(self, call_id: str, reason: str, *, unwatched: bool = False) -> CallEnded | None:
        """End a call exactly once, whatever the trigger. Concurrent triggers in this process share the
        winner's result; a trigger that loses to another process gets None. ``unwatched``: its agent stopped
        while no bot process watched the call, so what was said since the last checkpoint may be lost."""
        task = self._finalizing.get(call_id)
        if task is None:
            with bind(call_id=call_id):
                task = asyncio.get_running_loop().create_task(self._finalize_once(call_id, reason, unwatched))
            self._finalizing[call_id] = task
            task.add_done_callback(lambda _done: self._finalizing.pop(call_id, None))
        with self._member_waiting():
            return await asyncio.shield(task)  # a cancelled trigger must not leave the call half-ended

    async def _finalize_once(self, call_id: str, reason: str, unwatched: bool = False) -> CallEnded | None:
        now = self.clock()
        try:
            began = await self.store.begin_call_ending(
                call_id,
                ["starting", "active"],
                end_reason=reason,
                owner=self.owner,
                lease_until=now + self.lease_seconds,
            )
        except StorageFull:
            return await self._end_without_storage(call_id, reason)
        if began is None:
            return None
        call, generation = began
        async with self._holding_lease(call_id):
            return await self._complete_ending(call, generation=generation, unwatched=unwatched)

    async def _last_history(self, call: CallRecord, generation: int | None = None) -> _UnsavedEnding:
        """Read the history one last time (kept in memory); writes nothing. ``generation`` is the member's memory
        generation when the caller has just read it (it must be read before the history)."""
        ending = _UnsavedEnding(call.call_id, call.end_reason or "ended", self.clock())
        if call.agent_id is None or call.private:
            return ending
        try:
            ending.generation = (
                generation if generation is not None else await self.store.memory_generation(call.user_id)
            )
            history = await self.agora.history(call.agent_id)
            ending.window = [(i.role, i.content) for i in history.contents]
            ending.at = self.clock()
        except AgoraNotFound:
            log.info("call %s: the agent had already stopped; keeping the last checkpoint", call.call_id)
        except AgoraError as exc:
            log.warning("call %s: last history read failed: %s", call.call_id, exc)
        return ending

    async def _last_history_and_leave(self, call: CallRecord) -> _UnsavedEnding:
        """Read the history one last time (kept in memory) and stop the agent; writes nothing."""
        ending = await self._last_history(call)
        if call.agent_id is not None:
            ending.stopped = await self._leave_quietly(call.agent_id)
        return ending

    async def _record_ending(self, call: CallRecord, ending: _UnsavedEnding) -> None:
        if ending.window is not None and not call.private:
            await self.memory.record_snapshot(
                call,
                ending.window,
                max_history=self.settings.agora.max_history,
                generation=ending.generation,
                captured=int(ending.at * 1000),
                at=ending.at,
                current=call,
            )

    async def _complete_ending(
        self, call: CallRecord, *, generation: int | None = None, unwatched: bool = False
    ) -> CallEnded | None:
        """The idempotent tail of finalize: last history read, leave, mark ended, queue processing.

        The agent is stopped while the last history is stored (the history is read before, so nothing said
        is lost): the member's hang-up waits for the slower of the two, not for both in turn. A full disk does
        not keep the agent running: it is stopped first, the member is told the call could not be saved yet,
        and what was said is kept in memory and stored by `save_unsaved` once there is space."""
        ending = await self._last_history(call, generation)
        leaving = None if call.agent_id is None else asyncio.ensure_future(self._leave_quietly(call.agent_id))
        saved = True
        try:
            await self._record_ending(call, ending)
        except StorageFull:
            saved = False
        finally:
            if leaving is not None:
                ending.stopped = await leaving
        if saved and unwatched and call.call_id not in self._final_history:
            call = replace(call, lines_lost=await count_lost_lines(self.agora, self.store, call))
        now = self.clock()
        job = POST_CALL_JOB if saved and not call.private else None
        try:
            end = await self.store.end_call(
                call.call_id,
                ended_at=now,
                agent_stop_pending=not ending.stopped,
                post_call_job=job,
                not_before=now + (self._history_grace(call) if job else 0.0),
            )
        except StorageFull:
            return await self._unsaved_ending(call, ending)
        won = end.won
        if won and not ending.stopped and call.agent_id is not None:
            log.warning("call %s ended but Agora would not stop its agent; retrying in the background", call.call_id)
            self._keep_stopping(call.call_id, call.agent_id)
        self.memory.release_call(call.call_id)
        self._token_expires.pop(call.call_id, None)
        self._open_pages.pop(call.call_id, None)
        if not won:
            return None
        if not saved:
            return await self._unsaved_ending(call, ending)
        turns = end.turns
        ended = CallEnded(
            call_id=call.call_id,
            user_id=call.user_id,
            guild_id=call.guild_id,
            reason=call.end_reason or "ended",
            turns_stored=turns,
            private=call.private,
            card=_card_of(call),
            lines_lost=call.lines_lost,
        )
        self.counters.call_ended(ended.reason, ended.turns_stored)
        ids = {"call_id": ended.call_id, "user_id": ended.user_id, "guild_id": ended.guild_id}
        log.info("call ended (%s), %d lines stored", ended.reason, ended.turns_stored, extra=ids)
        await self._notify(ended)
        return ended

    async def ended_call(self, call_id: str) -> CallEnded | None:
        """A call that has ended, as its card shows it, for a process that did not end it (or a restarted one)."""
        call = await self.store.get_call(call_id)
        if call is None or call.state != "ended":
            return None
        return CallEnded(
            call_id=call.call_id,
            user_id=call.user_id,
            guild_id=call.guild_id,
            reason=call.end_reason or "ended",
            turns_stored=await self.store.count_call_turns(call.call_id),
            private=call.private,
            card=_card_of(call),
            lines_lost=call.lines_lost,
        )

    async def _end_without_storage(self, call_id: str, reason: str) -> CallEnded | None:
        """The database cannot be written at all (disk full): still stop the agent and end the call for the
        member; the store catches up in `save_unsaved`."""
        if call_id in self._unsaved:
            return None
        call = await self.store.get_call(call_id)
        if call is None or call.state not in ("starting", "active"):
            return None
        ending = await self._last_history_and_leave(replace(call, end_reason=reason))
        return await self._unsaved_ending(call, ending)

    async def _unsaved_ending(self, call: CallRecord, ending: _UnsavedEnding) -> CallEnded:
        self._unsaved[call.call_id] = ending
        log.error(
            "call %s ended but the database is full: its end and last history are kept in memory and stored "
            "when there is space again (free disk space next to memory.database_path)",
            call.call_id,
        )
        if not ending.stopped and call.agent_id is not None:
            self._keep_stopping(call.call_id, call.agent_id)
        ended = CallEnded(
            call_id=call.call_id,
            user_id=call.user_id,
            guild_id=call.guild_id,
            reason=ending.reason,
            turns_stored=await self.store.count_call_turns(call.call_id),
            private=call.private,
            saved=False,
        )
        await self._notify(ended)
        return ended

    async def save_unsaved(self) -> int:
        """Store the endings a full disk kept in memory (from the periodic sweep); stops while still full."""
        saved = 0
        for call_id, ending in list(self._unsaved.items()):
            try:
                call = await self.store.get_call(call_id)
                if call is not None:
                    if call.state in ("starting", "active"):
                        await self.store.transition_call(
                            call_id, ["starting", "active"], "ending", end_reason=ending.reason
                        )
                    await self._record_ending(call, ending)
                    await self.store.transition_call(
                        call_id, ["ending"], "ended", ended_at=ending.at, agent_stop_pending=not ending.stopped
                    )
                    if not call.private and await self.store.count_call_turns(call_id):
                        await self.store.enqueue_job(
                            POST_CALL_JOB, call_id, self.clock(), not_before=self.clock() + self._history_grace(call)
                        )
            except StorageFull:
                log.warning("the database is still full; %d ended calls wait to be stored", len(self._unsaved))
                return saved
            del self._unsaved[call_id]
            self.memory.release_call(call_id)
            saved += 1
            log.info("call %s: stored after the disk had room again", call_id)
        return saved

    def _history_grace(self, call: CallRecord) -> float:
        """How long post-call processing waits for Agora's final history: not at all once it arrived, or when
        no webhook can bring it."""
        if self.settings.agora.webhook_secret is None or call.call_id in self._final_history:
            self._final_history.discard(call.call_id)
            return 0.0
        return WEBHOOK_GRACE_SECONDS

    # ---- webhooks --------------------------------------------------------------------------------------

    async def receive_webhook(self, raw_body: bytes, headers: Mapping[str, str]) -> bool:
        """Verify a Notification Center delivery and store what it carries; False on a bad signature.

        The delivery is kept in the local inbox first; WebhookNotStored (answered with a 5xx) when it could not
        be stored, so Agora resends it."""
        secret = self.settings.agora.webhook_secret
        if secret is None:
            log.warning("an Agora webhook arrived but agora.webhook_secret (AGORA_WEBHOOK_SECRET) is not set")
            return False
        if not verify_signature(secret.get_secret_value(), raw_body, headers):
            log.warning("refused an Agora webhook with a bad signature")
            return False
        try:
            notification = parse_notification(raw_body)
        except ValueError as exc:
            log.warning("ignored a malformed Agora webhook: %s", exc)
            return True
        kept = self.inbox.put(raw_body)
        try:
            await self.handle_notification(notification)
        except Exception as exc:
            where = "kept in the local inbox" if kept else "NOT kept (the inbox could not be written)"
            log.warning(
                "webhook notice %s could not be stored (%s: %s); %s, asking Agora to resend",
                notification.notice_id,
                type(exc).__name__,
                exc,
                where,
            )
            raise WebhookNotStored(notification.notice_id) from exc
        if kept is not None:
            self.inbox.remove(kept)
        return True

    async def drain_inbox(self) -> int:
        """Process deliveries kept in the local inbox (a database error stopped them); at start-up and from
        the periodic sweep. One that still fails stays for the next drain (a notice older than the replay
        window is dropped then, being ignored as stale). Returns how many were processed."""
        processed = 0
        for path in self.inbox.pending():
            try:
                notification = parse_notification(self.inbox.read(path))
            except (OSError, ValueError) as exc:
                log.warning("dropped unreadable webhook %s from the inbox: %s", path.name, exc)
                self.inbox.remove(path)
                continue
            try:
                await self.handle_notification(notification)
            except Exception as exc:
                log.warning("webhook inbox: notice %s still cannot be stored: %s", notification.notice_id, exc)
                continue
            self.inbox.remove(path)
            processed += 1
        if processed:
            log.info("webhook inbox: processed %d kept deliveries", processed)
        return processed

    async def handle_notification(self, notification: Notification) -> None:
        """Process one delivery. A notice already processed is skipped; it is recorded only after processing,
        so a delivery that failed half-way is processed again when Agora resends it (merging is idempotent)."""
        if not notification.is_convoai:
            log.info("ignored a webhook notice of another Agora product (productId %s)", notification.product_id)
            return
        notice = notification.notice_id
        if notice in self._notices_in_flight:
            log.info("webhook notice %s was already processed", notice)
            return
        age = self.clock() - notification.notify_ms / 1000
        if age > NOTICE_KEEP_SECONDS - STALE_NOTICE_MARGIN_SECONDS:
            # Agora retries within minutes; a delivery this old is a replay whose notice id may be forgotten.
            log.warning("ignored webhook notice %s sent %.0f days ago (a replay)", notice, age / 86400)
            return
        self._notices_in_flight.add(notice)  # before any await, so a copy arriving meanwhile is skipped
        try:
            if await self.store.notice_seen(notice):
                log.info("webhook notice %s was already processed", notice)
                return
            await self._process_notification(notification)
            await self.store.remember_notice(notice, self.clock())
        finally:
            self._notices_in_flight.discard(notice)

    async def _process_notification(self, notification: Notification) -> None:
        call_id = notification.labels.get("call_id")
        call = await self.store.get_call(call_id) if call_id else None
        if call is None and notification.agent_id:
            call = await self.store.get_call_by_agent_id(notification.agent_id)
        if call is None:
            log.info("webhook %s for an unknown call", notification.event_type)
            return
        if notification.event_type == 103:
            if not call.private and notification.contents:
                result = await self.memory.record_snapshot(
                    call,
                    [(i.role, i.content) for i in notification.contents],
                    max_history=self.settings.agora.max_history,
                    final=True,
                )
                log.info("call %s: history webhook added %d turns", call.call_id, result.added)
            if call.state in ("starting", "active", "ending"):
                self._final_history.add(call.call_id)
            # The final history is in: learning from the call need not wait any longer. A call that ended with
            # nothing stored (the agent had stopped before any checkpoint) is queued now that it has lines.
            current = await self.store.get_call(call.call_id)
            if current is not None and current.state == "ended" and current.lines_lost:
                await count_lost_lines(self.agora, self.store, current)  # the webhook came late, not never
            if (
                current is not None
                and current.state == "ended"
                and not current.private
                and await self.store.count_call_turns(call.call_id)
            ):
                await self.store.enqueue_job(POST_CALL_JOB, call.call_id, self.clock())
            await self.store.expedite_job(POST_CALL_JOB, call.call_id, self.clock())
        if notification.event_type == EVENT_AGENT_TOKEN_EXPIRING and call.state == "active":
            await self.renew_agent_token(call.call_id)
        if notification.event_type in (102, 103) and call.state in ("starting", "active"):
            await self.finalize(call.call_id, stop_reason(notification.stop_message))

    def _spawn(self, coro: Awaitable[object]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)

        def done(t: asyncio.Task[object]) -> None:
            self._background.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.error("background call work failed", exc_info=t.exception())

        task.add_done_callback(done)

    async def wait_background(self) -> None:
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    # ---- restart and shutdown --------------------------------------------------------------------------

    async def reconcile(self) -> dict[str, int]:
        """After a (re)start, and then periodically: every call not ended that no live bot process looks after
        (its lease ran out, or was released) is taken over, looked up at Agora, and resumed or finalized."""
        counts = {"resumed": 0, "finalized": 0, "failed": 0}
        try:
            await self.drain_inbox()
        except Exception:
            log.exception("the webhook inbox could not be processed at start-up; the sweep retries")
        for ended in await self.store.calls_with_agent_to_stop():
            if ended.agent_id is None or await self._leave_quietly(ended.agent_id):
                await self.store.update_call(ended.call_id, agent_stop_pending=False)
                log.info("call %s: its agent, still running at the last shutdown, is stopped", ended.call_id)
            else:
                self._keep_stopping(ended.call_id, ended.agent_id)
        for call in await self.store.open_calls():
            if call.call_id in self._tasks or call.call_id in self._finalizing or call.call_id in self._starting:
                continue
            if self._closing:
                break
            if not await self._take(call.call_id):
                continue  # another live process looks after it
            if call.state == "starting":
                await self._abandon(call, "the bot restarted while the call was starting")
                counts["failed"] += 1
                continue
            if call.state == "ending":
                async with self._holding_lease(call.call_id):
                    await self._complete_ending(call)
                counts["finalized"] += 1
                continue
            assert call.agent_id is not None
            try:
                info = await self.agora.query(call.agent_id)
            except AgoraNotFound:
                await self.finalize(call.call_id, "agent_stopped", unwatched=True)
                counts["finalized"] += 1
                continue
            except AgoraError as exc:
                log.warning("call %s: Agora unreachable during reconcile, resuming checkpoints: %s", call.call_id, exc)
                info = None
            if info is None or info.status in RUNNING_STATUSES:
                if info is not None:
                    # Save what Agora still offers now: its history window keeps sliding while we wait.
                    try:
                        await self.checkpoint(call.call_id, give_way=False)
                    except Exception:
                        log.exception("call %s: checkpoint after the restart failed; the loop retries", call.call_id)
                self._watch(call.call_id)
                counts["resumed"] += 1
            else:
                await self.finalize(call.call_id, stop_reason(info.message), unwatched=True)
                counts["finalized"] += 1
        return counts

    async def shutdown(self, grace_seconds: float | None = None) -> None:
        """Hand active calls off: save their history once more and stop watching them. The agents keep
        running, so members keep talking through a restart; the next process reconciles them."""
        self._closing = True
        grace = self.settings.calls.shutdown_grace_seconds if grace_seconds is None else grace_seconds
        tasks = [*self._tasks.values(), *self._closing_pages.values(), *self._stopping.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # Only this process's calls: another process's calls are its own business.
        active = [c for c in await self.store.open_calls() if c.state == "active" and c.owner == self.owner]

        async def save_all() -> None:
            for call in active:
                try:
                    await self.checkpoint(call.call_id, give_way=False)
                except Exception:
                    log.exception("final checkpoint of call %s failed at shutdown", call.call_id)

        try:
            await asyncio.wait_for(save_all(), timeout=grace)
        except TimeoutError:
            log.warning("shutdown grace of %.0f s ran out while saving %d calls", grace, len(active))
        try:
            await asyncio.wait_for(self.wait_background(), timeout=max(grace, 1.0))
        except TimeoutError:
            log.warning("shutdown: background webhook work did not finish in time")
        await self.store.release_call_leases(self.owner)  # another process takes them over at once

    async def run_takeover(self, stop: asyncio.Event) -> None:
        """Take over the calls of bot processes that died, a few times per lease period."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.settings.agora.checkpoint_seconds / 2)
            if stop.is_set() or self._closing:
                return
            try:
                counts = await self.reconcile()
                if any(counts.values()):
                    log.info("took over the calls of a stopped bot process: %s", counts)
            except Exception:
                log.exception("taking over orphaned calls failed; trying again shortly")

    # ---- the call page ---------------------------------------------------------------------------------

    def page_closed(self, call_id: str, page_id: str | None = None) -> None:
        """The page was closed (its beacon arrived): end the call after a short grace, unless it is reopened.

        A reload sends the old page's beacon and the new page's GET in either order (Chromium usually sends
        the GET first): a beacon from a page that is no longer the latest opened one is a reload, not a close."""
        grace = self.settings.calls.page_close_grace_seconds
        latest = self._open_pages.get(call_id)
        if page_id is not None and latest is not None and page_id != latest:
            log.info("call %s: the close beacon of a reloaded page was ignored", call_id)
            return
        if call_id in self._closing_pages:
            return

        async def end_after_grace() -> None:
            await asyncio.sleep(grace)
            self._closing_pages.pop(call_id, None)
            await self.finalize(call_id, "page_closed")

        self._closing_pages[call_id] = asyncio.get_running_loop().create_task(end_after_grace())

    def page_opened(self, call_id: str) -> str:
        """The page was opened (again, for a reload): keep the call. Returns the new page's id."""
        pending = self._closing_pages.pop(call_id, None)
        if pending is not None:
            pending.cancel()
        page_id = secrets.token_urlsafe(12)
        self._open_pages[call_id] = page_id
        return page_id

    async def wait_pages_closed(self) -> None:
        await asyncio.gather(*self._closing_pages.values(), return_exceptions=True)

    async def call_for_link(self, link_token: str, *, browser: str | None = None) -> CallRecord | None:
        """The call of a link, until the link expires; the browser the link is bound to (see `browser_allowed`)
        keeps it after the expiry while the call is open, so it can always end it."""
        call = await self.store.get_call_by_link_hash(self.links.hash(link_token))
        if call is None:
            return None
        bound_here = (
            call.browser_hash is not None
            and browser is not None
            and self.browser_allowed(call, browser)
            and call.state in ("starting", "active", "ending")
        )
        if not bound_here and call.link_expires_at is not None and self.clock() > call.link_expires_at:
            return None
        return call

    def browser_allowed(self, call: CallRecord, browser: str | None) -> bool:
        """Whether this browser (its cookie) may use the call's link: any, until one opened it."""
        if call.browser_hash is None:
            return True
        return browser is not None and secrets.compare_digest(call.browser_hash, self.links.hash(browser))

    async def bind_browser(self, call: CallRecord, browser: str) -> bool:
        """Bind the link to the browser that opened it first; False when another browser has it."""
        return await self.store.bind_call_browser(call.call_id, self.links.hash(browser))

    def user_token(self, call: CallRecord) -> str:
        agora = self.settings.agora
        remaining = int(call.started_at + call.max_minutes * 60 - self.clock()) + TOKEN_MARGIN_SECONDS
        return build_rtc_token(
            agora.app_id or "",
            agora.app_certificate.get_secret_value() if agora.app_certificate else "",
            call.channel,
            call.user_uid,
            max(60, min(remaining, MAX_TOKEN_LIFETIME_SECONDS)),
            now=int(self.clock()),
            token_format=agora.token_format,
        )

    @staticmethod
    def link_expiry(call: CallRecord) -> datetime:
        return datetime.fromtimestamp(call.link_expires_at or call.started_at, UTC)


def _card_of(call: CallRecord) -> tuple[str, int] | None:
    """The member's call card (interaction token, message id), when one was shown and stored."""
    if call.notify_token and call.card_message_id is not None:
        return call.notify_token, call.card_message_id
    return None
