"""Unexpected errors reach the member as one friendly line and the operator as a count by kind in /metrics."""

from __future__ import annotations

import pytest

from bot.calls.errors import NoActiveCall
from bot.i18n import english
from tests.harness import CallWorld


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
