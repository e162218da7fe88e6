"""Agora's Notification Center deliveries: verified, kept in a local inbox until stored, processed once each (the
final history of a call, its agent's exit, a token about to expire)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Protocol

from pydantic import SecretStr

from bot.agora import ConvoAIClient
from bot.agora.webhooks import (
    EVENT_AGENT_HISTORY,
    EVENT_AGENT_LEFT,
    EVENT_AGENT_TOKEN_EXPIRING,
    Notification,
    parse_notification,
    verify_signature,
)
from bot.calls.agent import stop_reason
from bot.calls.agent_control import AgentControl
from bot.calls.ending import Ending
from bot.calls.errors import WebhookNotStored
from bot.calls.inbox import WebhookInbox
from bot.calls.recovery import RecoveryStore, count_lost_lines
from bot.memory.importer import POST_CALL_JOB
from bot.memory.service import MemoryService
from bot.store.models import CallRecord
from bot.store.repository import NOTICE_KEEP_SECONDS

log = logging.getLogger(__name__)

STALE_NOTICE_MARGIN_SECONDS = 86400.0


class WebhookStore(RecoveryStore, Protocol):
    async def notice_seen(self, notice_id: str) -> bool: ...
    async def remember_notice(self, notice_id: str, at: float) -> bool: ...
    async def get_call(self, call_id: str) -> CallRecord | None: ...
    async def get_call_by_agent_id(self, agent_id: str) -> CallRecord | None: ...
    async def count_call_turns(self, call_id: str) -> int: ...
    async def enqueue_job(self, kind: str, ref_id: str, at: float, *, not_before: float = 0.0) -> bool: ...
    async def expedite_job(self, kind: str, ref_id: str, at: float) -> bool: ...


class Webhooks:
    def __init__(
        self,
        store: WebhookStore,
        memory: MemoryService,
        agora: ConvoAIClient,
        *,
        inbox: WebhookInbox,
        agents: AgentControl,
        ending: Ending,
        secret: SecretStr | None,
        max_history: int,
        clock: Callable[[], float],
    ):
        self.store = store
        self.memory = memory
        self.agora = agora
        self.inbox = inbox
        self.agents = agents
        self.ending = ending
        self.secret = secret
        self.max_history = max_history
        self.clock = clock
        self._in_flight: set[str] = set()

    async def receive(self, raw_body: bytes, headers: Mapping[str, str]) -> bool:
        """Verify a Notification Center delivery and store what it carries; False on a bad signature.

        The delivery is kept in the local inbox first; WebhookNotStored (answered with a 5xx) when it could not
        be stored, so Agora resends it."""
        if self.secret is None:
            log.warning("an Agora webhook arrived but agora.webhook_secret (AGORA_WEBHOOK_SECRET) is not set")
            return False
        if not verify_signature(self.secret.get_secret_value(), raw_body, headers):
            log.warning("refused an Agora webhook with a bad signature")
            return False
        try:
            notification = parse_notification(raw_body)
        except ValueError as exc:
            log.warning("ignored a malformed Agora webhook: %s", exc)
            return True
        kept = self.inbox.put(raw_body)
        try:
            await self.handle(notification)
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
                await self.handle(notification)
            except Exception as exc:
                log.warning("webhook inbox: notice %s still cannot be stored: %s", notification.notice_id, exc)
                continue
            self.inbox.remove(path)
            processed += 1
        if processed:
            log.info("webhook inbox: processed %d kept deliveries", processed)
        return processed

    async def handle(self, notification: Notification) -> None:
        """Process one delivery. A notice already processed is skipped; it is recorded only after processing,
        so a delivery that failed half-way is processed again when Agora resends it (merging is idempotent)."""
        if not notification.is_convoai:
            log.info("ignored a webhook notice of another Agora product (productId %s)", notification.product_id)
            return
        notice = notification.notice_id
        if notice in self._in_flight:
            log.info("webhook notice %s was already processed", notice)
            return
        age = self.clock() - notification.notify_ms / 1000
        if age > NOTICE_KEEP_SECONDS - STALE_NOTICE_MARGIN_SECONDS:
            # Agora retries within minutes; a delivery this old is a replay whose notice id may be forgotten.
            log.warning("ignored webhook notice %s sent %.0f days ago (a replay)", notice, age / 86400)
            return
        self._in_flight.add(notice)  # before any await, so a copy arriving meanwhile is skipped
        try:
            if await self.store.notice_seen(notice):
                log.info("webhook notice %s was already processed", notice)
                return
            await self._process(notification)
            await self.store.remember_notice(notice, self.clock())
        finally:
            self._in_flight.discard(notice)

    async def _process(self, notification: Notification) -> None:
        call_id = notification.labels.get("call_id")
        call = await self.store.get_call(call_id) if call_id else None
        if call is None and notification.agent_id:
            call = await self.store.get_call_by_agent_id(notification.agent_id)
        if call is None:
            log.info("webhook %s for an unknown call", notification.event_type)
            return
        if notification.event_type == EVENT_AGENT_HISTORY:
            if not call.private and notification.contents:
                result = await self.memory.record_snapshot(
                    call,
                    [(i.role, i.content) for i in notification.contents],
                    max_history=self.max_history,
                    final=True,
                )
                log.info("call %s: history webhook added %d turns", call.call_id, result.added)
            if call.state in ("starting", "active", "ending"):
                self.ending.final_history_arrived(call.call_id)
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
            await self.agents.renew_token(call.call_id)
        if notification.event_type in (EVENT_AGENT_LEFT, EVENT_AGENT_HISTORY) and call.state in ("starting", "active"):
            await self.ending.finalize(call.call_id, stop_reason(notification.stop_message))
