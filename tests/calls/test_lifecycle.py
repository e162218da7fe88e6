"""Every way a call can end stores what was said exactly once (against the Agora emulator, on loopback)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from bot.calls.errors import CallAlreadyActive, CapacityReached, ConsentRequired, VoiceUnavailable
from standins.factories import seed_fact
from standins.harness import CallWorld, call_world, eventually

ALICE = 1001


def conversation(n: int, tag: str = "") -> list[tuple[str, str]]:
    return [("user" if i % 2 == 0 else "assistant", f"{tag}line {i}: something distinct {i * 7}") for i in range(n)]


async def stored(world: CallWorld, call_id: str) -> list[tuple[str, str]]:
    return [(t.role, t.content) for t in await world.store.call_turns(call_id)]


async def start_call(world: CallWorld, user: int = ALICE, **kw):
    await world.store.set_consent(user, True, world.clock())
    started = await world.calls.start(user_id=user, guild_id=77, **kw)
    agent = world.emu.agent_by_label("call_id", started.call_id)
    world.emu.user_joined(agent.agent_id)
    return started, agent


def link_token(started) -> str:
    return started.link_url.rsplit("/", 1)[1]


async def test_a_lone_surrogate_in_agoras_history_does_not_stop_the_call_being_stored(world: CallWorld) -> None:
    """JSON can spell a lone surrogate ("\\ud800"); no UTF-8 store can hold one, so it is replaced, not fatal."""
    started, agent = await start_call(world)
    world.emu.script(agent.agent_id, [("user", "my code is \ud800 ok"), ("assistant", "Noted.")])
    assert await world.calls.checkpoint(started.call_id)
    world.emu.script(agent.agent_id, [("user", "bye \udfff")])
    await world.calls.hang_up(ALICE)
    greeting = ("assistant", world.settings.agora.greeting)
    assert await stored(world, started.call_id) == [
        greeting,
        ("user", "my code is ? ok"),
        ("assistant", "Noted."),
        ("user", "bye ?"),
    ]


async def test_full_call_is_stored_once_in_order_and_the_agent_stops(world: CallWorld) -> None:
    started, agent = await start_call(world)
    assert agent.labels == {"call_id": started.call_id}
    assert agent.request["properties"]["remote_rtc_uids"] != [agent.request["properties"]["agent_rtc_uid"]]
    greeting = ("assistant", world.settings.agora.greeting)
    convo = conversation(50)
    for chunk in range(0, 50, 10):
        world.emu.script(agent.agent_id, convo[chunk : chunk + 10])
        assert await world.calls.checkpoint(started.call_id)
    world.emu.script(agent.agent_id, [("user", "one more thing after the last checkpoint")])
    ended = await world.calls.hang_up(ALICE)
    expected = [greeting, *convo, ("user", "one more thing after the last checkpoint")]
    assert await stored(world, started.call_id) == expected
    assert ended.turns_stored == len(expected) and ended.reason == "hangup"
    assert world.emu.agent(agent.agent_id).status == "STOPPED"
    call = await world.store.get_call(started.call_id)
    assert call.state == "ended" and call.end_reason == "hangup"
    assert await world.store.job_state("post_call", started.call_id) == "pending"
    await world.emu.wait_webhooks_idle()
    assert await stored(world, started.call_id) == expected, "the late history webhook adds nothing twice"


async def test_closing_the_page_sends_a_beacon_that_ends_the_call(world: CallWorld) -> None:
    started, agent = await start_call(world)
    world.emu.script(agent.agent_id, conversation(6))
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{world.web.url}/api/calls/{link_token(started)}/hangup",
            content=b"beacon",
            headers={"content-type": "text/plain"},
        )
    assert response.status_code == 200 and response.json()["state"] == "ended"
    call = await world.store.get_call(started.call_id)
    assert call.end_reason == "page_closed"
    assert len(await stored(world, started.call_id)) == 7


async def test_idle_timeout_with_history_webhook_keeps_turns_after_the_last_checkpoint(world: CallWorld) -> None:
    started, agent = await start_call(world)
    convo = conversation(40)
    world.emu.script(agent.agent_id, convo[:20])
    await world.calls.checkpoint(started.call_id)
    world.emu.script(agent.agent_id, convo[20:])
    world.emu.user_left(agent.agent_id)
    world.emu.advance(world.settings.agora.idle_timeout_seconds + 1)
    await world.emu.wait_webhooks_idle()
    call = await world.store.get_call(started.call_id)
    assert call.state == "ended" and call.end_reason == "idle_timeout"
    turns = await stored(world, started.call_id)
    assert turns == [("assistant", world.settings.agora.greeting), *convo]
    assert world.log.ended[-1].reason == "idle_timeout"


async def test_idle_timeout_without_webhook_keeps_everything_up_to_the_last_checkpoint(tmp_path: Path) -> None:
    async with call_world(tmp_path, webhooks=False) as world:
        started, agent = await start_call(world)
        convo = conversation(30)
        world.emu.script(agent.agent_id, convo[:24])
        await world.calls.checkpoint(started.call_id)
        world.emu.script(agent.agent_id, convo[24:])  # said after the last checkpoint: no snapshot covers it
        world.emu.user_left(agent.agent_id)
        world.emu.advance(31)
        assert not await world.calls.checkpoint(started.call_id)
        call = await world.store.get_call(started.call_id)
        assert call.state == "ended" and call.end_reason == "idle_timeout"
        assert await stored(world, started.call_id) == [("assistant", world.settings.agora.greeting), *convo[:24]]


@pytest.mark.parametrize("mode", ["duplicate", "reverse"])
async def test_webhooks_delivered_twice_or_out_of_order_are_harmless(
    tmp_path: Path, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="bot.calls")
    async with call_world(tmp_path) as world:
        world.emu.webhook_mode = mode
        started, agent = await start_call(world)
        convo = conversation(12)
        world.emu.script(agent.agent_id, convo)
        world.emu.user_left(agent.agent_id)
        world.emu.advance(31)
        await world.emu.wait_webhooks_idle()
        assert await stored(world, started.call_id) == [("assistant", world.settings.agora.greeting), *convo]
        assert len(world.log.ended) == 1
        assert (await world.store.get_call(started.call_id)).state == "ended"
        skipped = [r for r in caplog.records if "was already processed" in r.getMessage()]
        assert len(skipped) == (3 if mode == "duplicate" else 0)  # 101, 102 and 103 each arrived twice


async def test_history_held_then_released_in_any_order_after_finalize(world: CallWorld) -> None:
    world.emu.hold_webhooks()
    started, agent = await start_call(world)
    convo = conversation(45)
    world.emu.script(agent.agent_id, convo[:10])
    await world.calls.checkpoint(started.call_id)
    world.emu.script(agent.agent_id, convo[10:])
    world.emu.fail_next(5, 503, operation="history")  # the last read before leave fails for good
    await world.calls.hang_up(ALICE)
    assert len(await stored(world, started.call_id)) == 11
    await world.emu.release_webhooks(order=[2, 1, 2, 0])
    await world.emu.wait_webhooks_idle()
    turns = await stored(world, started.call_id)
    window = world.settings.agora.max_history
    full = [("assistant", world.settings.agora.greeting), *convo]
    assert turns[:11] == full[:11] and turns[-window:] == full[-window:]
    gap = [t for t in full if t not in turns]
    assert gap == full[11 : len(full) - window], "only what no snapshot covered is missing"


async def test_restart_mid_call_resumes_and_then_finishes_the_call(world: CallWorld) -> None:
    started, agent = await start_call(world)
    convo = conversation(20)
    world.emu.script(agent.agent_id, convo[:8])
    await world.calls.checkpoint(started.call_id)
    calls = await world.restart()
    assert await calls.reconcile() == {"resumed": 1, "finalized": 0, "failed": 0}
    world.emu.script(agent.agent_id, convo[8:])
    assert await calls.checkpoint(started.call_id)
    await calls.hang_up(ALICE)
    assert await stored(world, started.call_id) == [("assistant", world.settings.agora.greeting), *convo]


async def test_restart_after_the_agent_stopped_during_downtime_finalizes(tmp_path: Path) -> None:
    async with call_world(tmp_path, webhooks=False) as world:
        started, agent = await start_call(world)
        world.emu.script(agent.agent_id, conversation(6))
        await world.calls.checkpoint(started.call_id)
        await world.calls.shutdown(grace_seconds=1)
        world.emu.user_left(agent.agent_id)
        world.emu.advance(31)
        calls = await world.restart()
        assert await calls.reconcile() == {"resumed": 0, "finalized": 1, "failed": 0}
        call = await world.store.get_call(started.call_id)
        assert call.state == "ended" and call.end_reason == "idle_timeout"
        assert len(await stored(world, started.call_id)) == 7


async def test_history_failing_twice_with_503_then_succeeding_loses_nothing(world: CallWorld) -> None:
    started, agent = await start_call(world)
    convo = conversation(10)
    world.emu.script(agent.agent_id, convo)
    world.emu.fail_next(2, 503, operation="history")
    assert await world.calls.checkpoint(started.call_id)
    assert world.emu.count_calls("history", 503) == 2
    assert await stored(world, started.call_id) == [("assistant", world.settings.agora.greeting), *convo]


async def test_leave_answering_404_still_ends_the_call(world: CallWorld) -> None:
    started, agent = await start_call(world)
    world.emu.script(agent.agent_id, conversation(4))
    world.emu.fail_agent(agent.agent_id)  # gone before we hang up: history and leave both 404
    ended = await world.calls.hang_up(ALICE)
    assert ended.reason == "hangup"
    assert (await world.store.get_call(started.call_id)).state == "ended"


@pytest.mark.parametrize(
    ("status", "error"),
    [(409, VoiceUnavailable), (422, CapacityReached), (429, VoiceUnavailable), (503, VoiceUnavailable)],
)
async def test_join_failures_give_a_clear_error_and_leave_nothing_behind(
    world: CallWorld, status: int, error: type[Exception]
) -> None:
    await world.store.set_consent(ALICE, True, world.clock())
    world.emu.fail_next(10, status, operation="join")
    with pytest.raises(error):
        await world.calls.start(user_id=ALICE, guild_id=77)
    assert [a for a in world.emu.agents.values() if a.is_active] == []
    assert await world.store.open_call_for_user(ALICE) is None
    assert world.emu.count_calls("join", status) >= 1


async def test_join_that_succeeded_at_agora_but_answered_503_is_not_orphaned(world: CallWorld) -> None:
    await world.store.set_consent(ALICE, True, world.clock())
    world.emu.fail_after_processing_next(1, 503, operation="join")
    started = await world.calls.start(user_id=ALICE, guild_id=77)
    assert len(world.emu.agents) == 1, "the retried join proved the agent was its own"
    assert world.emu.only_agent().labels["call_id"] == started.call_id


async def test_two_finalize_triggers_racing_end_the_call_once(world: CallWorld) -> None:
    started, agent = await start_call(world)
    world.emu.script(agent.agent_id, conversation(8))
    results = await asyncio.gather(
        world.calls.finalize(started.call_id, "hangup"),
        world.calls.finalize(started.call_id, "page_closed"),
        world.calls.finalize(started.call_id, "max_duration"),
    )
    assert len({r.call_id for r in results if r}) == 1
    assert len(world.log.ended) == 1
    assert world.emu.count_calls("leave") == 1
    assert len(await stored(world, started.call_id)) == 9


async def test_maximum_duration_ends_the_call(world: CallWorld) -> None:
    started, agent = await start_call(world)
    world.emu.script(agent.agent_id, conversation(4))
    world.clock.advance(started.max_minutes * 60 + 1)
    assert not await world.calls.checkpoint(started.call_id)
    call = await world.store.get_call(started.call_id)
    assert call.end_reason == "max_duration" and len(await stored(world, started.call_id)) == 5


async def test_second_call_starts_with_what_the_first_stored(world: CallWorld) -> None:
    _started, agent = await start_call(world)
    world.emu.script(
        agent.agent_id, [("user", "My name is Ilse and I only drink oat milk."), ("assistant", "Got it, Ilse!")]
    )
    await world.calls.hang_up(ALICE)
    _second, agent2 = await start_call(world)
    memory = agent2.system_messages[1]["content"]
    assert "My name is Ilse and I only drink oat milk." in memory
    assert agent2.system_messages[0]["content"] == world.settings.memory.persona


async def test_one_call_per_member_and_the_concurrency_limit(tmp_path: Path) -> None:
    async with call_world(tmp_path, agora={"max_concurrent_agents": 2}) as world:
        await start_call(world, ALICE)
        with pytest.raises(CallAlreadyActive):
            await world.calls.start(user_id=ALICE, guild_id=77)
        await start_call(world, 2002)
        await world.store.set_consent(3003, True, world.clock())
        with pytest.raises(CapacityReached):
            await world.calls.start(user_id=3003, guild_id=77)


async def test_private_call_reads_and_writes_no_memory(world: CallWorld) -> None:
    _first, agent = await start_call(world)
    world.emu.script(agent.agent_id, [("user", "I live in Ghent.")])
    await world.calls.hang_up(ALICE)
    private, agent2 = await start_call(world, private=True)
    assert len(agent2.system_messages) == 1
    world.emu.script(agent2.agent_id, [("user", "This is secret.")])
    await world.calls.hang_up(ALICE)
    assert await stored(world, private.call_id) == []
    assert await world.store.job_state("post_call", private.call_id) is None


async def test_a_member_who_has_not_chosen_must_consent_first(world: CallWorld) -> None:
    with pytest.raises(ConsentRequired):
        await world.calls.start(user_id=4242, guild_id=77)
    started = await world.calls.start(user_id=4242, guild_id=77, private=True)
    assert started.private


async def test_reloading_the_page_keeps_the_call_but_closing_it_ends_it(tmp_path: Path) -> None:
    async with call_world(tmp_path, calls={"page_close_grace_seconds": 0.3}) as world:
        started, agent = await start_call(world)
        token = link_token(started)
        async with httpx.AsyncClient() as http:
            await http.post(f"{world.web.url}/api/calls/{token}/hangup", content=b"beacon")
            assert (await http.get(f"{world.web.url}/call/{token}")).status_code == 200  # the reload
            await asyncio.sleep(0.5)
            assert (await world.store.get_call(started.call_id)).state == "active"

            await http.post(f"{world.web.url}/api/calls/{token}/hangup", content=b"beacon")  # the tab is closed
            await world.calls.wait_pages_closed()
        call = await world.store.get_call(started.call_id)
        assert call.state == "ended" and call.end_reason == "page_closed"
        assert world.emu.agent(agent.agent_id).status == "STOPPED"


async def test_checkpoints_run_on_their_own_and_survive_a_failing_one(tmp_path: Path, monkeypatch) -> None:
    async with call_world(tmp_path, checkpoints=True, agora={"checkpoint_seconds": 0.05}) as world:
        started, agent = await start_call(world)
        real = world.memory.record_snapshot
        failures = []

        async def flaky(*args, **kwargs):
            if not failures:
                failures.append(1)
                raise RuntimeError("disk hiccup")
            return await real(*args, **kwargs)

        monkeypatch.setattr(world.memory, "record_snapshot", flaky)
        world.emu.script(agent.agent_id, conversation(6))

        async def saved() -> bool:
            return len(await world.store.call_turns(started.call_id)) == 7

        await eventually(saved)
        assert failures == [1]


async def test_learning_starts_as_soon_as_the_history_webhook_arrived(world: CallWorld) -> None:
    started, agent = await start_call(world)
    world.emu.script(agent.agent_id, conversation(4))
    world.emu.hold_webhooks()
    await world.calls.hang_up(ALICE)
    assert await world.store.claim_job(world.clock(), 60) is None, "waits for Agora's final history"

    await world.emu.release_webhooks()
    await world.emu.wait_webhooks_idle()

    job = await world.store.claim_job(world.clock(), 60)
    assert job is not None and job.ref_id == started.call_id


async def test_learning_starts_at_once_when_the_webhook_ended_the_call(world: CallWorld) -> None:
    started, agent = await start_call(world)
    world.emu.script(agent.agent_id, conversation(4))
    world.emu.user_left(agent.agent_id)
    world.emu.advance(31)  # idle timeout: Agora stops the agent and sends 102 and 103
    await eventually(lambda: world.log.ended)
    await world.emu.wait_webhooks_idle()  # webhooks are stored before they are answered

    job = await world.store.claim_job(world.clock(), 60)
    assert job is not None and job.ref_id == started.call_id


async def test_without_webhooks_learning_does_not_wait_for_one(tmp_path: Path) -> None:
    async with call_world(tmp_path, webhooks=False, agora={"webhook_secret": None}) as world:
        started, agent = await start_call(world)
        world.emu.script(agent.agent_id, conversation(4))
        await world.calls.hang_up(ALICE)

        job = await world.store.claim_job(world.clock(), 60)
        assert job is not None and job.ref_id == started.call_id


async def test_the_page_status_lists_what_was_learned(world: CallWorld) -> None:
    started, agent = await start_call(world)
    world.emu.script(agent.agent_id, [("user", "My cat is called Miso.")])
    token = link_token(started)
    opened = await world.adapter.open_page(token)  # the member's browser; the status lists facts to it only
    assert opened is not None and opened.browser_key is not None
    browser = opened.browser_key
    await world.calls.hang_up(ALICE)
    pending = await world.adapter.status(token, browser=browser)
    assert pending is not None and (pending.facts_learned, pending.facts) == (None, ())

    await seed_fact(world.store, ALICE, "Has a cat called Miso", world.clock(), call_id=started.call_id)
    job = await world.store.claim_job(world.clock() + 60, 60)
    assert job is not None
    await world.store.finish_job(job.job_id, world.clock())

    done = await world.adapter.status(token, browser=browser)
    assert done is not None and (done.facts_learned, done.facts) == (1, ("Has a cat called Miso",))
    assert done.to_json()["facts"] == ["Has a cat called Miso"]


async def test_calls_ended_by_the_idle_timeout_keep_no_merge_lock_after_their_history_webhook(
    world: CallWorld,
) -> None:
    """Issue 33 item 8: Agora's history webhook arrives after the call ended; its merge must not leave the call's
    lock behind (one per ended call, for as long as the process runs)."""
    ended: list[str] = []
    for n in range(3):
        started, agent = await start_call(world)
        world.emu.script(agent.agent_id, conversation(4, f"call {n} "))
        world.emu.user_left(agent.agent_id)
        world.emu.advance(world.settings.agora.idle_timeout_seconds + 1)
        await world.emu.wait_webhooks_idle()
        call = await world.store.get_call(started.call_id)
        assert call.state == "ended" and call.end_reason == "idle_timeout"
        assert len(await stored(world, started.call_id)) == 5  # the greeting and the history webhook's 4 lines
        ended.append(started.call_id)
    assert [e["eventType"] for e in world.emu.delivered].count(103) == 3
    assert not set(ended) & set(world.memory._call_locks)
