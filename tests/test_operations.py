"""The operator's view: /healthz and /metrics, the log's one handler and formats, `--version`."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import httpx
import pytest

from bot import __version__
from bot.__main__ import main
from bot.app import open_services
from bot.logs import HANDLER_NAME, bind
from bot.monitor import Monitor
from bot.store.sqlite import SqliteStore
from standins.harness import FakeClock, make_settings

NO_AGORA = {"app_id": None, "customer_id": None}


class CountingAgora:
    def __init__(self) -> None:
        self.pings = 0
        self.fail = False

    async def ping(self) -> None:
        self.pings += 1
        if self.fail:
            raise ConnectionError("unreachable")


async def test_healthz_and_metrics_exist_without_agora(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, agora=NO_AGORA)
    async with open_services(settings, full=True) as services:
        assert services.web is not None and services.calls is None
        await services.web.start()
        async with httpx.AsyncClient(base_url=services.web.url) as http:
            health = await http.get("/healthz")
            metrics = await http.get("/metrics")
            page = await http.get("/call/sometoken")
    assert health.status_code == 200
    report = health.json()
    assert report["status"] == "ok" and report["version"] == __version__
    assert report["agora"] == {"configured": False} and report["calls"]["active"] == 0
    assert metrics.status_code == 200 and "memory_call_bot_agora_configured 0.0" in metrics.text
    assert page.status_code == 404  # no call links exist without Agora


async def test_agora_reachability_is_cached_not_checked_per_request(tmp_path: Path) -> None:
    clock = FakeClock()
    store = SqliteStore(tmp_path / "bot.db")
    await store.open()
    agora = CountingAgora()
    monitor = Monitor(store, agora=agora, clock=clock, agora_check_seconds=60)
    try:
        for _ in range(5):
            report = await monitor.report()
        assert agora.pings == 1 and report["agora"]["reachable"] is True and report["status"] == "ok"

        agora.fail = True
        clock.advance(30)
        assert (await monitor.report())["agora"]["reachable"] is True and agora.pings == 1
        clock.advance(31)
        await monitor.report()  # starts the next check in the background
        assert monitor._agora_task is not None
        await monitor._agora_task
        report = await monitor.report()
        assert agora.pings == 2
        assert report["agora"]["reachable"] is False and report["agora"]["error"] == "ConnectionError"
        assert report["status"] == "degraded"
    finally:
        await monitor.close()
        await store.close()


async def test_queue_depth_and_oldest_job_age(tmp_path: Path) -> None:
    clock = FakeClock()
    store = SqliteStore(tmp_path / "bot.db")
    await store.open()
    try:
        monitor = Monitor(store, clock=clock)
        assert (await monitor.report())["queue"] == {"depth": 0, "oldest_age_seconds": None}
        await store.enqueue_job("post_call", "a", clock() - 120)
        await store.enqueue_job("post_call", "b", clock() - 5)
        assert (await monitor.report())["queue"] == {"depth": 2, "oldest_age_seconds": 120.0}
        text = (await monitor.prometheus()).decode()
        assert "memory_call_bot_queue_depth 2.0" in text
        assert "memory_call_bot_queue_oldest_age_seconds 120.0" in text
    finally:
        await store.close()


async def test_healthz_answers_503_when_the_database_does_not(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, agora=NO_AGORA)
    async with open_services(settings, full=True) as services:
        assert services.web is not None
        await services.web.start()
        await services.store.close()  # as good as a database that stopped answering
        async with httpx.AsyncClient(base_url=services.web.url) as http:
            health = await http.get("/healthz")
            metrics = await http.get("/metrics")
        await services.store.open()
    assert health.status_code == 503
    assert health.json()["status"] == "unavailable" and health.json()["database"]["ok"] is False
    assert "memory_call_bot_up 0.0" in metrics.text


# What Caddy's reverse_proxy adds to every request it forwards (deploy/Caddyfile), and nginx's usual configuration.
THROUGH_CADDY = {"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "calls.example"}
THROUGH_NGINX = {"X-Real-IP": "203.0.113.7", "Forwarded": "for=203.0.113.7;proto=https"}


@pytest.mark.parametrize("proxy", [THROUGH_CADDY, THROUGH_NGINX], ids=["caddy", "nginx"])
async def test_the_internet_sees_only_the_status_of_healthz_and_no_metrics(
    tmp_path: Path, proxy: dict[str, str]
) -> None:
    """Issue 33 item 10: /healthz through the proxy gave anyone the version, active calls, queue depth, Discord
    latency and counters. The operator's direct requests (the image's HEALTHCHECK, the compose network) still do."""
    settings = make_settings(tmp_path, agora=NO_AGORA)
    async with open_services(settings, full=True) as services:
        assert services.web is not None
        await services.web.start()
        async with httpx.AsyncClient(base_url=services.web.url) as http:
            public = await http.get("/healthz", headers=proxy)
            public_metrics = await http.get("/metrics", headers=proxy)
            direct = await http.get("/healthz")
            direct_metrics = await http.get("/metrics")
            await services.store.close()
            public_down = await http.get("/healthz", headers=proxy)
            await services.store.open()
    assert (public.status_code, public.json()) == (200, {"status": "ok"})
    assert __version__ not in public.text and "memory_call_bot" not in public_metrics.text
    assert public_metrics.status_code == 404
    assert (public_down.status_code, public_down.json()) == (503, {"status": "unavailable"})
    assert direct.json()["version"] == __version__ and "counters" in direct.json()
    assert direct_metrics.status_code == 200 and "memory_call_bot_up 1.0" in direct_metrics.text


def test_version_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"memory-call-bot {__version__}"


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BOT_CONFIG", raising=False)
    monkeypatch.setenv("DISCORD_TOKEN", "a-secret-discord-token-value")
    path = tmp_path / "config.toml"
    path.write_text(f'[memory]\ndatabase_path = "{tmp_path / "bot.db"}"\n')
    return path


def test_json_logs_one_handler_ids_as_fields_no_secrets(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LOG_FORMAT", "json")
    discord_logger = logging.getLogger("discord")
    discord_logger.addHandler(logging.StreamHandler())  # what discord.py's own set-up would add
    assert main(["--config", str(config), "migrate"]) == 0
    capsys.readouterr()

    root = logging.getLogger()
    assert [h.get_name() for h in root.handlers] == [HANDLER_NAME]
    assert discord_logger.handlers == [] and discord_logger.propagate
    assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
    with bind(call_id="c-1", user_id=42):
        logging.getLogger("bot.calls.service").warning("checkpoint failed (token %s)", "a-secret-discord-token-value")
    logging.getLogger("bot.x").info("plain", extra={"guild_id": 7})
    lines = capsys.readouterr().err.splitlines()
    first, second = (json.loads(line) for line in lines)
    assert first["call_id"] == "c-1" and first["user_id"] == 42 and first["level"] == "WARNING"
    assert first["message"] == "checkpoint failed (token [secret])"
    assert second["guild_id"] == 7 and "call_id" not in second


def test_text_logs_append_the_ids_and_third_party_level_is_a_setting(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LOG_THIRD_PARTY_LEVEL", "INFO")
    monkeypatch.setenv("LOG_LEVEL", "debug")
    assert main(["--config", str(config), "migrate"]) == 0
    capsys.readouterr()
    assert logging.getLogger("httpx").isEnabledFor(logging.INFO)
    assert logging.getLogger().isEnabledFor(logging.DEBUG)
    with bind(call_id="c-2"):
        logging.getLogger("bot.test").info("hello")
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith("INFO bot.test: hello call_id=c-2")
