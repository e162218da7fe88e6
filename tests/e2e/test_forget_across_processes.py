"""A forget in one process reaches the key cache of every other (issue 33, finding 1).

The real bot runs in a process of its own and caches the member's key; `python -m bot forget-user` runs from the
shell, a second process on the same memory database and key store (SQLite files, or two PostgreSQL databases).
The member then chats and calls again in the running bot. It used to keep sealing their new lines with the key
the shell had deleted, so the rows ended up under a key nobody has and every later read of the member failed.
Now the bot makes a new key for them: every row of theirs opens with the key in the key store, none with the
deleted one, and /memory, /chat and /call answer as for a new member."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from bot.i18n import english
from bot.keys.crypto import DecryptionFailed, MemberCipher, generate_master_key_text, parse_master_key, unwrap_data_key
from bot.keys.sealed import unseal
from standins.agora_emulator import (
    TEST_APP_CERTIFICATE,
    TEST_APP_ID,
    TEST_CUSTOMER_ID,
    TEST_CUSTOMER_SECRET,
    running_emulator,
)
from standins.discord_gateway import FakeDiscord
from standins.harness import free_port
from standins.llm_server import running_fake_llm
from standins.llm_server.errors import no_scripted_reply
from tests.e2e.test_live_recall_kill import ROOT, spawn_bot
from tests.e2e.test_smoke_real_entry_point import find_message_with, next_of_kind

SOMETHING_WENT_WRONG = english()("errors.something_went_wrong")

ALICE = 330033
MASTER = generate_master_key_text()


class Databases:
    """Where the processes keep memory and keys, read directly by the test (no cache of its own)."""

    def __init__(self, tmp_path: Path, new_postgres_database: Callable[[], str] | None):
        self.db, self.keys = tmp_path / "bot.db", tmp_path / "bot.keys.db"
        self.urls = None if new_postgres_database is None else (new_postgres_database(), new_postgres_database())

    def settings(self) -> tuple[str, dict[str, str]]:
        if self.urls is None:
            return f'database_path = "{self.db}"\n', {}
        return "", {"MEMORY_DATABASE_URL": self.urls[0], "MEMORY_KEY_STORE_URL": self.urls[1]}

    async def _fetch(self, memory: bool, sql: str) -> list[tuple[object, ...]]:
        if self.urls is None:
            with sqlite3.connect(self.db if memory else self.keys) as db:
                return db.execute(sql.replace("$1", "?"), (ALICE,)).fetchall()
        conn = await asyncpg.connect(self.urls[0 if memory else 1])
        try:
            return [tuple(row) for row in await conn.fetch(sql, ALICE)]
        finally:
            await conn.close()

    async def wrapped_key(self) -> bytes | None:
        rows = await self._fetch(False, "SELECT wrapped FROM member_keys WHERE user_id = $1")
        return bytes(rows[0][0]) if rows else None  # type: ignore[arg-type]

    async def lines(self) -> list[str]:
        return [str(row[0]) for row in await self._fetch(True, "SELECT content FROM turns WHERE user_id = $1")]


def bot_environment(tmp_path: Path, where: Databases, agora_url: str, llm_url: str, port: int) -> dict[str, str]:
    """The environment (and config file) the bot and the shell's commands share: member encryption on, the
    memory and keys where ``where`` keeps them, live recall off."""
    memory_lines, memory_env = where.settings()
    config = tmp_path / "config.toml"
    config.write_text(
        "[discord]\ncall_cooldown_seconds = 0\n"
        f'[agora]\napi_base_url = "{agora_url}"\napp_id = "{TEST_APP_ID}"\ncheckpoint_seconds = 3600\n'
        f'[web]\nport = {port}\npublic_url = "http://127.0.0.1:{port}"\n'
        f'[llm]\nbase_url = "{llm_url}"\nmodel = "fake-model"\ntimeout_seconds = 10\n'
        f"[memory]\n{memory_lines}live_recall = false\n"
        "[calls]\nshutdown_grace_seconds = 1\n"
    )
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("MEMORY_")},
        **memory_env,
        "BOT_CONFIG": str(config),
        "MEMORY_MASTER_KEY": MASTER,
        "DISCORD_TOKEN": "fake-token",
        "AGORA_APP_CERTIFICATE": TEST_APP_CERTIFICATE,
        "AGORA_CUSTOMER_ID": TEST_CUSTOMER_ID,
        "AGORA_CUSTOMER_SECRET": TEST_CUSTOMER_SECRET,
        "WEB_LINK_SIGNING_KEY": "forget-test-link-key",
        "PYTHONUNBUFFERED": "1",
    }


def cipher_of(wrapped: bytes) -> MemberCipher:
    return MemberCipher(ALICE, unwrap_data_key(parse_master_key(MASTER), ALICE, wrapped))


def opens(cipher: MemberCipher, sealed: str) -> str | None:
    try:
        return unseal(cipher, "turns.content", sealed)
    except DecryptionFailed:
        return None


async def call_and_hang_up(fake: FakeDiscord, emu: object, said: str, *, consent: bool) -> None:
    token = await fake.slash("call", ALICE)
    if consent:
        await next_of_kind(fake, token, "followup", "edit")
        message, custom_id = find_message_with(fake, "consent:remember:call:")
        card = await next_of_kind(fake, await fake.click(message, custom_id, ALICE), "edit")
    else:
        card = await next_of_kind(fake, token, "followup", "edit")
    assert SOMETHING_WENT_WRONG not in str(card.get("content")), card
    agent = max(emu.agents.values(), key=lambda a: a.sequence)  # type: ignore[attr-defined]
    assert "4417" not in str(agent.system_messages), "nothing forgotten reaches the agent"
    emu.user_joined(agent.agent_id)  # type: ignore[attr-defined]
    emu.script(agent.agent_id, [("user", said), ("assistant", "Noted.")])  # type: ignore[attr-defined]
    ended = await next_of_kind(fake, await fake.slash("hangup", ALICE), "followup", "edit")
    assert "Call ended" in ended["content"], ended


async def forget_from_the_shell(env: dict[str, str]) -> None:
    shell = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "forget-user",
        str(ALICE),
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await shell.communicate()
    assert shell.returncode == 0, out.decode()
    assert f"Forgot user {ALICE}" in out.decode()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_a_forget_from_the_shell_reaches_the_running_bots_key_cache(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    where = Databases(tmp_path, request.getfixturevalue("new_postgres_database") if backend == "postgresql" else None)
    fake = FakeDiscord()
    await fake.start()
    port = free_port()
    log = tmp_path / "bot.log"
    bot: asyncio.subprocess.Process | None = None
    async with running_emulator() as emu, running_fake_llm() as llm:
        env = bot_environment(tmp_path, where, emu.base_url, llm.base_url, port)
        try:
            bot = await spawn_bot(fake, env, log)
            await fake.wait_until_ready(timeout=30)
            await call_and_hang_up(fake, emu, "My locker code is 4417.", consent=True)
            deleted = await where.wrapped_key()
            assert deleted is not None and len(await where.lines()) == 3, log.read_text()[-3000:]

            await forget_from_the_shell(env)
            assert await where.wrapped_key() is None and await where.lines() == []

            llm.set_responder(answer_only_about_lisbon)  # the first call's post-call job may ask meanwhile
            chat = await fake.slash("chat", ALICE, {"message": "I moved to Lisbon last month."})
            await next_of_kind(fake, chat, "followup")  # asked again: the forget removed the memory choice
            message, custom_id = find_message_with(fake, "consent:remember:chat:")
            click = await fake.click(message, custom_id, ALICE)
            replies = [await next_of_kind(fake, click, "followup", "edit") for _ in range(2)]
            assert any("Lisbon is lovely" in str(r.get("content")) for r in replies), replies

            await call_and_hang_up(fake, emu, "My bike is the green one.", consent=False)

            shown = await next_of_kind(fake, await fake.slash("memory", ALICE), "followup", "edit")
            assert SOMETHING_WENT_WRONG not in str(shown.get("content")) and shown.get("embeds"), shown
            assert "4417" not in str(shown), "the forgotten memory is gone from /memory"
        finally:
            if bot is not None and bot.returncode is None:
                bot.send_signal(signal.SIGTERM)
                await asyncio.wait_for(bot.wait(), timeout=20)
            await fake.stop()

    current = await where.wrapped_key()
    assert current is not None and current != deleted, "the bot made the member a new key after the forget"
    stored = await where.lines()
    assert len(stored) >= 5, log.read_text()[-3000:]
    opened = [opens(cipher_of(current), line) for line in stored]
    assert None not in opened, "every row of the member opens with the key in the key store"
    assert [opens(cipher_of(deleted), line) for line in stored] == [None] * len(stored), "none with the deleted one"
    assert "I moved to Lisbon last month." in opened and "My bike is the green one." in opened
    assert not [line for line in opened if line and "4417" in line]


def answer_only_about_lisbon(body: dict[str, Any]) -> str:
    """The chat's answer, for the request that carries the member's message; any other request (the first call's
    post-call extraction, whenever its job runs) gets the stand-in's default: a 500."""
    if "I moved to Lisbon last month." in str(body["messages"][-1].get("content")):
        return "Lisbon is lovely in spring."
    return no_scripted_reply(body)
