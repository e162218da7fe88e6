"""An ended call's agent is stopped even when Agora refuses every leave for a while (issue 13, item 9)."""

from __future__ import annotations

import httpx
import pytest

from bot.calls.service import CallTimings
from standins.harness import CallWorld, eventually
from tests.calls.test_lifecycle import ALICE, start_call

pytestmark = pytest.mark.call_world(timings=CallTimings(leave_retry_first_seconds=0.01))


async def health(world: CallWorld) -> dict:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{world.web.url}/healthz")
    assert response.status_code == 200
    return response.json()


async def test_leave_refused_by_agora_is_retried_in_the_background_and_reported(world: CallWorld) -> None:
    started, agent = await start_call(world)
    world.emu.fail_next(10_000, 503, operation="leave")
    ended = await world.calls.hang_up(ALICE)
    assert ended.reason == "hangup"
    assert (await world.store.get_call(started.call_id)).state == "ended"
    assert world.emu.agent(agent.agent_id).status == "RUNNING"
    assert (await health(world))["agents_still_running"] == 1

    world.emu.clear_failures()  # Agora recovers
    await eventually(lambda: world.emu.agent(agent.agent_id).status == "STOPPED", within=5)

    async def none_left() -> bool:
        return await world.calls.agents_still_running() == 0

    await eventually(none_left, within=5)
    assert (await health(world))["agents_still_running"] == 0


async def test_an_agent_still_running_at_restart_is_stopped_by_reconcile(world: CallWorld) -> None:
    started, agent = await start_call(world)
    world.emu.fail_next(10_000, 503, operation="leave")
    await world.calls.hang_up(ALICE)
    calls = await world.restart()  # the background retry dies with the old process
    assert world.emu.agent(agent.agent_id).status == "RUNNING"
    world.emu.clear_failures()
    await calls.reconcile()
    assert world.emu.agent(agent.agent_id).status == "STOPPED"
    assert not (await world.store.get_call(started.call_id)).agent_stop_pending
