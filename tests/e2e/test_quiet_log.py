"""What the operator reads in the log of a real bot process through one call and a stop: no line that reads like a
failure when nothing failed (discord.py's missing voice libraries, the Guilds intent, "looked after by another bot
process" after a call the process itself ended), the web server's start once, and the stop said. A fresh process,
so discord.py's once-per-process warnings would show."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bot.memory.postcall import PostCallProcessor
from bot.store.repository import StorageFull
from bot.store.sqlite import SqliteStore
from standins.agora_emulator import running_emulator
from standins.discord_gateway import FakeDiscord
from standins.harness import eventually, free_port
from tests.e2e.test_rewrite_while_running import ROOT, environment, start_bot, stop
from tests.e2e.test_smoke_real_entry_point import next_of_kind

MEMBER = 4242


async def test_one_call_and_a_stop_log_no_false_alarm(tmp_path: Path) -> None:
    database = tmp_path / "bot.db"
    store = SqliteStore(database)
    await store.open()
    await store.set_consent(MEMBER, True, time.time())
    await store.close()
    fake = FakeDiscord()
    await fake.start()
    port = free_port()
    try:
        async with running_emulator() as emu:
            env = environment(tmp_path, port, emu.base_url, {"MEMORY_DATABASE_PATH": str(database)})
            checkpoint_often(Path(env["BOT_CONFIG"]))
            bot = await start_bot(tmp_path, env, fake, port)
            try:
                token = await fake.slash("call", MEMBER)
                await next_of_kind(fake, token, "followup")
                await eventually(lambda: _one_agent(emu.agents), within=15)
                agent = emu.only_agent().agent_id
                emu.user_joined(agent)
                emu.script(agent, [("user", "hello there"), ("assistant", "hi")])
                hangup = await fake.slash("hangup", MEMBER)
                assert "Call ended" in (await next_of_kind(fake, hangup, "followup", "edit"))["content"]
                await asyncio.sleep(1.0)  # the ended call's checkpoint loop wakes up (every 0.3 s) and stops
            finally:
                await stop(bot)
    finally:
        await fake.stop()

    log = (tmp_path / "bot.log").read_text()
    for alarm in ("PyNaCl", "davey", "Guilds intent", "looked after by another bot process", "Traceback"):
        assert alarm not in log, f"{alarm!r} in the log:\n{log}"
    assert log.count("listening on") == 1, log
    assert "SIGTERM received: stopping (active calls are saved first)" in log
    assert log.rstrip().splitlines()[-1].endswith("stopped"), log


def checkpoint_often(config: Path) -> None:
    config.write_text(config.read_text().replace("[agora]\n", "[agora]\ncheckpoint_seconds = 0.3\n"))


async def _one_agent(agents: dict[str, object]) -> bool:
    return len(agents) == 1


class FullStore:
    """Every attempt to take a job fails as on a full disk."""

    def __init__(self) -> None:
        self.attempts = 0

    async def claim_job(self, at: float, lease_seconds: float) -> None:
        self.attempts += 1
        raise StorageFull("database or disk is full")


async def test_the_post_call_queue_backs_off_on_a_full_disk(caplog: pytest.LogCaptureFixture) -> None:
    """It used to try (and log a warning with a traceback) every second for as long as the disk was full."""
    store = FullStore()
    queue = PostCallProcessor(store, None)  # type: ignore[arg-type]
    stop_now = asyncio.Event()
    with caplog.at_level(logging.INFO, logger="bot.memory.postcall"):
        task = asyncio.create_task(queue.run(stop_now, poll_seconds=0.01))
        await asyncio.sleep(0.6)  # 60 polls without backing off
        stop_now.set()
        await task
    assert 5 <= store.attempts <= 9  # 0.01, 0.02, 0.04 ... s apart
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "the database is full" in warnings[0].getMessage()
    assert warnings[0].exc_info is None  # one line, no traceback


FAILING_DISK = """
import logging, resource, signal, sqlite3, sys, time
from pathlib import Path
from bot.store.sqlite.base import WalCheckpoints
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(message)s")
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the size limit fails (EFBIG), as a full disk refuses it
database = Path(sys.argv[1])
writer = sqlite3.connect(database, isolation_level=None)
writer.execute("PRAGMA journal_mode = WAL")
writer.execute("PRAGMA wal_autocheckpoint = 0")
writer.execute("CREATE TABLE t (x BLOB)")
writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
for _ in range(50):
    writer.execute("INSERT INTO t VALUES (randomblob(4000))")  # in the WAL only: the checkpoints must copy it
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (database.stat().st_size, hard))  # no room for the database to grow
checkpoints = WalCheckpoints(database, 0.02, 1000)
checkpoints.start()
time.sleep(0.5)  # 25 checkpoints that fail
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # room again
time.sleep(0.3)
checkpoints.stop()
checkpoints.join()
print("rows", sqlite3.connect(f"file:{database}?mode=ro", uri=True).execute("SELECT count(*) FROM t").fetchone()[0])
"""


def test_the_wal_checkpoints_log_a_failing_disk_once_per_episode(tmp_path: Path) -> None:
    """They logged "checkpointing … failed (database or disk is full); trying again in 1 s" every second for as long
    as the disk was full (seen on a real full disk beside a bot that had just stored a call)."""
    ran = subprocess.run(
        [sys.executable, "-c", FAILING_DISK, str(tmp_path / "bot.db")],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0].startswith(f"WARNING checkpointing {tmp_path / 'bot.db'} failed (")
    assert lines[0].endswith("); trying again every 0.02 s until it works")
    assert lines[1:] == [f"INFO checkpointing {tmp_path / 'bot.db'} works again", "rows 50"]
