"""`check` beside a running bot, as an admin troubleshooting a live problem runs it: it recognises the bot that
runs on its database (the bot's lock names it) and reports it running, with what its /healthz says, instead of
"web.host:web.port is already in use" as FAIL and "The bot cannot start". A second `run` says a bot already
runs. (Issue 39: Troubleshooting sent admins to `check`, which then reported the bot's own port as a failure.)"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from bot.__main__ import main
from standins.agora_emulator import running_emulator
from standins.discord_gateway import FakeDiscord
from standins.harness import free_port
from tests.e2e.test_rewrite_while_running import ROOT, environment


@contextmanager
def stand_ins_in_a_thread(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeDiscord, str]]:
    """The fake Discord and the Agora emulator on an event loop of their own, so `main()` (which runs its own
    loop) can be called here; discord.py in this process is pointed at the fake."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="stand-ins", daemon=True)
    thread.start()

    def on_loop(work: object) -> object:
        return asyncio.run_coroutine_threadsafe(work, loop).result(timeout=30)  # type: ignore[arg-type]

    fake = FakeDiscord()
    emulator = running_emulator()
    try:
        on_loop(fake.start())
        emu = on_loop(emulator.__aenter__())
        fake.patch(monkeypatch)
        yield fake, emu.base_url  # type: ignore[attr-defined]
    finally:
        on_loop(emulator.__aexit__(None, None, None))
        on_loop(fake.stop())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


def serving(port: int, bot: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert bot.poll() is None, log.read_text()
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).json()["status"] == "ok":
                return
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"the bot did not become healthy: {log.read_text()}")


def test_check_beside_a_running_bot_reports_it_running_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    database = tmp_path / "data" / "bot.db"
    with stand_ins_in_a_thread(monkeypatch) as (fake, agora_url):
        env = environment(tmp_path, port, agora_url, {"MEMORY_DATABASE_PATH": str(database)})
        log = tmp_path / "bot.log"
        with log.open("ab") as out:
            bot = subprocess.Popen(
                [sys.executable, "-m", "tests.e2e.bot_process", fake.base_url, fake.gateway_url],
                cwd=ROOT, env=env, stdout=out, stderr=out,
            )  # fmt: skip
        try:
            serving(port, bot, log)
            for name, value in env.items():  # the admin's shell: the same .env and config.toml
                monkeypatch.setenv(name, value)
            monkeypatch.chdir(tmp_path)

            status = main(["check"])
            report = capsys.readouterr().out
            assert "FAIL" not in report and "cannot start" not in report, report
            assert f"  running  memory-call-bot pid {bot.pid} on " in report
            web = report[report.index("Web server") :].splitlines()[1]
            assert web.startswith(f"  running  memory-call-bot pid {bot.pid} on "), web
            assert f"runs and answers on 127.0.0.1:{port}: /healthz says ok" in web
            last = report.strip().splitlines()[-1]
            assert last.startswith(f"The bot is running (memory-call-bot pid {bot.pid} on ")
            assert last.endswith("nothing above would stop it from starting again.")
            assert status == 0

            assert main(["run"]) == 1  # a second copy by mistake: it says which bot already runs
            said = capsys.readouterr().err.strip().splitlines()[-1]
            assert said.startswith(f"The bot cannot start: memory-call-bot pid {bot.pid} on ")
            assert f"already runs with these settings and answers on 127.0.0.1:{port}" in said
        finally:
            bot.terminate()
            assert bot.wait(timeout=30) == 0

        assert main(["check"]) == 0  # stopped: the lock's words stay in the file, but no lock goes with them
        report = capsys.readouterr().out
        assert "  running  " not in report and f"the call page server can listen on 127.0.0.1:{port}" in report
        assert report.strip().endswith("Ready to run.")
