"""NCS, the notifications the emulator sends (101 agent started, 102 left, 103 history, 104 token expiring): signed
as Agora signs them (``bot.agora.webhooks.sign_body``), queued, POSTed by one worker and retried as spec §6
documents. A test can hold them back, then release them reordered, duplicated or dropped."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import aiohttp

from bot.agora.webhooks import sign_body
from standins.agora_emulator.agents import EmulatedAgent, random_id
from standins.agora_emulator.contract import TEST_WEBHOOK_SECRET

logger = logging.getLogger(__name__)

DEFAULT_WEBHOOK_RETRY_DELAYS = (0.0, 0.1, 0.3)
"""Waits before NCS retries 1, 2 and 3: at once, then increasing (see ``AgoraEmulator._deliver``)."""
NCS_RECEIVER_TIMEOUT_SECONDS = 10.0
"""The receiver must answer 200 with a JSON body "within 10 seconds" or NCS resends (spec §6, DOCS-NCS)."""

WebhookMode = Literal["normal", "duplicate", "reverse", "off"]


class WebhookAttempt(NamedTuple):
    notice_id: str
    event_type: int
    status: int | None
    error: str | None
    sent_at: float = 0.0  # time.monotonic() when the attempt was made


@dataclass(frozen=True)
class Notification:
    envelope: dict[str, Any]
    body: bytes

    @property
    def notice_id(self) -> str:
        return str(self.envelope["noticeId"])

    @property
    def event_type(self) -> int:
        return int(self.envelope["eventType"])


def envelope_body(envelope: dict[str, Any]) -> bytes:
    return json.dumps(envelope, separators=(",", ":"), ensure_ascii=False).encode()


class NcsWebhooks:
    """The emulator's notifications: what was emitted, delivered, given up and every delivery attempt."""

    def _init_webhooks(
        self,
        *,
        webhook_url: str | None,
        webhook_secret: str | None,
        webhook_mode: WebhookMode,
        webhook_timeout: float,
        webhook_max_retries: int,
        webhook_retry_delays: Sequence[float],
    ) -> None:
        self.webhook_url = webhook_url
        self.webhook_secret = webhook_secret or TEST_WEBHOOK_SECRET
        self.webhook_mode: WebhookMode = webhook_mode
        self.webhook_timeout = webhook_timeout
        self.webhook_max_retries = webhook_max_retries
        self.webhook_retry_delays = tuple(webhook_retry_delays)
        self.emitted: list[dict[str, Any]] = []
        self.delivered: list[dict[str, Any]] = []
        self.undelivered: list[dict[str, Any]] = []
        self.webhook_attempts: list[WebhookAttempt] = []
        self._held: list[Notification] | None = None
        self._outbox: asyncio.Queue[Notification] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None
        self._webhook_session: aiohttp.ClientSession | None = None

    def _start_webhooks(self) -> None:
        # One connection per notification, as independent deliveries; no idle keep-alive left on the receiver.
        self._webhook_session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))
        self._worker = asyncio.get_running_loop().create_task(self._deliver_webhooks_forever())

    async def _stop_webhooks(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
            self._worker = None
        if self._webhook_session is not None:
            await self._webhook_session.close()
            self._webhook_session = None

    def hold_webhooks(self) -> None:
        """Keep notifications back until :meth:`release_webhooks`."""
        if self._held is None:
            self._held = []

    @property
    def held_webhooks(self) -> list[dict[str, Any]]:
        return [notification.envelope for notification in self._held or []]

    async def release_webhooks(self, order: Sequence[int] | None = None) -> None:
        """Deliver the held notifications, in ``order`` (indices into :attr:`held_webhooks`; default: as held,
        indices may repeat to duplicate or be left out to drop), then wait for delivery."""
        held = self._held or []
        self._held = None
        chosen = [held[index] for index in order] if order is not None else held
        for notification in chosen:
            self._outbox.put_nowait(notification)
        await self.wait_webhooks_idle()

    async def wait_webhooks_idle(self, within_seconds: float = 10.0) -> None:
        """Wait until every queued notification was delivered or given up (loopback I/O only)."""
        async with asyncio.timeout(within_seconds):
            await self._outbox.join()

    @staticmethod
    def _payload_base(agent: EmulatedAgent) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "agent_id": agent.agent_id,
            "name": agent.name,
            "channel": agent.channel,
            "start_ts": agent.start_ts,
        }
        if agent.properties.get("labels"):
            payload["labels"] = dict(agent.properties["labels"])
        return payload

    def _emit(self, event_type: int, payload: dict[str, Any]) -> None:
        envelope = {
            "sid": random_id(16),
            "noticeId": str(uuid.uuid4()),
            "productId": 17,
            "eventType": event_type,
            "notifyMs": int(self.now() * 1000),
            "payload": payload,
        }
        self.emitted.append(envelope)
        if self.webhook_mode == "off" or not self.webhook_url:
            return
        notification = Notification(envelope, envelope_body(envelope))
        copies = 2 if self.webhook_mode == "duplicate" else 1
        for _ in range(copies):
            if self._held is not None:
                self._held.append(notification)
            else:
                self._outbox.put_nowait(notification)

    async def _deliver_webhooks_forever(self) -> None:
        while True:
            notification = await self._outbox.get()
            try:
                await self._deliver(notification)
            except Exception:
                logger.exception("emulator failed delivering notification %s", notification.notice_id)
                self.undelivered.append(notification.envelope)
            finally:
                self._outbox.task_done()

    async def _deliver(self, notification: Notification) -> None:
        """POST with both signatures; retried up to ``webhook_max_retries`` times unless the receiver answers
        200 with a JSON body: the first retry at once, the next ones after increasing waits
        (``webhook_retry_delays``), as NCS documents (spec §6: "resends immediately, then at increasing
        intervals, and gives up after 3 retries"). The real intervals are not published; the defaults here
        are short so tests stay fast, and a test that needs a longer window sets its own. Each resend carries
        a fresh ``notifyMs`` ("This value is updated when the Agora server resends the notification callback",
        DOCS-NCS request-header-body), so its body and both signatures are new; ``noticeId`` stays."""
        assert self._webhook_session is not None
        url = self.webhook_url
        if not url:
            return
        timeout = aiohttp.ClientTimeout(total=self.webhook_timeout)
        envelope, body = notification.envelope, notification.body
        for attempt in range(1 + self.webhook_max_retries):
            if attempt > 0:
                if self.webhook_retry_delays:
                    delays = self.webhook_retry_delays
                    await asyncio.sleep(delays[min(attempt - 1, len(delays) - 1)])
                envelope = {**notification.envelope, "notifyMs": int(self.now() * 1000)}
                body = envelope_body(envelope)
            headers = {"Content-Type": "application/json", **sign_body(self.webhook_secret, body)}
            sent_at = time.monotonic()
            status: int | None = None
            error: str | None = None
            try:
                async with self._webhook_session.post(url, data=body, headers=headers, timeout=timeout) as response:
                    status = response.status
                    text = await response.text()
                json.loads(text)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                error = f"{type(exc).__name__}: {exc}"
            self.webhook_attempts.append(
                WebhookAttempt(notification.notice_id, notification.event_type, status, error, sent_at)
            )
            if status == 200 and error is None:
                self.delivered.append(envelope)
                return
        logger.warning("emulator gave up delivering notification %s", notification.notice_id)
        self.undelivered.append(notification.envelope)
