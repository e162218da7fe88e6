"""Fixtures for the web layer: the fake backend, an aiohttp test client, and (for the browser tests) one
headless Chromium per test session plus a loopback server serving the Agora SDK stub from another origin."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from bot.web.server import RedactingAccessLogger, create_app
from tests.web.fake_backend import FakeCallPageBackend

REPO_ROOT = Path(__file__).resolve().parents[2]
STUB_SDK_PATH = REPO_ROOT / "tests" / "fakes" / "agora_sdk_stub.js"
PRODUCTION_SDK_URL = "https://download.agora.io/sdk/release/AgoraRTC_N-4.24.8.js"
PUBLIC_URL = "https://calls.example.com"

CHROMIUM_PATH = "/usr/bin/chromium"
CHROMIUM_AVAILABLE = Path(CHROMIUM_PATH).exists()
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--use-fake-ui-for-media-stream",
    "--use-fake-device-for-media-stream",
]


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


# ---- browser ---------------------------------------------------------------------------------------------


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def browser():
    try:
        from playwright.async_api import async_playwright
    except ImportError:  # pragma: no cover
        pytest.skip("playwright is not installed")
    if not CHROMIUM_AVAILABLE:  # pragma: no cover
        pytest.skip(f"no Chromium at {CHROMIUM_PATH}")
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=CHROMIUM_PATH, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            await chromium.close()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def sdk_stub_url() -> AsyncIterator[str]:
    """The SDK stub, served from its own origin (another port) so the page's CSP script-src is exercised."""
    body = STUB_SDK_PATH.read_bytes()

    async def serve_stub(_request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="text/javascript")

    app = web.Application()
    app.router.add_get("/sdk/release/AgoraRTC_N-4.24.8.js", serve_stub)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/sdk/release/AgoraRTC_N-4.24.8.js"
    finally:
        await runner.cleanup()
