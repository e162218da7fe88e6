"""The call lifecycle, as the cogs, the web layer and the app see it: start, checkpoint, end exactly once, take over
after a restart, hand over at shutdown.

All call state lives in the store and changes only through conditional transitions, so two routes in one
process, or two processes sharing the database, cannot both finalize a call. In-process tasks (checkpoint
loops, time limits) are conveniences: after a restart `reconcile` rebuilds them from the store.

`CallService` only builds its parts and delegates to them; each part owns its own state:

- `starting.CallStarter`: limits, the call's row, the memory context, the agent's join; live-recall keys
- `checkpoints.Checkpoints`: the running calls' periodic saves
- `ending.Ending`: ending once, the listeners, endings kept in memory while the disk is full
- `leases.Leases` and `takeover.Takeover`: which process looks after a call, and taking calls over
- `agent_control.AgentControl`: stopping agents (with retries) and renewing their tokens
- `webhooks.Webhooks`: Agora's notifications, through the local inbox
- `page_sessions.PageSessions`: the call page's links, browsers, tokens, openings and closings
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Protocol

from bot.agora import ConvoAIClient
from bot.calls.agent_control import AgentControl, AgentStore
from bot.calls.checkpoints import Checkpoints, CheckpointStore
from bot.calls.ending import Ending, EndingStore
from bot.calls.inbox import WebhookInbox
from bot.calls.leases import Leases, LeaseStore
from bot.calls.links import LinkTokens
from bot.calls.model import CallEnded, CallListener, CallTimings, GuildUsage, StartedCall
from bot.calls.page_sessions import PageSessions, PageSessionStore
from bot.calls.starting import CallStarter, StartStore
from bot.calls.takeover import Takeover, TakeoverStore
from bot.calls.traffic import MembersWaiting
from bot.calls.webhooks import Webhooks, WebhookStore
from bot.config import Settings
from bot.memory.service import MemoryService
from bot.monitor import Counters
from bot.store.models import CallMemoryState, CallRecord, EndReason

__all__ = ["CallEnded", "CallListener", "CallService", "CallStore", "CallTimings", "GuildUsage", "StartedCall"]

log = logging.getLogger(__name__)


class CallStore(
    StartStore,
    CheckpointStore,
    EndingStore,
    LeaseStore,
    TakeoverStore,
    AgentStore,
    WebhookStore,
    PageSessionStore,
    Protocol,
):
    """What the call lifecycle reads and writes: the union of what its parts use, each part being handed only
    its own protocol."""


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
        timings: CallTimings | None = None,
    ):
        counters = counters if counters is not None else Counters()
        timings = timings if timings is not None else CallTimings()
        self.shutdown_grace_seconds = settings.calls.shutdown_grace_seconds
        key = settings.web.link_signing_key
        links = LinkTokens(key.get_secret_value() if key else None)
        self.inbox = WebhookInbox.beside(settings.memory.database_path, master_key=settings.memory.master_key_bytes())
        self._leases = Leases(
            store,
            owner=owner or uuid.uuid4().hex[:12],
            checkpoint_seconds=settings.agora.checkpoint_seconds,
            clock=clock,
        )
        self._members = MembersWaiting()
        self._agents = AgentControl(store, agora, settings.agora, clock=clock, timings=timings)
        self._pages = PageSessions(
            store, links, settings.agora, clock=clock, close_grace_seconds=settings.calls.page_close_grace_seconds
        )
        self._ending = Ending(
            store,
            memory,
            agora,
            agents=self._agents,
            leases=self._leases,
            members=self._members,
            counters=counters,
            clock=clock,
            max_history=settings.agora.max_history,
            history_webhook=settings.agora.webhook_secret is not None,
            webhook_grace_seconds=timings.webhook_grace_seconds,
            released=[self._pages.forget],
        )
        self._checkpoints = Checkpoints(
            store,
            memory,
            agora,
            agents=self._agents,
            ending=self._ending,
            leases=self._leases,
            members=self._members,
            clock=clock,
            interval_seconds=settings.agora.checkpoint_seconds,
            max_history=settings.agora.max_history,
            yield_max_seconds=timings.checkpoint_yield_max_seconds,
            run_loops=run_checkpoints,
        )
        self._starter = CallStarter(
            store,
            memory,
            agora,
            settings,
            agents=self._agents,
            checkpoints=self._checkpoints,
            leases=self._leases,
            links=links,
            members=self._members,
            counters=counters,
            clock=clock,
        )
        self._webhooks = Webhooks(
            store,
            memory,
            agora,
            inbox=self.inbox,
            agents=self._agents,
            ending=self._ending,
            secret=settings.agora.webhook_secret,
            max_history=settings.agora.max_history,
            clock=clock,
        )
        self._takeover = Takeover(
            store,
            agora,
            agents=self._agents,
            checkpoints=self._checkpoints,
            ending=self._ending,
            leases=self._leases,
            starter=self._starter,
            drain_inbox=self._webhooks.drain_inbox,
            sweep_seconds=settings.agora.checkpoint_seconds / 2,
        )
        self._closing = False

    @property
    def closed(self) -> bool:
        return self._closing

    @property
    def owner(self) -> str:
        return self._leases.owner

    @property
    def lease_seconds(self) -> float:
        return self._leases.seconds

    # ---- starting and policy ---------------------------------------------------------------------------

    async def start(
        self,
        *,
        user_id: int,
        guild_id: int | None,
        private: bool = False,
        locale: str | None = None,
        name: str | None = None,
    ) -> StartedCall:
        return await self._starter.start(user_id=user_id, guild_id=guild_id, private=private, locale=locale, name=name)

    async def remember_card(self, call_id: str, token: str, message_id: int) -> None:
        await self._starter.remember_card(call_id, token, message_id)

    async def usage_today(self, guild_id: int) -> GuildUsage:
        return await self._starter.usage_today(guild_id)

    async def call_for_llm_key(self, key: str) -> CallMemoryState | None:
        return await self._starter.call_for_llm_key(key)

    # ---- running and ending ----------------------------------------------------------------------------

    async def checkpoint(self, call_id: str, *, give_way: bool = True) -> bool:
        return await self._checkpoints.checkpoint(call_id, give_way=give_way)

    def add_listener(self, listener: CallListener) -> None:
        self._ending.add_listener(listener)

    async def hang_up(self, user_id: int, *, reason: EndReason = "hangup") -> CallEnded:
        return await self._ending.hang_up(user_id, reason=reason)

    async def finalize(self, call_id: str, reason: EndReason, *, unwatched: bool = False) -> CallEnded | None:
        return await self._ending.finalize(call_id, reason, unwatched=unwatched)

    async def ended_call(self, call_id: str) -> CallEnded | None:
        return await self._ending.ended_call(call_id)

    async def save_unsaved(self) -> int:
        return await self._ending.save_unsaved()

    @property
    def unsaved_calls(self) -> int:
        """Ended calls waiting in memory for the disk to have room."""
        return self._ending.unsaved

    async def agents_still_running(self) -> int:
        return await self._agents.still_running()

    async def renew_agent_token(self, call_id: str) -> bool:
        return await self._agents.renew_token(call_id)

    # ---- webhooks --------------------------------------------------------------------------------------

    async def receive_webhook(self, raw_body: bytes, headers: Mapping[str, str]) -> bool:
        return await self._webhooks.receive(raw_body, headers)

    async def drain_inbox(self) -> int:
        return await self._webhooks.drain_inbox()

    # ---- the call page ---------------------------------------------------------------------------------

    def page_closed(self, call_id: str, page_id: str | None = None) -> None:
        self._pages.closed(call_id, page_id, lambda closed: self._ending.finalize(closed, "page_closed"))

    def page_opened(self, call_id: str) -> str:
        return self._pages.opened(call_id)

    async def wait_pages_closed(self) -> None:
        await self._pages.wait_closed()

    async def call_for_link(self, link_token: str, *, browser: str | None = None) -> CallRecord | None:
        return await self._pages.call_for_link(link_token, browser=browser)

    async def call_of_link(self, link_token: str) -> CallRecord | None:
        return await self._pages.call_of(link_token)

    def link_expired(self, call: CallRecord) -> bool:
        return self._pages.link_expired(call)

    def elapsed_seconds(self, call: CallRecord) -> float:
        return self._pages.elapsed_seconds(call)

    def browser_allowed(self, call: CallRecord, browser: str | None) -> bool:
        return self._pages.browser_allowed(call, browser)

    async def bind_browser(self, call: CallRecord, browser: str) -> bool:
        return await self._pages.bind_browser(call, browser)

    def user_token(self, call: CallRecord) -> str:
        return self._pages.user_token(call)

    @staticmethod
    def link_expiry(call: CallRecord) -> datetime:
        return PageSessions.link_expiry(call)

    # ---- restart and shutdown --------------------------------------------------------------------------

    async def reconcile(self) -> dict[str, int]:
        return await self._takeover.reconcile()

    async def run_takeover(self, stop: asyncio.Event) -> None:
        await self._takeover.run(stop)

    async def shutdown(self, grace_seconds: float | None = None) -> None:
        """Hand active calls off: save their history once more and stop watching them. The agents keep
        running, so members keep talking through a restart; the next process reconciles them."""
        self._closing = True
        self._takeover.close()
        self._members.close()
        await asyncio.gather(self._checkpoints.close(), self._pages.close(), self._agents.close())
        await self._checkpoints.save_all(self.shutdown_grace_seconds if grace_seconds is None else grace_seconds)
        await self._leases.release_all()  # another process takes them over at once
