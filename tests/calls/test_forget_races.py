"""Forget and pause win over writes already in flight (issue 13, items 1 and 2), against the Agora emulator."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from standins.harness import CallWorld
from tests.calls.test_lifecycle import ALICE, conversation, start_call, stored


def file_bytes(world: CallWorld) -> bytes:
    path = Path(world.settings.memory.database_path)
    wal = path.with_name(path.name + "-wal")
    return path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


def in_flight_reads() -> list[tuple[str, Callable[[CallWorld, str], Awaitable[object]]]]:
    return [
        ("checkpoint", lambda world, call_id: world.calls.checkpoint(call_id)),
        ("hang-up", lambda world, call_id: world.calls.hang_up(ALICE)),
    ]


@pytest.mark.parametrize(("name", "read"), in_flight_reads(), ids=[n for n, _ in in_flight_reads()])
async def test_forget_everything_wins_over_a_history_read_in_flight(
    world: CallWorld, name: str, read: Callable[[CallWorld, str], Awaitable[object]]
) -> None:
    started, agent = await start_call(world)
    world.emu.script(agent.agent_id, [("user", "my locker code is zqxlocker4711"), ("assistant", "Got it.")])
    gate = world.emu.hold_responses("history")
    in_flight = asyncio.ensure_future(read(world, started.call_id))
    await asyncio.wait_for(gate.reached.wait(), 5)  # Agora answered; the answer is on its way to the bot

    result = await world.memory.forget_everything(ALICE)
    gate.release()
    await in_flight
    await world.emu.wait_webhooks_idle()
    await world.memory.wait_scrubbed()

    assert result.turns == 0
    assert await stored(world, started.call_id) == [], f"the {name}'s read stored the lines again"
    assert await world.store.count_turns(ALICE) == 0
    context = await world.memory.build_context(ALICE)
    assert "zqxlocker4711" not in str(context)
    assert b"zqxlocker4711" not in file_bytes(world)


async def test_pausing_memory_stops_recording_the_running_call_at_once(world: CallWorld) -> None:
    started, agent = await start_call(world)
    before = conversation(4, "before ")
    world.emu.script(agent.agent_id, before)
    assert await world.calls.checkpoint(started.call_id)

    await world.store.set_memory_enabled(ALICE, False, world.clock())  # the member pressed Pause memory
    world.emu.script(agent.agent_id, [("user", "after the pause: zqxpaused"), ("assistant", "Okay.")])
    assert await world.calls.checkpoint(started.call_id)
    ended = await world.calls.hang_up(ALICE)
    await world.emu.wait_webhooks_idle()

    lines = [content for _, content in await stored(world, started.call_id)]
    assert not [line for line in lines if "zqxpaused" in line or line == "Okay."]
    assert lines[1:] == [content for _, content in before], "what was said before the pause is kept"
    assert ended.private, "no post-call learning from a call paused half-way"
    assert await world.store.job_state("post_call", started.call_id) is None


async def test_resuming_memory_mid_call_does_not_bring_back_what_was_said_while_paused(world: CallWorld) -> None:
    started, agent = await start_call(world)
    await world.store.set_memory_enabled(ALICE, False, world.clock())
    world.emu.script(agent.agent_id, [("user", "while paused: zqxpaused2")])
    await world.store.set_consent(ALICE, True, world.clock())  # Resume memory
    assert await world.calls.checkpoint(started.call_id)
    await world.calls.hang_up(ALICE)
    await world.emu.wait_webhooks_idle()
    assert not [c for _, c in await stored(world, started.call_id) if "zqxpaused2" in c]


@pytest.mark.on_each_backend
async def test_forget_everything_mid_call_leaves_no_trace_of_the_call_once_it_ends(world: CallWorld) -> None:
    """The member forgets everything while talking, goes on, then hangs up: the call ends for them as usual, and
    afterwards neither Export nor the database knows the call (its ids, times, end reason)."""
    started, agent = await start_call(world)
    world.emu.script(agent.agent_id, conversation(4, "before "))
    assert await world.calls.checkpoint(started.call_id)

    await world.memory.forget_everything(ALICE)
    world.emu.script(agent.agent_id, [("user", "after the forget: zqxforgotten"), ("assistant", "Okay.")])
    assert await world.calls.checkpoint(started.call_id)
    ended = await world.calls.hang_up(ALICE)
    await world.emu.wait_webhooks_idle()

    assert ended.call_id == started.call_id and ended.turns_stored == 0
    assert world.emu.agent(agent.agent_id).status == "STOPPED"
    assert await world.store.get_call(started.call_id) is None
    assert await world.store.open_call_for_user(ALICE) is None
    export = await world.memory.export(ALICE)
    assert export["calls"] == [] and export["facts"] == []
    assert started.call_id not in str(export)
