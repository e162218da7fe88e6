"""The call page's sessions: which call a link opens, the browser it is bound to, the member's RTC token, and the
page's openings and closings (a closed page ends its call after a short grace, a reload does not)."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Protocol

from bot.agora.tokens import MAX_TOKEN_LIFETIME_SECONDS
from bot.calls.agent_control import TOKEN_MARGIN_SECONDS, rtc_token
from bot.calls.links import LinkTokens
from bot.config import AgoraSettings
from bot.store.models import CallRecord

log = logging.getLogger(__name__)


class PageSessionStore(Protocol):
    async def get_call_by_link_hash(self, link_hash: str) -> CallRecord | None: ...
    async def bind_call_browser(self, call_id: str, browser_hash: str) -> bool: ...


class PageSessions:
    def __init__(
        self,
        store: PageSessionStore,
        links: LinkTokens,
        agora: AgoraSettings,
        *,
        clock: Callable[[], float],
        close_grace_seconds: float,
    ):
        self.store = store
        self.links = links
        self.agora = agora
        self.clock = clock
        self.close_grace_seconds = close_grace_seconds
        self._open: dict[str, str] = {}
        self._closing: dict[str, asyncio.Task[None]] = {}

    @property
    def app_id(self) -> str:
        return self.agora.app_id or ""

    def closed(self, call_id: str, page_id: str | None, end: Callable[[str], Awaitable[object]]) -> None:
        """The page was closed (its beacon arrived): ``end`` the call after a short grace, unless it is reopened.

        A reload sends the old page's beacon and the new page's GET in either order (Chromium usually sends
        the GET first): a beacon from a page that is no longer the latest opened one is a reload, not a close."""
        latest = self._open.get(call_id)
        if page_id is not None and latest is not None and page_id != latest:
            log.info("call %s: the close beacon of a reloaded page was ignored", call_id)
            return
        if call_id in self._closing:
            return
        grace = self.close_grace_seconds

        async def end_after_grace() -> None:
            await asyncio.sleep(grace)
            self._closing.pop(call_id, None)
            await end(call_id)

        self._closing[call_id] = asyncio.get_running_loop().create_task(end_after_grace())

    def opened(self, call_id: str) -> str:
        """The page was opened (again, for a reload): keep the call. Returns the new page's id."""
        pending = self._closing.pop(call_id, None)
        if pending is not None:
            pending.cancel()
        page_id = secrets.token_urlsafe(12)
        self._open[call_id] = page_id
        return page_id

    def forget(self, call_id: str) -> None:
        """The call ended: its page's opening is of no more interest."""
        self._open.pop(call_id, None)

    async def wait_closed(self) -> None:
        await asyncio.gather(*self._closing.values(), return_exceptions=True)

    async def close(self) -> None:
        """At shutdown: closed pages no longer end their calls (the next process's sweep does, if need be)."""
        tasks = list(self._closing.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def call_of(self, link_token: str) -> CallRecord | None:
        """The call a link was made for, whether the link expired or not."""
        return await self.store.get_call_by_link_hash(self.links.hash(link_token))

    async def call_for_link(self, link_token: str, *, browser: str | None = None) -> CallRecord | None:
        """The call of a link, until the link expires; the browser the link is bound to (see `browser_allowed`)
        keeps it after the expiry while the call is open, so it can always end it."""
        call = await self.call_of(link_token)
        if call is None:
            return None
        bound_here = (
            call.browser_hash is not None
            and browser is not None
            and self.browser_allowed(call, browser)
            and call.state in ("starting", "active", "ending")
        )
        if not bound_here and self.link_expired(call):
            return None
        return call

    def link_expired(self, call: CallRecord) -> bool:
        return call.link_expires_at is not None and self.clock() > call.link_expires_at

    def browser_allowed(self, call: CallRecord, browser: str | None) -> bool:
        """Whether this browser (its cookie) may use the call's link: any, until one opened it."""
        if call.browser_hash is None:
            return True
        return browser is not None and secrets.compare_digest(call.browser_hash, self.links.hash(browser))

    async def bind_browser(self, call: CallRecord, browser: str) -> bool:
        """Bind the link to the browser that opened it first; False when another browser has it."""
        return await self.store.bind_call_browser(call.call_id, self.links.hash(browser))

    def user_token(self, call: CallRecord) -> str:
        """The member's RTC token, lasting to the call's time limit plus a margin (at most Agora's 24 h: the page
        asks for a fresh one before it expires)."""
        now = self.clock()
        remaining = int(call.started_at + call.max_minutes * 60 - now) + TOKEN_MARGIN_SECONDS
        return rtc_token(
            self.agora, call.channel, call.user_uid, max(60, min(remaining, MAX_TOKEN_LIFETIME_SECONDS)), now
        )

    def elapsed_seconds(self, call: CallRecord) -> float:
        return max(0.0, self.clock() - call.started_at)

    @staticmethod
    def link_expiry(call: CallRecord) -> datetime:
        return datetime.fromtimestamp(call.link_expires_at or call.started_at, UTC)
