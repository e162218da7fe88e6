"""The log as an operator reads it: what members said never reaches it, whatever level the settings ask for."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.client import run_bot
from bot.logs import PAYLOAD_LOGGERS, THIRD_PARTY_LOGGERS, setup_logging
from bot.store.sqlite import SqliteStore
from standins.agora_emulator import running_emulator
from standins.discord_gateway import FakeDiscord
from standins.harness import free_port, make_settings

ALICE = 515151
MARKER = "qx7-zebrafinch-marker-0193"
"""Text only a member says: it must be in the database and nowhere in the log."""


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """``setup_logging`` changes the process's loggers: put them back for the tests that run after this one."""
    root = logging.getLogger()
    names = ("discord", *THIRD_PARTY_LOGGERS, *PAYLOAD_LOGGERS)
    saved = (list(root.handlers), root.level, {name: logging.getLogger(name).level for name in names})
    yield
    handlers, level, levels = saved
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    for name, value in levels.items():
        logging.getLogger(name).setLevel(value)


async def next_of_kind(fake: FakeDiscord, token: str, *kinds: str) -> dict:
    while True:
        kind, body = await fake.next_response(token)
        if kind in kinds:
            return body


def component_id(fake: FakeDiscord, prefix: str) -> tuple[dict, str]:
    for message in reversed(list(fake.messages.values())):
        for row in message.get("components", []):
            for component in row.get("components", []):
                if component.get("custom_id", "").startswith(prefix):
                    return message, component["custom_id"]
    raise AssertionError(f"no message with a {prefix!r} component")


async def test_member_text_is_in_no_log_line_with_every_level_at_debug(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restored_logging: None
) -> None:
    """The documented loudest setting (log.level and log.third_party_level DEBUG): a member types the marker in
    /chat (an interaction payload on the gateway) and says it in a call (SQL parameters when the lines are
    stored); the marker is stored, and no line of the log carries it."""
    fake = FakeDiscord()
    await fake.start()
    fake.patch(monkeypatch)
    port = free_port()
    log = io.StringIO()
    async with running_emulator() as emu:
        settings = make_settings(
            tmp_path,
            agora={"api_base_url": emu.base_url, "checkpoint_seconds": 0.2},
            web={"port": port, "public_url": f"http://127.0.0.1:{port}"},
            log={"level": "DEBUG", "third_party_level": "DEBUG"},
        )
        setup_logging(
            level=settings.log.level,
            fmt=settings.log.format,
            third_party_level=settings.log.third_party_level,
            secrets=settings.secret_values(),
            stream=log,
        )
        bot_task = asyncio.create_task(run_bot(settings))
        try:
            await fake.wait_until_ready(timeout=15)
            token = await fake.slash("call", ALICE)
            await next_of_kind(fake, token, "followup", "edit")
            message, custom_id = component_id(fake, "consent:remember:call:")
            await next_of_kind(fake, await fake.click(message, custom_id, ALICE), "edit")
            agent = emu.only_agent()
            emu.user_joined(agent.agent_id)
            emu.script(agent.agent_id, [("user", f"My code word is {MARKER}."), ("assistant", "Noted.")])
            ended = await next_of_kind(fake, await fake.slash("hangup", ALICE), "followup", "edit")
            assert "Call ended" in ended["content"]

            chat = await fake.slash("chat", ALICE, {"message": f"Remember {MARKER} please"})
            await next_of_kind(fake, chat, "callback", "followup", "edit")
        finally:
            os.kill(os.getpid(), signal.SIGTERM)
            assert await asyncio.wait_for(bot_task, timeout=15) == 0
            await fake.stop()

    store = SqliteStore(tmp_path / "bot.db")
    await store.open()
    try:
        assert any(MARKER in turn.content for turn in await store.recent_turns_of(ALICE, 10))
    finally:
        await store.close()
    lines = log.getvalue().splitlines()
    assert any(" DEBUG discord." in line for line in lines) and any(" INFO bot." in line for line in lines)
    assert [line for line in lines if MARKER in line] == []


def test_payload_loggers_stay_at_info_whatever_the_setting_says(restored_logging: None) -> None:
    """Even a library logger turned to DEBUG after start-up (discord.py's own set-up can) writes no DEBUG line."""
    log = io.StringIO()
    setup_logging(level="DEBUG", third_party_level="DEBUG", stream=log)
    assert logging.getLogger("httpx").isEnabledFor(logging.INFO)
    for name in PAYLOAD_LOGGERS:
        assert not logging.getLogger(name).isEnabledFor(logging.DEBUG), name
    logging.getLogger("aiosqlite").setLevel(logging.DEBUG)
    logging.getLogger("aiosqlite").debug("executing %s", f"INSERT ... ('{MARKER}')")
    logging.getLogger("discord.gateway").info("Shard ID %s has connected.", 0)
    assert log.getvalue().count("\n") == 1 and MARKER not in log.getvalue()
