"""A second bot process configured with the port another one uses stops with a clear message before it touches
any call (it used to print a traceback after checkpointing the other process's calls)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.app import open_services
from bot.client import run_bot
from bot.doctor import StartupProblem
from standins.agora_emulator import running_emulator
from standins.discord_gateway import FakeDiscord
from standins.harness import free_port, make_settings


async def test_second_process_on_the_same_port_stops_clearly_without_touching_calls(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
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
                memory={"database_url": postgres_url},
            )
            async with open_services(settings, full=True) as first:
                await first.start_background()
                assert first.calls is not None
                await first.store.set_consent(5, True, 1.0)
                started = await first.calls.start(user_id=5, guild_id=None)
                before = await first.store.get_call(started.call_id)
                history_reads = emu.count_calls("history")

                with pytest.raises(StartupProblem, match=rf"web.port {port} on 127.0.0.1 is already in use"):
                    await run_bot(settings)  # `python -m bot run` prints the one line and exits non-zero
                assert emu.count_calls("history") == history_reads, "the second process read no call's history"
                assert await first.store.get_call(started.call_id) == before, "nor changed the call"
    finally:
        await fake.stop()
