"""What the operator sees of a real bot process through one call: the JSON log, /healthz and /metrics.

`run_bot` runs against the loopback fakes of Discord and Agora, with the log set up as `python -m bot` does.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
from pathlib import Path

import httpx
import pytest

from bot import __version__
from bot.client import run_bot
from bot.logs import setup_logging
from standins.agora_emulator import running_emulator
from standins.discord_gateway import FakeDiscord
from standins.harness import eventually, free_port, make_settings
from tests.e2e.test_smoke_real_entry_point import find_message_with, next_of_kind

ALICE = 515151
SAID = "My name is Ines and my cat is called Pimento."


async def test_one_call_as_the_operator_sees_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeDiscord()
    await fake.start()
    fake.patch(monkeypatch)
    port = free_port()
    stream = io.StringIO()
    async with running_emulator() as emu:
        settings = make_settings(
            tmp_path,
            agora={"api_base_url": emu.base_url},
            web={"port": port, "public_url": f"http://127.0.0.1:{port}"},
            log={"format": "json"},
        )
        setup_logging(fmt="json", level="INFO", secrets=settings.secret_values(), stream=stream)
        bot_task = asyncio.create_task(run_bot(settings))
        base = f"http://127.0.0.1:{port}"
        try:
            await fake.wait_until_ready(timeout=15)
            async with httpx.AsyncClient(base_url=base) as http:
                await eventually(lambda: _gateway_connected(http))
                health = (await http.get("/healthz")).json()
                assert health["version"] == __version__ and health["status"] == "ok", json.dumps(health)
                assert health["discord"]["connected"] is True and health["discord"]["latency_seconds"] >= 0
                assert health["database"] == {"ok": True, "writable": True, "ended_calls_unsaved": 0}
                assert health["agora"]["configured"] is True and health["agora"]["reachable"] is True
                assert health["calls"]["active"] == 0 and health["queue"]["depth"] == 0
                assert health["agents_still_running"] == 0  # the calls backend's own figure, merged in
                assert "active_calls" not in health  # reported once, under calls

                token = await fake.slash("call", ALICE)
                await next_of_kind(fake, token, "followup", "edit")
                message, custom_id = find_message_with(fake, "consent:remember:call:")
                click = await fake.click(message, custom_id, ALICE)
                await next_of_kind(fake, click, "edit")
                agent = emu.only_agent()
                emu.user_joined(agent.agent_id)
                assert (await http.get("/healthz")).json()["calls"]["active"] == 1

                emu.script(agent.agent_id, [("user", SAID), ("assistant", "Hello Ines!")])
                hangup = await fake.slash("hangup", ALICE)
                assert "Call ended" in (await next_of_kind(fake, hangup, "followup", "edit"))["content"]

                health = (await http.get("/healthz")).json()
                assert health["calls"]["active"] == 0
                assert health["counters"]["calls_started"] == 1
                assert health["counters"]["calls_ended"] == {"hangup": 1}
                assert health["counters"]["turns_stored"] == 3

                metrics = await http.get("/metrics")
                assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
                text = metrics.text
                assert f'memory_call_bot_info{{version="{__version__}"}} 1.0' in text
                assert "memory_call_bot_discord_connected 1.0" in text
                assert "memory_call_bot_calls_started_total 1.0" in text
                assert 'memory_call_bot_calls_ended_total{route="hangup"} 1.0' in text
                assert "memory_call_bot_turns_stored_total 3.0" in text
                assert "memory_call_bot_active_calls 0.0" in text
                assert "memory_call_bot_agents_still_running 0.0" in text
                assert text.count("\nmemory_call_bot_active_calls ") == 1
                assert "memory_call_bot_queue_depth" in text and "memory_call_bot_agora_reachable 1.0" in text
            fake.assert_no_invalid_requests()
        finally:
            os.kill(os.getpid(), signal.SIGTERM)
            assert await asyncio.wait_for(bot_task, timeout=15) == 0
            await fake.stop()

    lines = stream.getvalue().splitlines()
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    messages = [r["message"] for r in records]
    assert any(f"memory-call-bot {__version__} starting" in m for m in messages)
    invite = next(m for m in messages if "add the bot to a server with" in m)
    assert "scope=bot+applications.commands&permissions=0" in invite
    own = next(m for m in messages if "members add it to their own account with" in m)
    assert own.endswith("&scope=applications.commands&integration_type=1")
    call_lines = [r for r in records if r.get("call_id")]
    assert call_lines and all(r["logger"].startswith("bot.") for r in call_lines)
    everything = stream.getvalue()
    assert "Ines" not in everything and "Pimento" not in everything  # never what members said
    assert settings.agora.customer_secret is not None
    assert settings.agora.customer_secret.get_secret_value() not in everything
    assert not any(r["logger"].startswith("httpx") for r in records)  # request logs at WARNING by default


async def _gateway_connected(http: httpx.AsyncClient) -> bool:
    try:
        response = await http.get("/healthz")
    except httpx.TransportError:
        return False  # the web server starts in the bot's setup hook
    return response.status_code == 200 and bool(response.json().get("discord", {}).get("connected"))
