"""The bot is down while a call ends: the member says more and leaves, the agent stops on its idle timeout, and
Agora's history webhook is resent while nobody listens. After the restart the bot asks Agora what it still has
(the history: gone; the turn analytics: how many times the member spoke), keeps what it had stored, records how
many things were lost and tells the member and the operator (issue 33, finding 4)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.calls.service import CallEnded
from bot.i18n import english
from cogs.calls import ended_text
from standins.harness import CallWorld, call_world, free_port
from standins.llm_server import FakeLLM

ALICE = 1001
BEFORE = [("user", "My dog is called Biscuit."), ("assistant", "Biscuit is a lovely name!")]
DURING = [
    ("user", "I start a new job on Monday."),
    ("assistant", "Congratulations!"),
    ("user", "It is at the observatory."),
    ("assistant", "That sounds wonderful."),
]
LOST_TEXT = "2 things you said while the bot was offline could not be saved."


@dataclass
class Setup:
    tmp_path: Path
    llm: FakeLLM | None
    """The upstream LLM with live recall on (the bot's LLM route stores the lines); None: checkpoints store them."""
    database_url: str | None = None

    def world(self) -> AbstractAsyncContextManager[CallWorld]:
        if self.llm is None:
            return call_world(self.tmp_path, database_url=self.database_url)
        return call_world(self.tmp_path, llm_base_url=self.llm.base_url, llm={"timeout_seconds": 1.0})


@pytest.fixture(params=["live_recall_off", "live_recall_on"])
async def setup(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Setup]:
    if request.param == "live_recall_off":
        yield Setup(tmp_path, None)
        return
    fake = FakeLLM()
    await fake.start()
    try:
        yield Setup(tmp_path, fake)
    finally:
        await fake.stop()


async def outage(world: CallWorld, setup: Setup, *, lose_webhooks: bool) -> tuple[str, str]:
    """A call with some lines stored; then the bot stops, the member says more and leaves, the agent stops on
    its idle timeout and its webhooks are sent while the bot is down (all lost, or held to land later)."""
    call_id, agent_id = await world.start_member_call(ALICE)
    if setup.llm is None:
        world.emu.script(agent_id, BEFORE)
        assert await world.calls.checkpoint(call_id)
    else:
        setup.llm.queue_reply(BEFORE[1][1])
        turn = await world.emu.user_says(agent_id, BEFORE[0][1])
        assert turn.outcome == "ok", turn.error
    await world.calls.shutdown(grace_seconds=1)  # the bot is gone: nothing saves what is said from now on
    if lose_webhooks:
        world.emu.webhook_url = f"http://127.0.0.1:{free_port()}/agora/webhook"  # every resend is refused
    else:
        world.emu.hold_webhooks()
    world.emu.script(agent_id, DURING)  # the member talks to the agent; the bot hears none of it
    world.emu.user_left(agent_id)
    world.emu.advance(world.settings.agora.idle_timeout_seconds + 1)
    assert world.emu.agent(agent_id).status == "STOPPED"
    await world.emu.wait_webhooks_idle()
    world.emu.webhook_url = f"{world.web.url}/agora/webhook"
    return call_id, agent_id


def lost_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "never stored" in r.getMessage()]


async def test_after_the_webhooks_were_lost_a_restart_keeps_what_was_stored_and_says_what_was_lost(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.calls")
    async with setup.world() as world:
        call_id, agent_id = await outage(world, setup, lose_webhooks=True)
        lost = [e for e in world.emu.undelivered if e["eventType"] == 103]
        assert len(lost) == 1 and lost[0]["payload"]["agent_id"] == agent_id
        attempts = [a for a in world.emu.webhook_attempts if a.notice_id == lost[0]["noticeId"]]
        assert len(attempts) == 1 + world.emu.webhook_max_retries and all(a.status is None for a in attempts)

        calls = await world.restart()
        assert await calls.reconcile() == {"resumed": 0, "finalized": 1, "failed": 0}

        greeting = ("assistant", world.settings.agora.greeting)
        assert await world.call_lines(call_id) == [greeting, *BEFORE], "what was stored is kept, once"
        call = await world.store.get_call(call_id)
        assert call is not None and (call.state, call.end_reason, call.lines_lost) == ("ended", "idle_timeout", 2)
        assert world.emu.count_calls("history", 404) == 1, "the history was asked for once more"
        assert world.emu.count_calls("turns", 200) == 1
        ended = world.log.ended[-1]
        assert (ended.call_id, ended.turns_stored, ended.lines_lost) == (call_id, 3, 2)
        assert f"3 lines of the conversation were kept. {LOST_TEXT}" in ended_text(ended, english())
        shown_later = await calls.ended_call(call_id)  # what the card shows once the call was processed
        assert shown_later is not None and LOST_TEXT in ended_text(shown_later, english(), 1)
        warnings = lost_warnings(caplog)
        assert len(warnings) == 1 and call_id in warnings[0] and "2 things" in warnings[0]
        assert "Agora ConvoAI" in warnings[0]

        assert await calls.reconcile() == {"resumed": 0, "finalized": 0, "failed": 0}
        assert await world.call_lines(call_id) == [greeting, *BEFORE]
        assert world.emu.count_calls("turns") == 1 and len(world.log.ended) == 1


async def test_a_history_webhook_resent_after_the_restart_recovers_everything_and_no_loss_is_reported(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.calls")
    async with setup.world() as world:
        call_id, _agent_id = await outage(world, setup, lose_webhooks=False)
        calls = await world.restart()  # the web server is up first, as in `run`; Agora's resend lands
        await world.emu.release_webhooks()
        assert await calls.reconcile() == {"resumed": 0, "finalized": 0, "failed": 0}

        full = [("assistant", world.settings.agora.greeting), *BEFORE, *DURING]
        assert await world.call_lines(call_id) == full
        call = await world.store.get_call(call_id)
        assert call is not None and (call.state, call.lines_lost) == ("ended", 0)
        assert [e.lines_lost for e in world.log.ended] == [0]
        assert "offline" not in ended_text(world.log.ended[-1], english())
        assert lost_warnings(caplog) == [] and world.emu.count_calls("turns") == 0


async def test_a_history_webhook_that_lands_after_the_reconcile_brings_the_lost_lines_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.calls")
    async with Setup(tmp_path, None).world() as world:
        call_id, _agent_id = await outage(world, Setup(tmp_path, None), lose_webhooks=False)
        calls = await world.restart()
        assert await calls.reconcile() == {"resumed": 0, "finalized": 1, "failed": 0}
        assert (await world.store.get_call(call_id)).lines_lost == 2  # type: ignore[union-attr]

        await world.emu.release_webhooks()  # the last resend, within Agora's retry window
        full = [("assistant", world.settings.agora.greeting), *BEFORE, *DURING]
        assert await world.call_lines(call_id) == full
        call = await world.store.get_call(call_id)
        assert call is not None and call.lines_lost == 0
        shown_later = await calls.ended_call(call_id)
        assert (
            shown_later is not None
            and shown_later.lines_lost == 0
            and "offline" not in ended_text(shown_later, english())
        )
        assert any("brought back the 2 lost lines" in r.getMessage() for r in caplog.records)


async def test_when_agoras_turns_cannot_be_read_the_call_ends_as_before(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.calls")
    async with Setup(tmp_path, None).world() as world:
        call_id, _agent_id = await outage(world, Setup(tmp_path, None), lose_webhooks=True)
        world.emu.fail_next(20, 503, operation="turns")
        calls = await world.restart()
        assert await calls.reconcile() == {"resumed": 0, "finalized": 1, "failed": 0}
        call = await world.store.get_call(call_id)
        assert call is not None and (call.state, call.lines_lost) == ("ended", 0)
        assert await world.call_lines(call_id) == [("assistant", world.settings.agora.greeting), *BEFORE]
        ended: CallEnded = world.log.ended[-1]
        assert ended.lines_lost == 0 and ended.turns_stored == 3
        assert await world.store.job_state("post_call", call_id) == "pending"
        assert any("Agora ConvoAI turns" in r.getMessage() and call_id in r.getMessage() for r in caplog.records)


async def test_a_private_call_asks_agora_for_nothing_after_a_restart(tmp_path: Path) -> None:
    async with call_world(tmp_path) as world:
        call_id, agent_id = await world.start_member_call(ALICE, private=True)
        await world.calls.shutdown(grace_seconds=1)
        world.emu.webhook_url = f"http://127.0.0.1:{free_port()}/agora/webhook"
        world.emu.script(agent_id, DURING)
        world.emu.user_left(agent_id)
        world.emu.advance(world.settings.agora.idle_timeout_seconds + 1)
        await world.emu.wait_webhooks_idle()
        calls = await world.restart()
        assert await calls.reconcile() == {"resumed": 0, "finalized": 1, "failed": 0}
        assert world.emu.count_calls("turns") == 0 and world.log.ended[-1].lines_lost == 0
        assert await world.call_lines(call_id) == []


async def test_the_lost_count_is_stored_on_postgresql_too(tmp_path: Path, postgres_url: str) -> None:
    setup = Setup(tmp_path, None, postgres_url)
    async with setup.world() as world:
        call_id, _agent_id = await outage(world, setup, lose_webhooks=True)
        calls = await world.restart()
        assert await calls.reconcile() == {"resumed": 0, "finalized": 1, "failed": 0}
        call = await world.store.get_call(call_id)
        assert call is not None and (call.state, call.lines_lost) == ("ended", 2)
        shown_later = await calls.ended_call(call_id)
        assert shown_later is not None and LOST_TEXT in ended_text(shown_later, english())
