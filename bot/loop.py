"""The event loop the bot runs on: uvloop (libuv's loop) where it is installed, asyncio's own elsewhere.

Every voice turn through the live-recall route is many small socket reads and writes (each streamed chunk is
relayed as it arrives); on uvloop the loop's own work per turn is a fraction of asyncio's, which is what a turn
waits on when many calls share one process (`bench/live_recall.py`). uvloop is a dependency on every platform it
supports (not Windows); there the bot runs on asyncio's loop, with the same behaviour."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the bot's event loop."""
    try:
        import uvloop
    except ImportError:  # Windows: uvloop does not exist there
        return asyncio.run(main)
    return uvloop.run(main)


def loop_name() -> str:
    """Which event loop runs the calling coroutine ("uvloop" or "asyncio"), for `check` and /healthz."""
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"
