"""Under a burst, a running call's checkpoint gives way to the starts and hang-ups members are waiting for, for a
bounded moment; a takeover's or shutdown's save never waits."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot.calls.service import CallTimings
from standins.agora_emulator import ResponseGate
from standins.harness import CallWorld, call_world
from tests.calls.test_lifecycle import conversation, start_call, stored

BOB = 1002


async def a_start_in_flight(world: CallWorld) -> tuple[asyncio.Future[object], ResponseGate]:
    """Bob's start, held at Agora's answer to its join: a member is waiting."""
    await world.store.set_consent(BOB, True, world.clock())
    gate = world.emu.hold_responses("join")
    starting = asyncio.ensure_future(world.calls.start(user_id=BOB, guild_id=77))
    await asyncio.wait_for(gate.reached.wait(), 5)
    return starting, gate


async def test_a_checkpoint_waits_for_a_start_in_flight_then_saves_everything(world: CallWorld) -> None:
    started, agent = await start_call(world)
    lines = conversation(6)
    world.emu.script(agent.agent_id, lines)
    starting, gate = await a_start_in_flight(world)

    checkpoint = asyncio.ensure_future(world.calls.checkpoint(started.call_id))
    await asyncio.sleep(0.3)
    assert not checkpoint.done()  # Bob is waiting for his call: Alice's save waits
    assert await stored(world, started.call_id) == []

    gate.release()
    await asyncio.wait_for(starting, 5)
    assert await asyncio.wait_for(checkpoint, 5)
    assert await stored(world, started.call_id) == [("assistant", world.settings.agora.greeting), *lines]


async def test_the_wait_is_bounded(tmp_path: Path) -> None:
    async with call_world(tmp_path, timings=CallTimings(checkpoint_yield_max_seconds=0.2)) as world:
        started, agent = await start_call(world)
        world.emu.script(agent.agent_id, conversation(2))
        starting, gate = await a_start_in_flight(world)
        try:
            assert await asyncio.wait_for(world.calls.checkpoint(started.call_id), 2)  # saved although Bob waits
            assert len(await stored(world, started.call_id)) == 3
            assert not starting.done()
        finally:
            gate.release()
            await asyncio.wait_for(starting, 5)


async def test_a_takeover_or_shutdown_save_does_not_wait(world: CallWorld) -> None:
    started, agent = await start_call(world)
    world.emu.script(agent.agent_id, conversation(2))
    starting, gate = await a_start_in_flight(world)
    try:
        assert await asyncio.wait_for(world.calls.checkpoint(started.call_id, give_way=False), 0.5)
        assert len(await stored(world, started.call_id)) == 3
    finally:
        gate.release()
        await asyncio.wait_for(starting, 5)
