"""The event loop the bot runs on: uvloop (libuv's loop) where it is installed, asyncio's own elsewhere.

Every voice turn through the live-recall route is many small socket reads and writes (each streamed chunk is
relayed as it arrives); on uvloop the loop's own work per turn is a fraction of asyncio's, which is what a turn
waits on when many calls share one process (`bench/live_recall.py`). uvloop is a dependency on every platform it
supports (not Windows); there the bot runs on asyncio's loop, with the same behaviour."""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

GIL_SWITCH_SECONDS = 0.0005
"""How long a thread that wants the GIL waits before the running one is made to hand it over (Python's default
is 5 ms). The database threads (aiosqlite's, one per connection) release the GIL for every SQLite step and must
take it back after each; while the event loop's thread runs Python (a voice turn's memory build, 1-3 ms), each
take used to wait up to the full 5 ms, so a key check or a line's write that needs a few steps took 10-20 ms
under load. Measured with `bench/live_recall.py` at 20 streams: what the proxy adds to p99 time to first byte
fell from 11-20 ms at 5 ms to 8-11 ms at 0.5 ms, at no more CPU per turn."""


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the bot's event loop, with the GIL handed between threads every
    `GIL_SWITCH_SECONDS` while it runs."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(GIL_SWITCH_SECONDS)
    try:
        try:
            import uvloop
        except ImportError:  # Windows: uvloop does not exist there
            return asyncio.run(main)
        return uvloop.run(main)
    finally:
        sys.setswitchinterval(before)


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
