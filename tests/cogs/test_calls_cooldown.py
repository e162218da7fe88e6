"""The /call cooldown (its own module: the services fixture is overridden with a cooldown configured)."""

from __future__ import annotations

from pathlib import Path

import pytest
from discord import app_commands

from bot.app import Services
from standins.harness import CallWorld, call_world


@pytest.fixture
async def cooldown_world(tmp_path: Path):
    async with call_world(tmp_path, start_web=False, discord={"call_cooldown_seconds": 30}) as w:
        yield w


@pytest.fixture
async def services(cooldown_world):  # overrides the conftest fixture for this module's cooldown test only
    return Services(
        settings=cooldown_world.settings,
        store=cooldown_world.store,
        memory=cooldown_world.memory,
        agora=cooldown_world.agora,
        calls=cooldown_world.calls,
        web=cooldown_world.web,
    )


async def test_call_cooldown(simcord_env, cooldown_world: CallWorld, member) -> None:
    _, channel, alice = member
    await cooldown_world.store.set_consent(alice.id, True, 0.0)
    await alice.slash(channel, "call")
    await alice.slash(channel, "hangup")
    again = await alice.slash(channel, "call")
    assert "Slow down" in again.response.content and again.ephemeral
    assert isinstance(simcord_env.errors[-1], app_commands.CommandOnCooldown)
    await simcord_env.advance_time(31)
    third = await alice.slash(channel, "call")
    assert "Your call is ready" in third.response.content
