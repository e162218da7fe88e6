"""The event loop the bot runs on: uvloop (libuv's loop) where it is installed, asyncio's own elsewhere.

Every voice turn through the live-recall route is many small socket reads and writes (each streamed chunk is
relayed as it arrives); on uvloop the loop's own work per turn is a fraction of asyncio's, which is what a turn
waits on when many calls share one process (`bench/live_recall.py`). uvloop is a dependency on every platform it
supports (not Windows); there the bot runs on asyncio's loop, with the same behaviour."""

from __future__ import annotations

import asyncio
import gc
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


def freeze_startup_objects() -> None:
    """Leave what the process holds once started (modules, classes, functions, clients, the tokenizer) out of
    every later garbage collection: collect once, then ``gc.freeze()``.

    A full collection visits every reference of every object the collector tracks; in the running bot about
    half of those belong to what was loaded at start and lives as long as the process, so each full collection
    (every voice turn on the event loop waits it out) took some 25-50 ms more than the objects made since need.
    Frozen objects are still freed when nothing refers to them any more; only a reference cycle among them
    would never be collected, and what is alive when the bot has just started lives until it stops. Called
    once, when start-up is done (``Services.start_background``)."""
    gc.collect()
    gc.freeze()
