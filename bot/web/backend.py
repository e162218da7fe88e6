"""The contract between the web layer (call page, its API, the Agora webhook) and the call service.

The web layer never talks to Agora or the database itself: everything goes through a ``CallPageBackend``.
The real implementation lives with the call service; tests use an in-memory fake.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

#: States in which the call page is still useful. ``open_page`` results in other states get the invalid page.
#: (The web layer imports no other part of the bot: a call's state and end reason reach it as plain strings, the
#: values of ``bot.store.models.CallState`` and ``EndReason``.)
PAGE_STATES: frozenset[str] = frozenset({"starting", "active", "ending"})


class OpenElsewhere(Exception):
    """Raised by ``open_page`` when the link was opened first in another browser (it is bound to that one)."""


class WebhookRetryLater(Exception):
    """Raised by ``receive_webhook`` when a verified delivery could not be stored: answered with a 503 so
    the sender delivers it again."""


@dataclass(frozen=True)
class PageSession:
    """What the call page needs to join the channel. Never contains the App Certificate."""

    app_id: str
    channel: str
    rtc_token: str
    user_uid: int
    agent_uid: int
    state: str  # "starting" | "active" | "ending" | "ended" | "failed"
    expires_at: datetime  # link expiry (UTC)
    max_minutes: int
    page_id: str = ""
    """Names this opening of the page: a close beacon from a page that was since reloaded carries an older one."""
    browser_key: str | None = None  # set as a cookie: the link now works in this browser only
    reopened: bool = False
    """This browser opened the page before (a reload, or the link again): the call may have run for a while, so
    the page offers Rejoin and restores the timer and the transcript so far."""
    elapsed_seconds: float = 0.0
    """How long the call has run, for the page's timer."""
    rejoin_seconds: int = 0
    """How long the call keeps running with nobody in it (Agora's idle timeout), for a reloaded page to say how long
    Rejoin stays possible; 0: no idle exit."""


@dataclass(frozen=True)
class CallStatus:
    state: str
    end_reason: str | None
    turns_stored: int
    facts_learned: int | None  # None while post-call processing is pending or memory is off
    facts: tuple[str, ...] = ()
    """What was learned (the facts' texts), once ``facts_learned`` is known."""
    lines: tuple[tuple[str, str], ...] = ()
    """The call's stored lines as (role, text), oldest first, when asked for (the transcript after a reload)."""
    remembered: tuple[str, ...] = ()
    """While the call runs: what the member asked to be remembered in it, still remembered (the page shows what
    was remembered, and what was forgotten again)."""

    def to_json(self) -> dict[str, object]:
        shown: dict[str, object] = {
            "state": self.state,
            "end_reason": self.end_reason,
            "turns_stored": self.turns_stored,
            "facts_learned": self.facts_learned,
            "facts": list(self.facts),
        }
        if self.lines:
            shown["lines"] = [{"role": role, "text": text} for role, text in self.lines]
        if self.remembered:
            shown["remembered"] = list(self.remembered)
        return shown


@runtime_checkable
class CallPageBackend(Protocol):
    async def open_page(self, link_token: str, *, browser: str | None = None) -> PageSession | None:
        """The join parameters for a link, or None for a wrong, expired or ended link. ``browser`` is the
        browser cookie, if any; OpenElsewhere when the link is bound to another browser."""
        ...

    async def status(
        self, link_token: str, *, browser: str | None = None, transcript: bool = False
    ) -> CallStatus | None:
        """The call's status, or None for an unknown link (or one bound to another browser). ``transcript``:
        with the call's stored lines, for the browser the link is bound to only."""
        ...

    async def hang_up(
        self, link_token: str, *, via: str, page_id: str | None = None, browser: str | None = None
    ) -> CallStatus | None:
        """End the call (idempotent). ``via`` is "page" (End call button) or "beacon" (tab closed); ``page_id``
        is the ``PageSession.page_id`` of the page that sent it, when it says. The browser the link is bound to
        can always end its call while it is active, also after the link expired."""
        ...

    async def renew_token(self, link_token: str, *, browser: str | None = None) -> str | None:
        """A fresh RTC token for the page of a call that is still running (Agora tokens last at most 24 hours,
        calls up to 72), or None for an unknown, ended or other browser's link."""
        ...

    async def receive_webhook(self, raw_body: bytes, headers: Mapping[str, str]) -> bool:
        """Verify the Agora NCS signature quickly; False for a bad signature.

        Schedules the real work itself (NCS wants an answer within 10 s)."""
        ...

    async def health(self) -> dict[str, object]:
        """A JSON-serialisable report, e.g. {"database": "ok", "active_calls": 3}. Raise when unhealthy."""
        ...


class OperatorView(Protocol):
    """The process's health and figures for `/healthz` and `/metrics` (bot.monitor.Monitor)."""

    async def report(self) -> dict[str, object]:
        """The /healthz document; ``status`` "unavailable" answers 503."""
        ...

    async def prometheus(self) -> bytes:
        """The /metrics body in Prometheus' text format."""
        ...


class NoCalls:
    """The backend when Agora is not configured: no call links exist, webhooks are refused; /healthz still
    answers (from the OperatorView)."""

    async def open_page(self, link_token: str, *, browser: str | None = None) -> PageSession | None:
        return None

    async def status(
        self, link_token: str, *, browser: str | None = None, transcript: bool = False
    ) -> CallStatus | None:
        return None

    async def hang_up(
        self, link_token: str, *, via: str, page_id: str | None = None, browser: str | None = None
    ) -> CallStatus | None:
        return None

    async def renew_token(self, link_token: str, *, browser: str | None = None) -> str | None:
        return None

    async def receive_webhook(self, raw_body: bytes, headers: Mapping[str, str]) -> bool:
        return False

    async def health(self) -> dict[str, object]:
        return {"calls": "not configured (agora.* settings)"}
