"""SIGKILL the real bot mid-call; the member says more and leaves; the agent stops on its idle timeout and every
resend of Agora's webhooks meets a closed port. The restarted bot takes the call over, keeps the lines it had
stored, and tells the member on their call card how many things they said could not be saved (issue 33,
finding 4)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from bot.store.models import CallRecord
from bot.store.sqlite import SqliteStore
from standins.agora_emulator import (
    TEST_APP_CERTIFICATE,
    TEST_APP_ID,
    TEST_CUSTOMER_ID,
    TEST_CUSTOMER_SECRET,
    TEST_WEBHOOK_SECRET,
    running_emulator,
)
from standins.discord_gateway import FakeDiscord
from standins.harness import eventually, free_port
from tests.e2e.test_live_recall_kill import spawn_bot
from tests.e2e.test_smoke_real_entry_point import find_message_with, next_of_kind

ALICE = 626262
BEFORE = [("user", "My dog is called Biscuit."), ("assistant", "Biscuit is a lovely name!")]
DURING = [
    ("user", "I start a new job on Monday."),
    ("assistant", "Congratulations!"),
    ("user", "It is at the observatory."),
    ("assistant", "That sounds wonderful."),
]


async def read_call(db: Path, call_id: str) -> tuple[CallRecord | None, list[tuple[str, str]]]:
    """The call's row and lines, read from the database file the bot process writes."""
    store = SqliteStore(db)
    await store.open()
    try:
        call = await store.get_call(call_id)
        return call, [(t.role, t.content) for t in await store.call_turns(call_id)]
    finally:
        await store.close()


async def test_a_call_that_ended_while_the_bot_was_killed_reports_what_could_not_be_saved(tmp_path: Path) -> None:
    fake = FakeDiscord()
    await fake.start()
    port = free_port()
    db = tmp_path / "bot.db"
    log = tmp_path / "bot.log"
    bot: asyncio.subprocess.Process | None = None
    async with running_emulator(webhook_url=f"http://127.0.0.1:{port}/agora/webhook") as emu:
        config = tmp_path / "config.toml"
        config.write_text(
            f'[agora]\napi_base_url = "{emu.base_url}"\napp_id = "{TEST_APP_ID}"\ncheckpoint_seconds = 1\n'
            f'[web]\nport = {port}\npublic_url = "http://127.0.0.1:{port}"\n'
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
            "AGORA_WEBHOOK_SECRET": TEST_WEBHOOK_SECRET,
            "WEB_LINK_SIGNING_KEY": "down-test-link-key",
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
            call_id = agent.labels["call_id"]
            emu.user_joined(agent.agent_id)
            greeting = agent.conversation[0].content
            emu.script(agent.agent_id, BEFORE)

            async def checkpointed() -> bool:
                return (await read_call(db, call_id))[1] == [("assistant", greeting), *BEFORE]

            await eventually(checkpointed, within=15)
            bot.send_signal(signal.SIGKILL)
            await bot.wait()

            emu.script(agent.agent_id, DURING)
            emu.user_left(agent.agent_id)
            emu.advance(31)
            assert agent.status == "STOPPED"
            await emu.wait_webhooks_idle()
            lost = [e["eventType"] for e in emu.undelivered]
            assert 103 in lost and 102 in lost, "every resend of the history webhook met the dead bot"

            bot = await spawn_bot(fake, env, log)  # the restart
            await eventually(lambda: len(fake.identify_payloads) >= 2, within=30)

            async def ended() -> bool:
                call, _lines = await read_call(db, call_id)
                return call is not None and call.state == "ended"

            await eventually(ended, within=30)  # once the killed process's lease ran out
            call, lines = await read_call(db, call_id)
            wanted = "2 things you said while the bot was offline could not be saved."
            await eventually(lambda: any(wanted in str(m.get("content")) for m in fake.messages.values()), within=15)
        finally:
            if bot is not None and bot.returncode is None:
                bot.send_signal(signal.SIGTERM)
                await asyncio.wait_for(bot.wait(), timeout=20)
            await fake.stop()
    assert call is not None and (call.end_reason, call.lines_lost) == ("idle_timeout", 2), log.read_text()[-3000:]
    assert lines == [("assistant", greeting), *BEFORE], "what was stored before the kill is kept, once"
    assert emu.count_calls("turns", 200) == 1
    assert "2 things the member said were never stored" in log.read_text()
