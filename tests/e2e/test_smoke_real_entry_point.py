"""The real start-up path: `run_bot` logs in over HTTP, connects to the gateway, syncs the commands, serves the
call page, and answers /call through the full stack — against loopback fakes of Discord and Agora. Every request
body the bot sends is validated against Discord's OpenAPI description by the fake."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import httpx
import pytest

from bot.client import run_bot, sync_commands
from standins.agora_emulator import running_emulator
from standins.discord_gateway import FakeDiscord
from standins.harness import eventually, free_port, make_settings

ALICE = 424242


def find_message_with(fake: FakeDiscord, prefix: str) -> tuple[dict, str]:
    """The newest message with a component whose custom_id starts with ``prefix``, and that custom_id."""
    for message in reversed(list(fake.messages.values())):
        for row in message.get("components", []):
            for component in row.get("components", []):
                if component.get("custom_id", "").startswith(prefix):
                    return message, component["custom_id"]
    raise AssertionError(f"no message with a {prefix!r} component")


async def next_of_kind(fake: FakeDiscord, token: str, *kinds: str) -> dict:
    """The bot's next answer of one of ``kinds`` to the interaction; a real bot process on a busy two-core machine
    (an LLM reply, a memory build) may take longer than the fake's default 5 s."""
    while True:
        kind, body = await fake.next_response(token, timeout=15.0)
        if kind in kinds:
            return body


async def test_real_entry_point_answers_call_over_the_gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeDiscord()
    await fake.start()
    fake.patch(monkeypatch)
    port = free_port()
    async with running_emulator() as emu:
        settings = make_settings(
            tmp_path,
            agora={"api_base_url": emu.base_url, "checkpoint_seconds": 0.2},
            web={"port": port, "public_url": f"http://127.0.0.1:{port}"},
        )
        bot_task = asyncio.create_task(run_bot(settings))
        try:
            await fake.wait_until_ready(timeout=15)
            synced = {c["name"] for c in fake.commands["global"]}
            assert {"call", "hangup", "memory", "forget", "settings", "chat"} <= synced

            token = await fake.slash("call", ALICE)
            assert (await fake.next_response(token))[1]["type"] == 5
            consent = await next_of_kind(fake, token, "followup", "edit")
            assert "may the agent remember you" in consent["content"]

            message, custom_id = find_message_with(fake, "consent:remember:call:")
            assert custom_id == f"consent:remember:call:{ALICE}"
            click = await fake.click(message, custom_id, ALICE)
            card = await next_of_kind(fake, click, "edit")
            link = next(c["url"] for row in card["components"] for c in row["components"] if c.get("url"))
            assert link.startswith(f"http://127.0.0.1:{port}/call/")

            async with httpx.AsyncClient() as http:
                page = await http.get(link)
            assert page.status_code == 200 and "Start call" in page.text

            agent = emu.only_agent()
            emu.user_joined(agent.agent_id)
            emu.script(agent.agent_id, [("user", "I'm Noor, I teach chemistry."), ("assistant", "Nice, Noor!")])
            hangup = await fake.slash("hangup", ALICE)
            ended = await next_of_kind(fake, hangup, "followup", "edit")
            assert "Call ended" in ended["content"] and "3 lines" in ended["content"]
            fake.assert_no_invalid_requests()
        finally:
            os.kill(os.getpid(), signal.SIGTERM)
            assert await asyncio.wait_for(bot_task, timeout=15) == 0
            await fake.stop()
        assert emu.agent(agent.agent_id).status == "STOPPED"


async def test_commands_are_synced_only_when_their_definitions_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeDiscord()
    await fake.start()
    fake.patch(monkeypatch)
    port = free_port()
    try:
        async with running_emulator() as emu:
            settings = make_settings(
                tmp_path,
                agora={"api_base_url": emu.base_url},
                web={"port": port, "public_url": f"http://127.0.0.1:{port}"},
            )
            for start, expect_sync in enumerate((True, False), start=1):
                fake.commands.clear()
                task = asyncio.create_task(run_bot(settings))
                await eventually(lambda n=start: len(fake.identify_payloads) >= n)  # IDENTIFY follows setup_hook
                os.kill(os.getpid(), signal.SIGTERM)
                assert await asyncio.wait_for(task, timeout=15) == 0
                assert ("global" in fake.commands) is expect_sync
            fake.assert_no_invalid_requests()
    finally:
        await fake.stop()


async def test_sync_command_registers_commands_in_one_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeDiscord()
    await fake.start()
    fake.patch(monkeypatch)
    try:
        settings = make_settings(tmp_path)
        count = await sync_commands(settings, guild_id=int(fake.guild_id))
        synced = fake.commands[fake.guild_id]
        assert count == len(synced) and {c["name"] for c in synced} >= {"call", "memory", "settings"}
        admin = next(c for c in synced if c["name"] == "settings")
        assert int(admin["default_member_permissions"]) == 1 << 5  # Manage Server
        assert "global" not in fake.commands
        fake.assert_no_invalid_requests()
    finally:
        await fake.stop()
