"""The call service as the call page's backend (bot.web's CallPageBackend)."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Protocol

from bot.calls.errors import WebhookNotStored
from bot.calls.service import CallService
from bot.memory.postcall import LearnedStore, facts_learned
from bot.memory.wording import for_member
from bot.store.models import Conversation, TurnRecord
from bot.web.backend import PAGE_STATES, CallStatus, OpenElsewhere, PageSession, WebhookRetryLater

TRANSCRIPT_LINES = 100
"""The most lines a reloaded page shows again (its live transcript keeps as many)."""


class PageStore(LearnedStore, Protocol):
    """What the call page shows: the call's turns and facts learned, and the health check."""

    async def ping(self) -> None: ...
    async def count_open_calls(self) -> int: ...
    async def count_call_turns(self, call_id: str) -> int: ...
    async def call_tail(self, call_id: str, limit: int) -> list[TurnRecord]: ...


class CallPageAdapter:
    def __init__(
        self,
        calls: CallService,
        store: PageStore,
        *,
        app_id: str,
        page_close_grace_seconds: float,
        rejoin_seconds: int = 0,
    ):
        """``app_id``: the Agora project the page joins; ``page_close_grace_seconds``: with a grace, a closed tab
        ends its call only after it (a reload keeps it), without one at once; ``rejoin_seconds``: how long the
        agent waits in an empty channel (``agora.idle_timeout_seconds``), which a reloaded page tells the member."""
        self.calls = calls
        self.store = store
        self.app_id = app_id
        self.page_close_grace_seconds = page_close_grace_seconds
        self.rejoin_seconds = rejoin_seconds

    async def open_page(self, link_token: str, *, browser: str | None = None) -> PageSession | None:
        call = await self.calls.call_for_link(link_token, browser=browser)
        if call is None or call.state not in PAGE_STATES:
            return None
        key = browser or secrets.token_urlsafe(24)
        reopened = call.browser_hash is not None
        if not await self.calls.bind_browser(call, key):
            raise OpenElsewhere(call.call_id)
        page_id = self.calls.page_opened(call.call_id)
        return PageSession(
            app_id=self.app_id,
            channel=call.channel,
            rtc_token=self.calls.user_token(call),
            user_uid=call.user_uid,
            agent_uid=call.agent_uid,
            state=call.state,
            expires_at=self.calls.link_expiry(call),
            max_minutes=call.max_minutes,
            page_id=page_id,
            browser_key=key,
            reopened=reopened,
            elapsed_seconds=self.calls.elapsed_seconds(call),
            rejoin_seconds=self.rejoin_seconds,
        )

    async def renew_token(self, link_token: str, *, browser: str | None = None) -> str | None:
        """Only for the browser the page was opened in (the link is bound to it at the first opening)."""
        call = await self.calls.call_for_link(link_token, browser=browser)
        if call is None or call.state not in ("starting", "active") or call.browser_hash is None:
            return None
        if not self.calls.browser_allowed(call, browser):
            return None
        return self.calls.user_token(call)

    async def status(
        self, link_token: str, *, browser: str | None = None, transcript: bool = False
    ) -> CallStatus | None:
        """For the browser the link is bound to, also after the link expired (its page shows what was learned
        when the call ends). A link no browser opened expires as its page does, and its status never lists
        what was learned nor what was said (``transcript``): only counts."""
        call = await self.calls.call_of_link(link_token)
        if call is None or not self.calls.browser_allowed(call, browser):
            return None
        bound = call.browser_hash is not None
        if not bound and self.calls.link_expired(call):
            return None
        turns = await self.store.count_call_turns(call.call_id)
        learned = None if call.private else await facts_learned(self.store, "call", call.call_id)
        convo = Conversation("call", call.call_id)
        learned_facts = await self.store.facts_from(convo) if learned and bound else []
        facts = tuple(for_member(f.text, told=f.told) for f in learned_facts)
        said = await self.store.call_tail(call.call_id, TRANSCRIPT_LINES) if transcript and bound else []
        running = bound and not call.private and call.state in ("starting", "active")
        told = [f for f in await self.store.facts_from(convo) if f.told and f.current] if running else []
        return CallStatus(
            state=call.state,
            end_reason=call.end_reason,
            turns_stored=turns,
            facts_learned=learned,
            facts=facts,
            lines=tuple((t.role, t.content) for t in said if t.content),
            remembered=tuple(f.text for f in told),
        )

    async def hang_up(
        self, link_token: str, *, via: str, page_id: str | None = None, browser: str | None = None
    ) -> CallStatus | None:
        call = await self.calls.call_for_link(link_token, browser=browser)
        if call is None or not self.calls.browser_allowed(call, browser):
            return None
        if call.state in ("starting", "active"):
            if via == "beacon" and self.page_close_grace_seconds > 0:
                self.calls.page_closed(call.call_id, page_id)
            else:
                await self.calls.finalize(call.call_id, "page_closed" if via == "beacon" else "hangup_page")
        return await self.status(link_token, browser=browser)

    async def receive_webhook(self, raw_body: bytes, headers: Mapping[str, str]) -> bool:
        try:
            return await self.calls.receive_webhook(raw_body, headers)
        except WebhookNotStored as exc:
            raise WebhookRetryLater(str(exc)) from exc

    async def health(self) -> dict[str, object]:
        await self.store.ping()
        return {
            "database": "ok",
            "active_calls": await self.store.count_open_calls(),
            "agents_still_running": await self.calls.agents_still_running(),
        }

    async def health_figures(self) -> dict[str, object]:
        """What the calls add to the monitor's /healthz, which reports the database and active calls itself."""
        return {
            "agents_still_running": await self.calls.agents_still_running(),
            "database": {"ended_calls_unsaved": self.calls.unsaved_calls},
        }
