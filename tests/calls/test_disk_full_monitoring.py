"""Monitoring while the disk is full: `/healthz` says `degraded` and why, and `/metrics` counts the failed writes,
while members are told storage is full (it used to answer `200 ok` with no error counted); `ok` again once writes
succeed and none failed for two minutes (bot.store.health). SQLite's own page limit makes the database file full
for real; on PostgreSQL the server's disk_full error is raised by triggers, as in test_disk_full."""

from __future__ import annotations

from pathlib import Path

import httpx

from bot.i18n import english
from bot.store.health import FAILING_WINDOW_SECONDS
from cogs.calls import ended_text
from standins.harness import CallWorld, call_world
from tests.calls.test_disk_full import FULL_DISK, SPACE_AGAIN, fill_the_disk, free_space, long_lines
from tests.calls.test_lifecycle import ALICE, start_call


async def operator_sees(world: CallWorld) -> tuple[int, dict[str, object], str]:
    async with httpx.AsyncClient(base_url=world.web.url) as http:
        health = await http.get("/healthz")
        metrics = await http.get("/metrics")
    return health.status_code, health.json(), metrics.text


async def hang_up_on_a_full_disk(world: CallWorld) -> None:
    _started, agent = await start_call(world)
    world.emu.script(agent.agent_id, long_lines(4))
    ended = await world.calls.hang_up(ALICE)
    assert "storage is full" in ended_text(ended, english()) and not ended.saved  # what the member is told


async def test_healthz_is_degraded_and_metrics_count_failed_writes_while_the_disk_is_full(tmp_path: Path) -> None:
    async with call_world(tmp_path, webhooks=False) as world:
        world.store.write_health.clock = world.clock  # type: ignore[attr-defined]
        status, health, metrics = await operator_sees(world)
        assert (status, health["status"]) == (200, "ok") and "problems" not in health
        assert "memory_call_bot_database_writable 1.0" in metrics

        await fill_the_disk(world)
        await hang_up_on_a_full_disk(world)

        status, health, metrics = await operator_sees(world)
        assert status == 200 and health["status"] == "degraded"
        problems = health["problems"]
        assert isinstance(problems, list) and len(problems) == 1
        assert problems[0].startswith("database: a write failed 0 s ago: the disk or database is full")
        assert health["database"]["writable"] is False  # type: ignore[index]
        failed = health["counters"]["errors"]["StorageFull"]  # type: ignore[index]
        assert failed >= 1
        assert f'memory_call_bot_errors_total{{kind="StorageFull"}} {float(failed)}' in metrics
        assert "memory_call_bot_database_writable 0.0" in metrics and "memory_call_bot_degraded 1.0" in metrics

        await free_space(world)
        assert await world.calls.save_unsaved() == 1
        _status, health, metrics = await operator_sees(world)
        assert health["database"]["writable"] is True, "writes succeed again"  # type: ignore[index]
        assert "memory_call_bot_database_writable 1.0" in metrics
        assert health["status"] == "degraded", "the episode is reported for two minutes after the last failure"
        assert "a write failed 0 s ago (writes succeed again since): the disk" in health["problems"][0]  # type: ignore[index]
        world.clock.advance(FAILING_WINDOW_SECONDS)
        status, health, metrics = await operator_sees(world)
        assert health["status"] == "ok" and health["database"]["writable"] is True  # type: ignore[index]
        assert health["counters"]["errors"]["StorageFull"] == failed  # type: ignore[index]
        assert "memory_call_bot_degraded 0.0" in metrics


async def test_healthz_is_degraded_while_postgresql_is_full(tmp_path: Path, postgres_url: str) -> None:
    async with call_world(tmp_path, webhooks=False, database_url=postgres_url) as world:
        world.store.write_health.clock = world.clock  # type: ignore[attr-defined]
        _started, agent = await start_call(world)
        world.emu.script(agent.agent_id, long_lines(4))
        await world.store.pool.execute(FULL_DISK)  # type: ignore[attr-defined]
        ended = await world.calls.hang_up(ALICE)
        assert "storage is full" in ended_text(ended, english())

        _status, health, metrics = await operator_sees(world)
        assert health["status"] == "degraded"
        assert "the disk or database is full" in health["problems"][0]  # type: ignore[index]
        assert 'memory_call_bot_errors_total{kind="StorageFull"}' in metrics

        await world.store.pool.execute(SPACE_AGAIN)  # type: ignore[attr-defined]
        assert await world.calls.save_unsaved() == 1
        world.clock.advance(FAILING_WINDOW_SECONDS)
        assert (await operator_sees(world))[1]["status"] == "ok"
