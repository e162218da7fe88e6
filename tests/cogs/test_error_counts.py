"""Unexpected errors reach the member as one friendly line and the operator as a count by kind in /metrics, from a
command, a button or a direct message alike."""

from __future__ import annotations

import pytest
from discord.ext import commands

from bot.app import Services
from bot.calls.errors import NoActiveCall
from bot.i18n import english
from standins.harness import CallWorld
from standins.llm_server import FakeLLM


async def test_an_unexpected_error_is_counted_by_kind(
    simcord_env, world: CallWorld, member, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, channel, alice = member
    await world.store.set_consent(alice.id, True, 0.0)

    async def broken_start(**kwargs: object) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(world.calls, "start", broken_start)
    result = await alice.slash(channel, "call")
    assert result.ephemeral and result.response.content == english()("errors.something_went_wrong")
    assert isinstance(simcord_env.errors[-1].original, KeyError)

    report = await world.monitor.report()
    assert report["counters"]["errors"] == {"KeyError": 1}
    assert 'memory_call_bot_errors_total{kind="KeyError"} 1.0' in (await world.monitor.prometheus()).decode()

    refused = await alice.slash(channel, "hangup")  # a refusal the member caused is not an error
    assert "You don't have a call running" in refused.response.content
    assert isinstance(simcord_env.errors[-1].original, NoActiveCall)
    assert (await world.monitor.report())["counters"]["errors"] == {"KeyError": 1}


async def test_direct_messages_go_through_the_same_funnel(
    simcord_env, world: CallWorld, services: Services, fake_llm: FakeLLM, member, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, alice = member
    await world.store.set_consent(alice.id, True, 0.0)
    words = english()
    chat = services.chat
    assert chat is not None

    def broken_reply(*args: object, **kwargs: object) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(chat, "reply", broken_reply)
    await alice.user.send_dm("Hello?")
    assert alice.user.dm_channel.last_message.content == words("errors.something_went_wrong")
    assert (await world.monitor.report())["counters"]["errors"] == {"KeyError": 1}

    services.chat = None  # a refusal: said as a command says it, and not counted
    await alice.user.send_dm("Hello again?")
    assert alice.user.dm_channel.last_message.content == words("errors.chat_disabled")
    assert (await world.monitor.report())["counters"]["errors"] == {"KeyError": 1}


async def test_too_many_direct_messages_read_like_a_commands_cooldown(
    simcord_env, world: CallWorld, fake_llm: FakeLLM, member
) -> None:
    _, _, alice = member
    await world.store.set_consent(alice.id, True, 0.0)
    one_a_minute = commands.CooldownMapping.from_cooldown(1, 60.0, commands.BucketType.user)
    simcord_env.bot.get_cog("Chat").dm_limits = one_a_minute
    fake_llm.queue_reply("Hi!")
    await alice.user.send_dm("One")
    await alice.user.send_dm("Two")

    before, after = english()("errors.cooldown", when="\0").split("\0")
    slow_down = alice.user.dm_channel.last_message.content
    assert slow_down.startswith(before) and slow_down.endswith(after) and "<t:" in slow_down
    assert len(fake_llm.requests) == 1
    assert (await world.monitor.report())["counters"]["errors"] == {}
