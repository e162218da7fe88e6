"""The bot's owner answers an export or deletion request from a member who left every server the bot is in (so the
member cannot run /forget): `/member-data export` and `/member-data forget` by user ID, the forget after a
confirmation, through the fake Discord against the real bot. Only the application's owner, or an admin or
developer of the team that owns it, may use them; a server admin who is neither is refused, and nothing goes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from bot.app import open_services
from bot.client import run_bot
from bot.config import Settings
from bot.memory.importer import import_conversations, parse_conversations
from standins.agora_emulator import running_emulator
from standins.discord_gateway import FakeDiscord
from standins.harness import free_port, make_settings
from tests.e2e.test_smoke_real_entry_point import find_message_with, next_of_kind

LUCIA = 733333333333333301  # left every server: only the owner can act for her
BOB = 733333333333333302  # an admin of a server, not the bot's owner
ADMINISTRATOR = "8"
SAID = "My dog Rufus is afraid of thunder."


async def seed(settings: Settings) -> None:
    conversation = {"started_at": "2026-11-01T10:00:00Z", "messages": [{"role": "user", "content": SAID}]}
    async with open_services(settings) as services:
        await import_conversations(services.store, services.memory, LUCIA, parse_conversations([conversation]))


async def stored_about(settings: Settings, user_id: int) -> str:
    async with open_services(settings) as services:
        return json.dumps(await services.memory.export(user_id))


@asynccontextmanager
async def running_bot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeDiscord) -> AsyncIterator[Settings]:
    await fake.start()
    fake.patch(monkeypatch)
    port = free_port()
    async with running_emulator() as emu:
        settings = make_settings(
            tmp_path,
            agora={"api_base_url": emu.base_url},
            web={"port": port, "public_url": f"http://127.0.0.1:{port}"},
        )
        await seed(settings)
        bot_task = asyncio.create_task(run_bot(settings))
        try:
            await fake.wait_until_ready(timeout=15)
            synced = next(c for c in fake.commands["global"] if c["name"] == "member-data")
            assert str(synced["default_member_permissions"]) == ADMINISTRATOR  # hidden from members who are not admins
            yield settings
            fake.assert_no_invalid_requests()
        finally:
            os.kill(os.getpid(), signal.SIGTERM)
            assert await asyncio.wait_for(bot_task, timeout=15) == 0
            await fake.stop()


async def answer(fake: FakeDiscord, user_id: int | str, subcommand: str, member: str) -> dict:
    token = await fake.slash("member-data", user_id, {"member": member}, subcommand, ADMINISTRATOR)
    assert (await fake.next_response(token))[1]["data"]["flags"] == 64  # ephemeral "thinking…" first
    return await next_of_kind(fake, token, "followup", "edit")


async def test_the_application_owner_exports_then_forgets_a_member_by_id_after_confirming(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeDiscord()
    async with running_bot(tmp_path, monkeypatch, fake) as settings:
        refused = await answer(fake, BOB, "forget", str(LUCIA))
        assert refused["content"] == "Only the bot's owner can use this command." and refused["flags"] == 64

        token = await fake.slash("member-data", fake.owner_id, {"member": str(LUCIA)}, "export", ADMINISTRATOR)
        exported = await next_of_kind(fake, token, "followup")
        assert exported["content"] == f"Everything stored about member `{LUCIA}`:" and exported["flags"] == 64
        [file] = fake.files[token]
        assert file.filename == f"memory-{LUCIA}.json"
        data = json.loads(file.data)
        assert data["user_id"] == str(LUCIA) and data["calls"][0]["turns"][0]["content"] == SAID

        wrong = await answer(fake, fake.owner_id, "forget", "lucia#0001")
        assert wrong["content"].startswith("`lucia#0001` is not a Discord user ID.")

        question = await answer(fake, fake.owner_id, "forget", str(LUCIA))
        assert question["content"].startswith(f"**Forget member `{LUCIA}`?**")
        assert "(0 facts, 1 call or chat)" in question["content"] and "It can't be undone." in question["content"]
        message, custom_id = find_message_with(fake, "owner:forget:")
        assert custom_id == f"owner:forget:{fake.owner_id}:{LUCIA}"
        assert SAID in await stored_about(settings, LUCIA), "nothing goes before the confirmation"
        with pytest.raises(PermissionError):  # the confirmation is the owner's alone (ephemeral)
            await fake.click(message, custom_id, BOB)

        click = await fake.click(message, custom_id, fake.owner_id)
        done = await next_of_kind(fake, click, "edit")
        assert done["content"] == f"Forgot member `{LUCIA}`: 1 call, 0 chats, 1 line, 0 facts."
        assert done["components"] == []
        exported_after = json.loads(await stored_about(settings, LUCIA))
        assert exported_after["calls"] == [] and SAID not in json.dumps(exported_after)


async def test_a_team_developer_may_forget_a_member_and_a_read_only_member_may_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeDiscord()
    carol, dave = 733333333333333303, 733333333333333304
    fake.team_roles = {str(carol): "developer", str(dave): "read_only"}
    async with running_bot(tmp_path, monkeypatch, fake) as settings:
        for outsider in (dave, fake.owner_id):  # read-only, and the user who owned the app before the team
            refused = await answer(fake, outsider, "forget", str(LUCIA))
            assert refused["content"] == "Only the bot's owner can use this command."
        question = await answer(fake, carol, "forget", str(LUCIA))
        message, custom_id = find_message_with(fake, "owner:forget:")
        cancel = await fake.click(message, f"forget:cancel:{carol}", carol)
        assert (await next_of_kind(fake, cancel, "callback"))["data"]["content"] == "Cancelled: nothing was forgotten."
        assert SAID in await stored_about(settings, LUCIA)

        question = await answer(fake, carol, "forget", str(LUCIA))
        assert question["content"].startswith(f"**Forget member `{LUCIA}`?**")
        message, custom_id = find_message_with(fake, "owner:forget:")
        done = await next_of_kind(fake, await fake.click(message, custom_id, carol), "edit")
        assert done["content"].startswith(f"Forgot member `{LUCIA}`: 1 call")
        assert SAID not in await stored_about(settings, LUCIA)
