"""A forget killed at any step leaves no key in use that it destroyed (issue 38, item 1).

The real bot runs in a process of its own, caches the member's key, and keeps writing their lines as they chat.
`python -m bot forget-user` runs from the shell against the same memory database and key store (SQLite files, or
two PostgreSQL databases); it stops at one of the forget's steps (``bot.memory.forget_all.PAUSE_ENV``), the member
chats meanwhile, and the test SIGKILLs it there; the member chats again. It used to be killable after the key was
deleted and before the rows and the generation moved: the bot kept sealing the member's new lines with the deleted
key, unreadable for good, and `check` said ready. Now nothing is sealed under a destroyed key at any step, `check`
finishes the interrupted forget and says so, and the member's next lines are stored under a new key."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from bot.memory.forget_all import PAUSE_ENV, STEPS
from standins.agora_emulator import running_emulator
from standins.discord_gateway import FakeDiscord
from standins.harness import free_port
from standins.llm_server import running_fake_llm
from standins.llm_server.errors import no_scripted_reply
from tests.e2e.test_forget_across_processes import (
    ALICE,
    SOMETHING_WENT_WRONG,
    Databases,
    bot_environment,
    cipher_of,
    opens,
)
from tests.e2e.test_live_recall_kill import ROOT, spawn_bot
from tests.e2e.test_smoke_real_entry_point import find_message_with, next_of_kind

BEFORE = "My locker code is 4417."
WHILE_PAUSED = "I am learning the cello."
AFTER_KILL = "My sister lives in Porto."
AFTER_CHECK = "I moved to Lisbon last month."
SAID = (BEFORE, WHILE_PAUSED, AFTER_KILL, AFTER_CHECK)
REPLY = "Noted, thank you."


class Watched(Databases):
    async def forget_under_way(self) -> bool:
        under_way = "SELECT 1 FROM memory_fences WHERE user_id = $1 AND forget_begun IS NOT NULL"
        return bool(await self._fetch(True, under_way))


def answer_the_member(body: dict[str, Any]) -> str:
    """The chat's answer to each of the member's messages; anything else gets the stand-in's default (a 500)."""
    if str(body["messages"][-1].get("content")) in SAID:
        return REPLY
    return no_scripted_reply(body)


async def chat(fake: FakeDiscord, said: str) -> None:
    """The member's /chat, through the memory choice when the bot asks it (their first message, and the first after
    a completed forget); the member reads the answer either way."""
    token = await fake.slash("chat", ALICE, {"message": said})
    answers = [await next_of_kind(fake, token, "followup", "edit")]
    if "consent:remember:chat:" in str(answers[0]):
        message, custom_id = find_message_with(fake, "consent:remember:chat:")
        token = await fake.click(message, custom_id, ALICE)
        answers = [await next_of_kind(fake, token, "followup", "edit")]
    while REPLY not in str(answers[-1].get("content")):
        assert SOMETHING_WENT_WRONG not in str(answers[-1].get("content")), answers
        answers.append(await next_of_kind(fake, token, "followup", "edit"))


async def forget_until_paused(env: dict[str, str], step: str) -> asyncio.subprocess.Process:
    """`forget-user` started from the shell, once it has committed ``step`` and stopped there."""
    shell = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "forget-user",
        str(ALICE),
        cwd=ROOT,
        env={**env, PAUSE_ENV: step},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert shell.stderr is not None
    seen = []
    async with asyncio.timeout(60):
        while (line := (await shell.stderr.readline()).decode()) != f"forget paused at {step}\n":
            assert line, f"forget-user ended before {step}: {''.join(seen)}"
            seen.append(line)
    return shell


async def check(env: dict[str, str]) -> str:
    """What `python -m bot check` prints (without a Discord token: the fake Discord is not the real API)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "check",
        cwd=ROOT,
        env={k: v for k, v in env.items() if k != "DISCORD_TOKEN"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await process.communicate()
    return out.decode()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.parametrize("step", STEPS)
async def test_a_forget_killed_at_any_step_leaves_no_line_under_a_destroyed_key(
    tmp_path: Path, backend: str, step: str, request: pytest.FixtureRequest
) -> None:
    where = Watched(tmp_path, request.getfixturevalue("new_postgres_database") if backend == "postgresql" else None)
    fake = FakeDiscord()
    await fake.start()
    port = free_port()
    log = tmp_path / "bot.log"
    bot: asyncio.subprocess.Process | None = None
    async with running_emulator() as emu, running_fake_llm() as llm:
        env = bot_environment(tmp_path, where, emu.base_url, llm.base_url, port)
        llm.set_responder(answer_the_member)
        try:
            bot = await spawn_bot(fake, env, log)
            await fake.wait_until_ready(timeout=30)
            await chat(fake, BEFORE)
            destroyed = await where.wrapped_key()
            assert destroyed is not None and len(await where.lines()) == 2, log.read_text()[-3000:]

            shell = await forget_until_paused(env, step)
            await chat(fake, WHILE_PAUSED)
            shell.send_signal(signal.SIGKILL)
            assert await shell.wait() == -signal.SIGKILL
            await chat(fake, AFTER_KILL)

            if await where.wrapped_key() != destroyed:
                stored = [opens(cipher_of(destroyed), line) for line in await where.lines()]
                assert not {WHILE_PAUSED, AFTER_KILL} & set(stored), (
                    "nothing the member said once the forget began is sealed under the key it deleted"
                )

            said = await check(env)
            assert "FAIL     the forget" not in said, said
            if "finished the forget of member(s) 330033" in said:
                assert await where.wrapped_key() is None and await where.lines() == [], "as check says"
            elif step != "rows_deleted":
                assert "finishing the forget of member 330033" in log.read_text(), (
                    f"neither check nor the running bot finished the forget killed at {step}: {said}"
                )
            assert not await where.forget_under_way()

            await chat(fake, AFTER_CHECK)
        finally:
            if bot is not None and bot.returncode is None:
                bot.send_signal(signal.SIGTERM)
                await asyncio.wait_for(bot.wait(), timeout=20)
            await fake.stop()

    current = await where.wrapped_key()
    assert current is not None and current != destroyed, "the bot made the member a new key after the forget"
    lines = await where.lines()
    opened = [opens(cipher_of(current), line) for line in lines]
    assert None not in opened, "every line the member has opens with the key in the key store"
    assert [opens(cipher_of(destroyed), line) for line in lines] == [None] * len(lines), "none with the deleted one"
    assert BEFORE not in opened and AFTER_CHECK in opened, opened
