"""The contract between the web layer (call page, its API, the Agora webhook) and the call service.

The web layer never talks to Agora or the database itself: everything goes through a ``CallPageBackend``.
The real implementation lives with the call service; tests use an in-memory fake.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol, runtime_checkable

CallState = Literal["starting", "active", "ending", "ended", "failed"]
HangupVia = Literal["page", "beacon"]

CALL_STATES: frozenset[str] = frozenset({"starting", "active", "ending", "ended", "failed"})
#: States in which the call page is still useful. ``open_page`` results in other states get the invalid page.
PAGE_STATES: frozenset[str] = frozenset({"starting", "active", "ending"})


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


@dataclass(frozen=True)
class CallStatus:
    state: str
    ended_reason: str | None
    turns_stored: int
    facts_learned: int | None  # None while post-call processing is pending or memory is off
    facts: tuple[str, ...] = ()
    """What was learned (the facts' texts), once ``facts_learned`` is known."""

    def to_json(self) -> dict[str, object]:
        return {
            "state": self.state,
            "ended_reason": self.ended_reason,
            "turns_stored": self.turns_stored,
            "facts_learned": self.facts_learned,
            "facts": list(self.facts),
        }


@runtime_checkable
class CallPageBackend(Protocol):
    async def open_page(self, link_token: str) -> PageSession | None:
        """The join parameters for a link, or None for a wrong, expired, reused or ended link."""
        ...

    async def status(self, link_token: str) -> CallStatus | None:
        """The call's status, or None for an unknown link."""
        ...

    async def hang_up(self, link_token: str, *, via: str, page_id: str | None = None) -> CallStatus | None:
        """End the call (idempotent). ``via`` is "page" (End call button) or "beacon" (tab closed); ``page_id``
        is the ``PageSession.page_id`` of the page that sent it, when it says."""
        ...

    async def receive_webhook(self, raw_body: bytes, headers: Mapping[str, str]) -> bool:
        """Verify the Agora NCS signature quickly; False for a bad signature.

        Schedules the real work itself (NCS wants an answer within 10 s)."""
        ...

    async def health(self) -> dict[str, object]:
        """A JSON-serialisable report, e.g. {"database": "ok", "active_calls": 3}. Raise when unhealthy."""
        ...
