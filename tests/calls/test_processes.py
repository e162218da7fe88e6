"""Several bot processes on one database: each call is looked after by exactly one process through a lease in the
database; when that process dies, another takes the call over once the lease runs out, and nothing is lost or
stored twice. (Each "process" here is a CallService with its own store connection; the three-process test with
real processes and SIGKILL is in tests/e2e.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bot.calls.service import CallService
from bot.memory.service import MemoryService
from bot.store.postgres import PostgresStore
from bot.store.repository import Store
from bot.store.sqlite import SqliteStore
from standins.factories import make_call
from standins.harness import CallWorld, EndedLog, call_world, eventually

ALICE = 1001


pytestmark = [pytest.mark.on_each_backend, pytest.mark.call_world(agora={"checkpoint_seconds": 10})]


@dataclass
class OtherProcess:
    calls: CallService
    log: EndedLog
    store: Store
    memory: MemoryService


@pytest.fixture
async def other_process(world: CallWorld) -> AsyncIterator[OtherProcess]:
    """A second bot process: its own store connection to the same database, its own call service."""
    store: Store
    if isinstance(world.store, PostgresStore):
        store = PostgresStore(world.store.url)
    else:
        assert isinstance(world.store, SqliteStore)
        store = SqliteStore(world.store.path)
    await store.open()
    memory = MemoryService(store, budget_tokens=1500, persona="p")
    calls = CallService(store, memory, world.agora, world.settings, clock=world.clock, run_checkpoints=False)
    log = EndedLog()
    calls.add_listener(log)
    yield OtherProcess(calls, log, store, memory)
    await calls.shutdown(grace_seconds=1)
    await memory.wait_scrubbed()
    await store.close()


def lines(n: int, start: int = 0) -> list[tuple[str, str]]:
    return [("user" if i % 2 == 0 else "assistant", f"line {i}: distinct {i * 7}") for i in range(start, start + n)]


async def test_a_dead_process_calls_are_taken_over_after_one_lease_and_nothing_is_lost(
    world: CallWorld, other_process: OtherProcess
) -> None:
    first, second, second_log = world.calls, other_process.calls, other_process.log
    await world.store.set_consent(ALICE, True, world.clock())
    started = await first.start(user_id=ALICE, guild_id=77)
    agent = world.emu.agent_by_label("call_id", started.call_id)
    world.emu.user_joined(agent.agent_id)
    world.emu.script(agent.agent_id, lines(8))
    assert await first.checkpoint(started.call_id)

    # While the first process lives, the second leaves its call alone.
    assert await second.reconcile() == {"resumed": 0, "finalized": 0, "failed": 0}
    world.clock.advance(first.lease_seconds - 1)
    assert await second.reconcile() == {"resumed": 0, "finalized": 0, "failed": 0}
    call = await world.store.get_call(started.call_id)
    assert call is not None and call.owner == first.owner

    # The first process dies (no shutdown, no release): one lease period after its last renewal, the call moves.
    world.clock.advance(2)
    assert await second.reconcile() == {"resumed": 1, "finalized": 0, "failed": 0}
    call = await world.store.get_call(started.call_id)
    assert call is not None and call.owner == second.owner
    now = world.clock()
    assert not await world.store.take_call_lease(started.call_id, first.owner, now, now + 30), (
        "a process that was only paused cannot take its call back while the new owner holds it"
    )

    world.emu.script(agent.agent_id, lines(6, start=8))
    assert await second.checkpoint(started.call_id)
    world.emu.script(agent.agent_id, [("user", "after the last checkpoint")])
    ended = await second.hang_up(ALICE)
    expected = [("assistant", world.settings.agora.greeting), *lines(14), ("user", "after the last checkpoint")]
    assert [(t.role, t.content) for t in await world.store.call_turns(started.call_id)] == expected
    assert ended.turns_stored == len(expected)
    assert len(second_log.ended) == 1 and world.log.ended == [], "finalized once, by the process that owned it"


async def test_a_process_shutting_down_hands_its_calls_over_at_once(
    world: CallWorld, other_process: OtherProcess
) -> None:
    second = other_process.calls
    await world.store.set_consent(ALICE, True, world.clock())
    started = await world.calls.start(user_id=ALICE, guild_id=77)
    world.emu.user_joined(world.emu.agent_by_label("call_id", started.call_id).agent_id)
    await world.calls.shutdown(grace_seconds=1)
    assert await second.reconcile() == {"resumed": 1, "finalized": 0, "failed": 0}


async def test_the_takeover_loop_finds_orphaned_calls_on_its_own(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with call_world(tmp_path, database_url=postgres_url, agora={"checkpoint_seconds": 0.05}) as world:
        store = PostgresStore(postgres_url)
        await store.open()
        memory = MemoryService(store, budget_tokens=1500, persona="p")
        second = CallService(store, memory, world.agora, world.settings, clock=world.clock, run_checkpoints=False)
        await world.store.set_consent(ALICE, True, world.clock())
        started = await world.calls.start(user_id=ALICE, guild_id=77)
        world.emu.user_joined(world.emu.agent_by_label("call_id", started.call_id).agent_id)
        stop = asyncio.Event()
        loop = asyncio.create_task(second.run_takeover(stop))
        try:
            await asyncio.sleep(0.2)
            assert (await world.store.get_call(started.call_id)).owner == world.calls.owner  # type: ignore[union-attr]
            world.clock.advance(world.calls.lease_seconds + 1)

            async def taken() -> bool:
                call = await world.store.get_call(started.call_id)
                return call is not None and call.owner == second.owner

            await eventually(taken)
        finally:
            stop.set()
            await loop
            await second.shutdown(grace_seconds=1)
            await store.close()


async def test_two_processes_merging_one_call_at_once_store_each_line_once(
    world: CallWorld, other_process: OtherProcess
) -> None:
    """A checkpoint in one process and the final history read in another can merge the same window at once: the
    second writer finds the transcript changed (its version moved), reads again and merges, adding nothing twice."""
    second = other_process
    call = make_call(user_id=ALICE, state="active")
    await world.store.create_call(call)
    window = lines(6)
    real_apply = second.store.apply_call_turns
    interleaved = []

    async def apply_after_the_other_process(*args: Any, **kwargs: Any) -> None:
        if not interleaved:  # the other process's merge lands between this one's read and its write
            interleaved.append(await world.memory.record_snapshot(call, window, max_history=32))
        await real_apply(*args, **kwargs)

    second.store.apply_call_turns = apply_after_the_other_process  # type: ignore[method-assign]
    await second.memory.record_snapshot(call, [*window, ("user", "one more")], max_history=32)
    assert interleaved, "the race happened"
    stored = [(t.role, t.content) for t in await world.store.call_turns(call.call_id)]
    assert stored == [*window, ("user", "one more")]


async def test_the_takeover_sweep_leaves_the_calls_its_own_process_is_starting(world: CallWorld) -> None:
    await world.store.set_consent(ALICE, True, world.clock())
    world.emu.latency = 0.3  # Agora is slow to answer the join
    starting = asyncio.create_task(world.calls.start(user_id=ALICE, guild_id=77))

    async def call_row_exists() -> bool:
        call = await world.store.open_call_for_user(ALICE)
        return call is not None and call.state == "starting"

    await eventually(call_row_exists)
    assert await world.calls.reconcile() == {"resumed": 0, "finalized": 0, "failed": 0}
    started = await starting
    call = await world.store.get_call(started.call_id)
    assert call is not None and call.state == "active"


@dataclass
class SlowCard:
    """A call-ended listener that takes a while, as a card edit does on a busy Discord."""

    seconds: float
    ended: list[str]

    async def call_ended(self, ended: Any) -> None:
        await asyncio.sleep(self.seconds)
        self.ended.append(ended.call_id)


@pytest.mark.call_world(agora={"checkpoint_seconds": 0.05})
async def test_telling_the_listeners_slowly_after_a_call_ended_raises_no_takeover_alarm(
    world: CallWorld, caplog: pytest.LogCaptureFixture
) -> None:
    """The lease is renewed while the call ends, not after: a slow listener (a card edit lasting several renewal
    beats) finds no "another bot process took over" warning in the log, which only a real takeover may write."""
    caplog.set_level("INFO", logger="bot.calls")
    card = SlowCard(seconds=world.calls.lease_seconds * 2, ended=[])
    world.calls.add_listener(card)
    await world.store.set_consent(ALICE, True, world.clock())
    started = await world.calls.start(user_id=ALICE, guild_id=77)
    world.emu.user_joined(world.emu.agent_by_label("call_id", started.call_id).agent_id)
    ended = await world.calls.hang_up(ALICE)
    assert card.ended == [started.call_id] and ended.call_id == started.call_id
    assert (await world.store.get_call(started.call_id)).state == "ended"  # type: ignore[union-attr]
    assert not [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


async def test_an_ending_that_outlasts_its_lease_stays_with_its_process(tmp_path: Path, postgres_url: str) -> None:
    """A saturated process may need longer than one lease period to end a call (the last history read is slow):
    it keeps renewing the lease meanwhile, so no other process ends the call a second time."""
    async with call_world(tmp_path, database_url=postgres_url, agora={"checkpoint_seconds": 0.05}) as world:
        store = PostgresStore(postgres_url)
        await store.open()
        memory = MemoryService(store, budget_tokens=1500, persona="p")
        second = CallService(store, memory, world.agora, world.settings, clock=world.clock, run_checkpoints=False)
        second_log = EndedLog()
        second.add_listener(second_log)
        try:
            await world.store.set_consent(ALICE, True, world.clock())
            started = await world.calls.start(user_id=ALICE, guild_id=77)
            world.emu.user_joined(world.emu.agent_by_label("call_id", started.call_id).agent_id)
            gate = world.emu.hold_responses("history")
            hanging_up = asyncio.create_task(world.calls.hang_up(ALICE))
            await asyncio.wait_for(gate.reached.wait(), 5)
            for _ in range(6):  # three lease periods in all, each half followed by a renewal beat
                world.clock.advance(world.calls.lease_seconds / 2)
                await asyncio.sleep(world.calls.lease_seconds)
                assert await second.reconcile() == {"resumed": 0, "finalized": 0, "failed": 0}
            gate.release()
            ended = await asyncio.wait_for(hanging_up, 5)
            assert ended.call_id == started.call_id
            assert [e.call_id for e in world.log.ended] == [started.call_id]
            assert second_log.ended == []
            assert world.emu.count_calls("leave") == 1
            assert (await world.store.get_call(started.call_id)).state == "ended"  # type: ignore[union-attr]
        finally:
            await second.shutdown(grace_seconds=1)
            await memory.wait_scrubbed()
            await store.close()
