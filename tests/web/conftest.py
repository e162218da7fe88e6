"""Fixtures for the web layer: the fake backend and an aiohttp test client. The browser fixtures are shared by
the whole suite (tests/browser.py, loaded from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer

from bot.web.access_log import RedactingAccessLogger
from bot.web.server import create_app
from tests.web.fake_backend import FakeCallPageBackend

REPO_ROOT = Path(__file__).resolve().parents[2]
PRODUCTION_SDK_URL = "https://download.agora.io/sdk/release/AgoraRTC_N-4.24.8.js"
PUBLIC_URL = "https://calls.example.com"


@pytest.fixture
def fake_backend() -> FakeCallPageBackend:
    return FakeCallPageBackend()


@pytest_asyncio.fixture
async def client(fake_backend: FakeCallPageBackend) -> AsyncIterator[TestClient]:
    app = create_app(fake_backend, sdk_url=PRODUCTION_SDK_URL, public_url=PUBLIC_URL)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server(access_log_class=RedactingAccessLogger)  # as WebServer does
    async with TestClient(server) as test_client:
        yield test_client
