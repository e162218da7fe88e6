"""Sharding: with `discord.shard_count` and `discord.shard_ids` a process identifies only its own shards (Discord
then sends it only their events and interactions); with neither set, one process runs everything, as before."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from bot.client import run_bot
from standins.agora_emulator import running_emulator
from standins.discord_gateway import FakeDiscord
from standins.harness import eventually, free_port, make_settings


@pytest.mark.parametrize(
    ("shards", "identified"),
    [({"shard_count": 4, "shard_ids": [1, 3]}, [[1, 4], [3, 4]]), ({}, [None])],
    ids=["two-of-four-shards", "unsharded"],
)
async def test_a_process_identifies_only_its_own_shards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shards: dict[str, object], identified: list[object]
) -> None:
    fake = FakeDiscord()
    await fake.start()
    fake.patch(monkeypatch)
    port = free_port()
    try:
        async with running_emulator() as emu:
            settings = make_settings(
                tmp_path,
                discord=shards,
                agora={"api_base_url": emu.base_url},
                web={"port": port, "public_url": f"http://127.0.0.1:{port}"},
            )
            task = asyncio.create_task(run_bot(settings))
            await eventually(lambda: len(fake.identify_payloads) >= len(identified))
            await asyncio.sleep(0.2)  # a wrongly configured bot would identify more shards by now
            os.kill(os.getpid(), signal.SIGTERM)
            assert await asyncio.wait_for(task, timeout=15) == 0
            assert sorted((p.get("shard") for p in fake.identify_payloads), key=str) == identified
            fake.assert_no_invalid_requests()
    finally:
        await fake.stop()
