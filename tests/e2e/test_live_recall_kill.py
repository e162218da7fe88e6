"""SIGKILL the real bot process mid-call: with live recall, every user line that reached the bot and every reply
that finished streaming is in the database after the restart, without Agora's history API or its webhook."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from bot.store.sqlite import SqliteStore
from standins.agora_emulator import (
    TEST_APP_CERTIFICATE,
    TEST_APP_ID,
    TEST_CUSTOMER_ID,
    TEST_CUSTOMER_SECRET,
    running_emulator,
)
from standins.discord_gateway import FakeDiscord
from standins.harness import eventually, free_port
from standins.llm_server import running_fake_llm
from tests.e2e.test_smoke_real_entry_point import find_message_with, next_of_kind

ALICE = 515151
ROOT = Path(__file__).resolve().parents[2]


async def spawn_bot(fake: FakeDiscord, env: dict[str, str], log: Path) -> asyncio.subprocess.Process:
    with log.open("ab") as out:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.e2e.bot_process",
            fake.base_url,
            fake.gateway_url,
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=out,
        )


async def stored_lines(db: Path, user_id: int) -> list[tuple[str, str]]:
    """The lines of the member's open call, read from the database file the bot process writes."""
    store = SqliteStore(db)
    await store.open()
    try:
        call = await store.open_call_for_user(user_id)
        assert call is not None, "the call is still active after the restart"
        return [(t.role, t.content) for t in await store.call_turns(call.call_id)]
    finally:
        await store.close()


async def test_sigkill_mid_call_loses_no_line_that_reached_the_bot(tmp_path: Path) -> None:
    fake = FakeDiscord()
    await fake.start()
    port = free_port()
    db = tmp_path / "bot.db"
    log = tmp_path / "bot.log"
    bot: asyncio.subprocess.Process | None = None
    async with running_emulator() as emu, running_fake_llm() as llm:
        config = tmp_path / "config.toml"
        config.write_text(
            f'[agora]\napi_base_url = "{emu.base_url}"\napp_id = "{TEST_APP_ID}"\ncheckpoint_seconds = 3600\n'
            f'[web]\nport = {port}\npublic_url = "http://127.0.0.1:{port}"\n'
            f'[llm]\nbase_url = "{llm.base_url}"\nmodel = "fake-model"\ntimeout_seconds = 10\n'
            f'[memory]\ndatabase_path = "{db}"\n'
            "[calls]\nshutdown_grace_seconds = 1\n"
        )
        env = {
            **os.environ,
            "BOT_CONFIG": str(config),
            "DISCORD_TOKEN": "fake-token",
            "AGORA_APP_CERTIFICATE": TEST_APP_CERTIFICATE,
            "AGORA_CUSTOMER_ID": TEST_CUSTOMER_ID,
            "AGORA_CUSTOMER_SECRET": TEST_CUSTOMER_SECRET,
            "WEB_LINK_SIGNING_KEY": "kill-test-link-key",
            "PYTHONUNBUFFERED": "1",
        }
        try:
            bot = await spawn_bot(fake, env, log)
            await fake.wait_until_ready(timeout=30)
            token = await fake.slash("call", ALICE)
            await next_of_kind(fake, token, "followup", "edit")
            message, custom_id = find_message_with(fake, "consent:remember:")
            click = await fake.click(message, custom_id, ALICE)
            await next_of_kind(fake, click, "edit")
            agent = emu.only_agent()
            emu.user_joined(agent.agent_id)

            llm.queue_reply("Nice to meet you, Noor.")
            llm.queue_reply("Good luck with the exam week!")
            for said in ("I'm Noor and I teach chemistry.", "My students have exams next week."):
                assert (await emu.user_says(agent.agent_id, said)).outcome == "ok"

            # The third reply streams slowly; the bot is killed after the line reached it, mid-reply.
            llm.stream_chunk_size = 3
            llm.stream_delay = 0.2
            llm.queue_reply("That reminds me of something you said about titration labs a while back.")
            third = asyncio.create_task(emu.user_says(agent.agent_id, "Remind me what I said about labs."))
            await eventually(lambda: llm.streams_started >= 3, within=10)
            bot.send_signal(signal.SIGKILL)
            await bot.wait()
            assert (await third).outcome == "failed"
            assert emu.count_calls("history") == 0 and emu.delivered == [], "nothing came from the history API"
            after_kill = await stored_lines(db, ALICE)

            bot = await spawn_bot(fake, env, log)  # the restart
            await eventually(lambda: len(fake.identify_payloads) >= 2, within=30)
            llm.stream_delay = 0.0
            llm.queue_reply("Welcome back.")
            assert (await emu.user_says(agent.agent_id, "Are you still there?")).outcome == "ok", "the call goes on"
            lines = await stored_lines(db, ALICE)
        finally:
            if bot is not None and bot.returncode is None:
                bot.send_signal(signal.SIGTERM)
                await asyncio.wait_for(bot.wait(), timeout=20)
            await fake.stop()
    greeting = agent.conversation[0].content
    assert after_kill == [
        ("assistant", greeting),
        ("user", "I'm Noor and I teach chemistry."),
        ("assistant", "Nice to meet you, Noor."),
        ("user", "My students have exams next week."),
        ("assistant", "Good luck with the exam week!"),
        ("user", "Remind me what I said about labs."),
    ], (log.read_text())[-3000:]
    assert lines[:6] == after_kill, "the restarted bot keeps them"
    assert ("user", "Are you still there?") in lines and ("assistant", "Welcome back.") in lines
