"""The browser for the call-page tests: one headless Debian Chromium per test session (driven by Playwright,
never a downloaded browser), and a loopback server serving the Agora SDK stub from another origin."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp import web

REPO_ROOT = Path(__file__).resolve().parents[1]
STUB_SDK_PATH = REPO_ROOT / "standins" / "agora_sdk_stub.js"
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


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def browser():
    from playwright.async_api import async_playwright

    if not CHROMIUM_AVAILABLE:  # pragma: no cover - tasks.py installs it; a missing browser must fail loudly
        pytest.fail(f"the browser tests need Debian's Chromium at {CHROMIUM_PATH}: run `python3 tasks.py test`")
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
