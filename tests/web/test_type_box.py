"""The call page's "type instead of speaking" box exists only for a bot running against the local Agora emulator
(``agora.emulator``, which ``python3 tasks.py demo`` sets and which is refused unless Agora's address is loopback)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer

from bot.app import build_web_server
from bot.config import ConfigError, load_settings
from bot.web.call_page import SETTINGS_KEY
from bot.web.server import create_app
from tests.web.conftest import PRODUCTION_SDK_URL, PUBLIC_URL
from tests.web.fake_backend import FakeCallPageBackend

CONFIG_RE = re.compile(r'<script type="application/json" id="call-config">(.*?)</script>', re.DOTALL)


def csp_directives(header: str) -> dict[str, list[str]]:
    return {d.split()[0]: d.split()[1:] for d in (part.strip() for part in header.split(";")) if d}


@pytest_asyncio.fixture
async def emulated(fake_backend: FakeCallPageBackend) -> AsyncIterator[TestClient]:
    app = create_app(
        fake_backend,
        sdk_url=PRODUCTION_SDK_URL,
        public_url=PUBLIC_URL,
        emulator_controls_url="http://127.0.0.1:47001/_emulator",
    )
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        yield client


async def test_against_the_emulator_the_page_is_told_where_typed_lines_go(
    emulated: TestClient, fake_backend: FakeCallPageBackend
) -> None:
    token = fake_backend.add_call(channel="call/with odd#chars")
    response = await emulated.get(f"/call/{token}")
    config = json.loads(CONFIG_RE.search(await response.text()).group(1))  # type: ignore[union-attr]
    assert config["typeUrl"] == "http://127.0.0.1:47001/_emulator/channels/call%2Fwith%20odd%23chars/user_says"
    connect = csp_directives(response.headers["Content-Security-Policy"])["connect-src"]
    assert connect == ["'self'", "https:", "wss:", "https://download.agora.io", "http://127.0.0.1:47001"]


async def test_against_agora_the_page_has_no_typing(client: TestClient, fake_backend: FakeCallPageBackend) -> None:
    response = await client.get(f"/call/{fake_backend.add_call()}")
    body = await response.text()
    assert "typeUrl" not in json.loads(CONFIG_RE.search(body).group(1))  # type: ignore[union-attr]
    assert '<form id="type-form" class="type-form" aria-labelledby="type-label" hidden>' in body
    connect = csp_directives(response.headers["Content-Security-Policy"])["connect-src"]
    assert connect == ["'self'", "https:", "wss:", "https://download.agora.io"]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]"])
def test_the_emulator_setting_takes_a_loopback_agora(host: str) -> None:
    settings = load_settings(
        environ={"AGORA_EMULATOR": "true", "AGORA_API_BASE_URL": f"http://{host}:5000/api/conversational-ai-agent"},
        load_dotenv_file=False,
    )
    assert settings.agora.emulator_controls_url == f"http://{host}:5000/_emulator"
    assert load_settings(environ={}, load_dotenv_file=False).agora.emulator_controls_url is None


@pytest.mark.parametrize(
    "api", ["https://api.agora.io/api/conversational-ai-agent", "http://10.0.0.5:5000/api", "http://127.0.0.1.nip.io/a"]
)
def test_the_emulator_setting_is_refused_for_any_other_agora(api: str) -> None:
    with pytest.raises(ConfigError, match=r"agora\.emulator \(AGORA_EMULATOR\) is only for the local Agora emulator"):
        load_settings(environ={"AGORA_EMULATOR": "true", "AGORA_API_BASE_URL": api}, load_dotenv_file=False)


def test_the_running_bot_gives_its_call_page_the_emulators_controls(fake_backend: FakeCallPageBackend) -> None:
    settings = load_settings(
        environ={"AGORA_EMULATOR": "true", "AGORA_API_BASE_URL": "http://127.0.0.1:5000/api/conversational-ai-agent"},
        load_dotenv_file=False,
    )
    emulated = build_web_server(settings, fake_backend, None)
    assert emulated.app[SETTINGS_KEY].emulator_controls_url == "http://127.0.0.1:5000/_emulator"
    real = build_web_server(load_settings(environ={}, load_dotenv_file=False), fake_backend, None)
    assert real.app[SETTINGS_KEY].emulator_controls_url is None
