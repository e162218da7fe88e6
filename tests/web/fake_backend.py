"""An in-memory ``CallPageBackend`` for tests of the web layer. Records every call."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from bot.web.backend import CallStatus, PageSession

FAKE_APP_ID = "0123456789abcdef0123456789abcdef"  # 32-hex like a real App ID
FAKE_APP_CERTIFICATE = "fedcba9876543210fedcba9876543210"  # never handed to the web layer
WEBHOOK_SECRET = "secret"


@dataclass
class FakeCall:
    session: PageSession
    state: str = "active"
    end_reason: str | None = None
    turns_stored: int = 0
    facts_learned: int | None = None
    facts: tuple[str, ...] = ()
    remembered: tuple[str, ...] = ()
    max_opens: int | None = None  # None: the page may be opened (reloaded) any number of times
    opens: int = 0
    # What the backend reports once hung up (simulates history capture / post-call processing).
    turns_on_hangup: int = 4
    facts_on_hangup: int | None = None

    def status(self) -> CallStatus:
        return CallStatus(
            state=self.state,
            end_reason=self.end_reason,
            turns_stored=self.turns_stored,
            facts_learned=self.facts_learned,
            facts=self.facts,
            remembered=self.remembered,
        )


@dataclass
class FakeCallPageBackend:
    calls: dict[str, FakeCall] = field(default_factory=dict)
    log: list[tuple[str, object]] = field(default_factory=list)  # (method, link token or body) in call order
    hangups: list[tuple[str, str]] = field(default_factory=list)  # (link token, via)
    webhooks: list[tuple[bytes, dict[str, str]]] = field(default_factory=list)
    webhook_secret: str = WEBHOOK_SECRET
    health_report: dict[str, object] = field(default_factory=lambda: {"database": "ok", "active_calls": 0})
    health_error: Exception | None = None
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    _hangup_event: asyncio.Event | None = None

    # ---- test helpers -----------------------------------------------------------------------------------

    def add_call(
        self,
        *,
        token: str | None = None,
        channel: str = "call-test-channel",
        user_uid: int = 1001,
        agent_uid: int = 2002,
        state: str = "active",
        expires_in: timedelta = timedelta(minutes=10),
        max_minutes: int = 15,
        rtc_token: str | None = None,
        **call_fields: object,
    ) -> str:
        token = token or secrets.token_urlsafe(32)
        session = PageSession(
            app_id=FAKE_APP_ID,
            channel=channel,
            rtc_token=rtc_token or "007eJxTYFBKz" + secrets.token_hex(24),
            user_uid=user_uid,
            agent_uid=agent_uid,
            state=state,
            expires_at=self.now + expires_in,
            max_minutes=max_minutes,
        )
        self.calls[token] = FakeCall(session=session, state=state, **call_fields)  # type: ignore[arg-type]
        return token

    def end_call(
        self,
        token: str,
        *,
        reason: str = "hangup_button",
        turns: int = 3,
        facts: int | None = 1,
        learned: tuple[str, ...] = (),
    ) -> None:
        """The call ends elsewhere (Discord button, idle timeout)."""
        call = self.calls[token]
        call.state = "ended"
        call.end_reason = reason
        call.turns_stored = turns
        call.facts_learned = facts
        call.facts = learned

    def methods(self) -> list[str]:
        return [method for method, _ in self.log]

    async def wait_for_hangup(self, within: float = 5.0) -> tuple[str, str]:
        """The first hang-up, waiting up to ``within`` seconds for it (TimeoutError otherwise)."""
        if not self.hangups:
            self._hangup_event = asyncio.Event()
            async with asyncio.timeout(within):
                await self._hangup_event.wait()
        return self.hangups[0]

    # ---- CallPageBackend ------------------------------------------------------------------------------

    async def open_page(self, link_token: str, *, browser: str | None = None) -> PageSession | None:
        self.log.append(("open_page", link_token))
        call = self.calls.get(link_token)
        if call is None or call.session.expires_at <= datetime.now(UTC) or call.state in ("ended", "failed"):
            return None
        if call.max_opens is not None and call.opens >= call.max_opens:
            return None
        call.opens += 1
        return replace(call.session, state=call.state)

    async def status(
        self, link_token: str, *, browser: str | None = None, transcript: bool = False
    ) -> CallStatus | None:
        self.log.append(("status", link_token))
        call = self.calls.get(link_token)
        return call.status() if call else None

    async def hang_up(
        self, link_token: str, *, via: str, page_id: str | None = None, browser: str | None = None
    ) -> CallStatus | None:
        self.log.append(("hang_up", link_token))
        call = self.calls.get(link_token)
        if call is None:
            return None
        self.hangups.append((link_token, via))
        if self._hangup_event is not None:
            self._hangup_event.set()
        if call.state not in ("ended", "failed"):
            call.state = "ended"
            call.end_reason = f"hung_up_via_{via}"
            call.turns_stored = call.turns_on_hangup
            call.facts_learned = call.facts_on_hangup
        return call.status()

    async def renew_token(self, link_token: str, *, browser: str | None = None) -> str | None:
        self.log.append(("renew_token", link_token))
        call = self.calls.get(link_token)
        if call is None or call.state not in ("starting", "active"):
            return None
        call.session = replace(call.session, rtc_token="007eJxRenewed" + secrets.token_hex(24))
        return call.session.rtc_token

    async def receive_webhook(self, raw_body: bytes, headers: Mapping[str, str]) -> bool:
        self.log.append(("receive_webhook", raw_body))
        expected = hmac.new(self.webhook_secret.encode(), raw_body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, headers.get("Agora-Signature-V2", "")):
            return False
        self.webhooks.append((raw_body, dict(headers)))
        return True

    async def health(self) -> dict[str, object]:
        self.log.append(("health", None))
        if self.health_error is not None:
            raise self.health_error
        return dict(self.health_report)


def sign_webhook(body: bytes, secret: str = WEBHOOK_SECRET) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "Agora-Signature": hmac.new(secret.encode(), body, hashlib.sha1).hexdigest(),
        "Agora-Signature-V2": hmac.new(secret.encode(), body, hashlib.sha256).hexdigest(),
    }
