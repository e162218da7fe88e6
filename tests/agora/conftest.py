"""Fixtures for the Agora tests: a running emulator on a frozen clock, an HTTP client authorized on its REST API, a
client with recorded sleeps, and a webhook receiver that checks signatures over the raw bytes."""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from aiohttp import web

from bot.agora import ConvoAIClient, verify_signature
from standins.agora_emulator import (
    TEST_APP_CERTIFICATE,
    TEST_APP_ID,
    TEST_CUSTOMER_ID,
    TEST_CUSTOMER_SECRET,
    TEST_WEBHOOK_SECRET,
    AgoraEmulator,
    running_emulator,
)

FROZEN_NOW = 1_750_000_000.0
BASIC = "Basic " + base64.b64encode(f"{TEST_CUSTOMER_ID}:{TEST_CUSTOMER_SECRET}".encode()).decode()


@dataclass
class RecordedSleeps:
    delays: list[float] = field(default_factory=list)

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture
async def agora_emulator() -> AsyncIterator[AgoraEmulator]:
    async with running_emulator(clock=lambda: FROZEN_NOW) as emulator:
        yield emulator


def authorized_http(emulator: AgoraEmulator) -> httpx.AsyncClient:
    """A client of the emulator's project REST API with the test customer's Basic credentials."""
    return httpx.AsyncClient(base_url=emulator.project_url, headers={"Authorization": BASIC})


@pytest.fixture
async def http(agora_emulator: AgoraEmulator) -> AsyncIterator[httpx.AsyncClient]:
    async with authorized_http(agora_emulator) as client:
        yield client


@pytest.fixture
def recorded_sleeps() -> RecordedSleeps:
    return RecordedSleeps()


def make_client(emulator: AgoraEmulator, sleeps: RecordedSleeps, **overrides: Any) -> ConvoAIClient:
    settings: dict[str, Any] = {
        "base_url": emulator.base_url,
        "app_id": emulator.app_id,
        "customer_id": emulator.customer_id,
        "customer_secret": emulator.customer_secret,
        "sleep": sleeps,
        "jitter": lambda: 1.0,
    }
    settings.update(overrides)
    return ConvoAIClient(**settings)


@pytest.fixture
async def convoai_client(
    agora_emulator: AgoraEmulator, recorded_sleeps: RecordedSleeps
) -> AsyncIterator[ConvoAIClient]:
    async with make_client(agora_emulator, recorded_sleeps) as client:
        yield client


@dataclass
class WebhookReceiver:
    """An NCS endpoint: verifies both signature headers, records envelopes, can be told to fail."""

    secret: str = TEST_WEBHOOK_SECRET
    received: list[dict[str, Any]] = field(default_factory=list)
    signature_failures: int = 0
    fail_next: int = 0
    answer_non_json: bool = False
    url: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        if not verify_signature(self.secret, raw, request.headers):
            self.signature_failures += 1
            return web.json_response({"code": 1, "msg": "invalid signature"}, status=401)
        if self.fail_next > 0:
            self.fail_next -= 1
            return web.json_response({"code": 1, "msg": "try again"}, status=500)
        self.received.append(json.loads(raw))
        if self.answer_non_json:
            return web.Response(text="ok")
        return web.json_response({"code": 0, "msg": "success"})

    @property
    def event_types(self) -> list[int]:
        return [envelope["eventType"] for envelope in self.received]


@pytest.fixture
async def webhook_receiver() -> AsyncIterator[WebhookReceiver]:
    receiver = WebhookReceiver()
    app = web.Application()
    app.router.add_post("/agora/webhook", receiver.handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    receiver.url = f"http://127.0.0.1:{runner.addresses[0][1]}/agora/webhook"
    try:
        yield receiver
    finally:
        await runner.cleanup()


@pytest.fixture
async def emulator_with_webhooks(webhook_receiver: WebhookReceiver) -> AsyncIterator[AgoraEmulator]:
    async with running_emulator(clock=lambda: FROZEN_NOW, webhook_url=webhook_receiver.url) as emulator:
        yield emulator


def packed_string(value: bytes) -> bytes:
    """AccessToken2's ``string``: u16 length, then the bytes."""
    return struct.pack("<H", len(value)) + value


def token_service(service_type: int, privileges: dict[int, int], *fields: bytes) -> tuple[int, bytes]:
    """One packed AccessToken2 service (type, privileges map, identity fields), as the SDK's builder takes it."""
    packed = struct.pack("<HH", service_type, len(privileges))
    packed += b"".join(struct.pack("<HI", key, privileges[key]) for key in sorted(privileges))
    return service_type, packed + b"".join(fields)


def agora_built_token(
    monkeypatch: pytest.MonkeyPatch,
    services: list[tuple[int, bytes]],
    *,
    issued_at: float,
    expire: int = 600,
) -> str:
    """An AccessToken2 signed by ``agora-agents``' copy of Agora's builder (TOOLS ``AccessToken2.build``) with
    any services, issued at ``issued_at``: the tokens Agora's tools make that the bot's own builder does not."""
    from agora_agent.agentkit import token as sdk_token

    monkeypatch.setattr(sdk_token, "time", SimpleNamespace(time=lambda: issued_at))
    monkeypatch.setattr(sdk_token, "random", SimpleNamespace(randint=lambda _low, _high: 777))
    return sdk_token._build_access_token2(TEST_APP_ID, TEST_APP_CERTIFICATE, expire, services)
