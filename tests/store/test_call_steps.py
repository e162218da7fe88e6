"""The call lifecycle's combined steps (`CallStepStore`) on every store: what each returns and writes. How many
trips to the database each takes is measured by bench/calls.py (trips per operation)."""

from __future__ import annotations

import time

from bot.store.models import GuildSettings, NewTurn
from bot.store.repository import Store
from standins.factories import make_call

ALICE, BOB, CAROL = 42, 43, 44
GUILD = 7


async def test_the_start_check_reads_settings_member_open_call_and_counts(store: Store) -> None:
    now = time.time()
    empty = await store.call_start_check(ALICE, GUILD, now - 3600)
    assert empty.guild == GuildSettings(guild_id=GUILD)
    assert empty.user is None and empty.open_call_id is None
    assert (empty.calls_today, empty.open_calls) == (0, 0)

    await store.set_consent(ALICE, True, now)
    await store.update_guild_settings(GUILD, now, calls_enabled=False, persona="Pirate", calls_per_member_per_day=3)
    yesterday = make_call(ALICE, guild_id=GUILD, state="ended", started_at=now - 86400)
    failed = make_call(ALICE, guild_id=GUILD, state="failed", started_at=now - 60)
    ended = make_call(ALICE, guild_id=GUILD, state="ended", started_at=now - 30)
    elsewhere = make_call(ALICE, guild_id=GUILD + 1, state="ended", started_at=now - 20)
    open_one = make_call(ALICE, guild_id=GUILD, state="active", started_at=now - 10)
    bobs = make_call(BOB, guild_id=None, state="starting", started_at=now - 5)
    for call in (yesterday, failed, ended, elsewhere, open_one, bobs):
        await store.create_call(call)

    check = await store.call_start_check(ALICE, GUILD, now - 3600)
    assert check.guild == await store.get_guild_settings(GUILD)
    assert not check.guild.calls_enabled and check.guild.persona == "Pirate"
    assert check.guild.calls_per_member_per_day == 3
    assert check.user == await store.get_user(ALICE)
    assert check.open_call_id == open_one.call_id
    assert check.calls_today == 2  # the ended one and the open one here today; not yesterday's, the failed one
    assert check.open_calls == 2  # every member's

    direct = await store.call_start_check(BOB, None, now - 3600)
    assert direct.guild == GuildSettings(guild_id=0)  # a direct message: the bot-wide defaults
    assert direct.user is None
    assert direct.open_call_id == bobs.call_id
    assert direct.calls_today == 1  # calls outside any server count among themselves


async def test_a_call_is_read_with_its_members_memory_generation(store: Store) -> None:
    now = time.time()
    call = make_call(ALICE, state="active")
    await store.create_call(call)
    assert await store.call_and_generation(call.call_id) == (await store.get_call(call.call_id), 0)
    await store.set_memory_enabled(ALICE, False, now)  # moves the generation
    read = await store.call_and_generation(call.call_id)
    assert read is not None
    assert read == (await store.get_call(call.call_id), await store.memory_generation(ALICE))
    assert read[1] > 0 and read[0].private  # a pause makes the open call private too
    assert await store.call_and_generation("no-such-call") is None


async def test_beginning_an_ending_returns_the_row_and_the_generation_once(store: Store) -> None:
    now = time.time()
    await store.set_consent(ALICE, True, now)
    call = make_call(ALICE, state="active")
    await store.create_call(call)
    await store.set_memory_enabled(ALICE, False, now)  # moves the member's memory generation
    await store.set_memory_enabled(ALICE, True, now)
    generation = await store.memory_generation(ALICE)
    assert generation > 0

    began = await store.begin_call_ending(
        call.call_id, ["starting", "active"], end_reason="hangup", owner="p1", lease_until=now + 60
    )
    assert began is not None
    row, fenced = began
    assert row == await store.get_call(call.call_id)
    assert (row.state, row.end_reason, row.owner, row.lease_until) == ("ending", "hangup", "p1", now + 60)
    assert fenced == generation

    assert await store.begin_call_ending(call.call_id, ["starting", "active"], end_reason="again") is None
    assert (await store.get_call(call.call_id)).end_reason == "hangup"  # type: ignore[union-attr]
    assert await store.begin_call_ending("no-such-call", ["active"], end_reason="hangup") is None


async def test_ending_a_call_counts_its_turns_and_queues_its_job_all_at_once(store: Store) -> None:
    now = time.time()
    spoken, silent, unqueued = (make_call(user, state="ending") for user in (ALICE, BOB, CAROL))
    turns = [NewTurn("user" if i % 2 == 0 else "assistant", f"line {i}", now, i, 0, False, 1000 + i) for i in range(3)]
    for call in (spoken, silent, unqueued):
        await store.set_consent(call.user_id, True, now)
        await store.create_call(call)
        if call is not silent:
            generation = await store.memory_generation(call.user_id)
            written = await store.apply_call_turns(
                call.call_id, call.user_id, turns, [], anchored=True, checkpoint_at=now, generation=generation
            )
            assert written

    end = await store.end_call(
        spoken.call_id, ended_at=now, agent_stop_pending=True, post_call_job="post_call", not_before=now + 15
    )
    assert (end.won, end.turns) == (True, 3)
    row = await store.get_call(spoken.call_id)
    assert row is not None and (row.state, row.ended_at, row.agent_stop_pending) == ("ended", now, True)
    assert await store.job_state("post_call", spoken.call_id) == "pending"
    assert await store.claim_job(now + 1, 60) is None  # due only after the webhook grace
    claimed = await store.claim_job(now + 15, 60)
    assert claimed is not None and (claimed.kind, claimed.ref_id) == ("post_call", spoken.call_id)

    again = await store.end_call(spoken.call_id, ended_at=now + 1, agent_stop_pending=False, post_call_job="post_call")
    assert (again.won, again.turns) == (False, 0)
    assert (await store.get_call(spoken.call_id)).ended_at == now  # type: ignore[union-attr]

    nothing_said = await store.end_call(
        silent.call_id, ended_at=now, agent_stop_pending=False, post_call_job="post_call"
    )
    assert (nothing_said.won, nothing_said.turns) == (True, 0)
    assert await store.job_state("post_call", silent.call_id) is None  # nothing to learn from

    no_job = await store.end_call(unqueued.call_id, ended_at=now, agent_stop_pending=False)
    assert (no_job.won, no_job.turns) == (True, 3)
    assert await store.job_state("post_call", unqueued.call_id) is None


async def test_a_call_open_when_its_member_forgot_everything_leaves_no_row_once_finished(store: Store) -> None:
    """/forget everything during a call: the open call keeps its row while its agent runs (the lifecycle needs
    it), and the row goes as the call finishes however it finishes: ended, ended with its agent still to stop
    (gone once stopped), or failed while starting. Another member's call and a call started after the forget
    are kept."""
    now = time.time()
    dave = 45
    hung_up, stuck, starting = (
        make_call(u, state=s) for u, s in ((ALICE, "active"), (CAROL, "active"), (dave, "starting"))
    )
    bobs = make_call(BOB, state="active")
    for call in (hung_up, stuck, starting, bobs):
        await store.set_consent(call.user_id, True, now)
        await store.create_call(call)

    for call in (hung_up, stuck, starting):
        await store.forget_user(call.user_id)
        kept = await store.get_call(call.call_id)
        assert kept is not None and kept.state == call.state and kept.private

    for call in (hung_up, stuck, bobs):
        assert await store.begin_call_ending(call.call_id, ["active"], end_reason="hangup") is not None
    assert (await store.end_call(hung_up.call_id, ended_at=now, agent_stop_pending=False)).won
    assert await store.get_call(hung_up.call_id) is None

    assert (await store.end_call(stuck.call_id, ended_at=now, agent_stop_pending=True)).won
    assert [c.call_id for c in await store.calls_with_agent_to_stop()] == [stuck.call_id]
    await store.update_call(stuck.call_id, agent_stop_pending=False)  # Agora stopped the agent at last
    assert await store.get_call(stuck.call_id) is None

    assert await store.transition_call(starting.call_id, ["starting"], "failed", end_reason="agent_failed")
    assert await store.get_call(starting.call_id) is None

    assert (await store.end_call(bobs.call_id, ended_at=now, agent_stop_pending=False)).won
    assert (await store.get_call(bobs.call_id)).state == "ended"  # type: ignore[union-attr]
    await store.set_consent(ALICE, True, now + 1)
    after = make_call(ALICE, state="ending", started_at=now + 2)
    await store.create_call(after)
    assert (await store.end_call(after.call_id, ended_at=now + 3, agent_stop_pending=False)).won
    assert (await store.get_call(after.call_id)).state == "ended"  # type: ignore[union-attr]
    forgotten = {hung_up.call_id, stuck.call_id, starting.call_id}
    for user in (ALICE, CAROL, dave):
        assert not forgotten & {c["id"] for c in (await store.export_user(user))["calls"]}
