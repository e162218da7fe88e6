"""bot.loop: the event loop every command runs on."""

from __future__ import annotations

import asyncio
import sys

import pytest

from bot import loop


async def _inside() -> tuple[str, float]:
    await asyncio.sleep(0)
    return loop.loop_name(), sys.getswitchinterval()


def test_run_hands_the_gil_over_often_while_the_loop_runs_and_restores_it_after() -> None:
    before = sys.getswitchinterval()
    assert before != loop.GIL_SWITCH_SECONDS

    name, during = loop.run(_inside())

    assert name == "uvloop"
    assert during == loop.GIL_SWITCH_SECONDS
    assert sys.getswitchinterval() == before


def test_the_interval_is_restored_when_the_main_coroutine_fails() -> None:
    before = sys.getswitchinterval()

    async def failing() -> None:
        raise LookupError("boom")

    with pytest.raises(LookupError):
        loop.run(failing())

    assert sys.getswitchinterval() == before
