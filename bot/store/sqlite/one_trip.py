"""The SQLite backend's one speed mechanism with a private dependency: an operation run whole on aiosqlite's database
thread, in one trip.

aiosqlite runs everything on one thread per connection: each of its public calls (an execute, a fetch, a close)
queues one function to that thread and waits for its result, a trip that costs a queue put, a thread switch and a
wake-up of the event loop. ``on_thread`` queues a whole operation (``bot.store.sqlite.trips``: several statements,
inside one transaction when run with ``trips.in_transaction``) the same way, through aiosqlite's private
``Connection._execute`` and the ``sqlite3.Connection`` behind its private ``Connection._conn``.

Kept because it pays: run as one trip per statement instead, a call start took 10 trips instead of 5 and 12% more
of the bot's CPU (``bench/calls.py``, CPU per call start, median of 9 runs side by side with this one, 4% to 42%
apart on a shared two-core machine); a proxied voice turn took 5-8% more (``bench/live_recall.py``, 20 streams).

aiosqlite's version is pinned in pyproject.toml; ``tests/store/test_one_trip.py`` fails when the pin and the installed
version differ, or when the attributes used here change shape: check them before moving the pin.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiosqlite

T = TypeVar("T")


async def on_thread(db: aiosqlite.Connection, work: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``work(conn, *args, **kwargs)`` on the connection's database thread, in one trip: ``conn`` is the plain
    ``sqlite3.Connection`` (with the connection's row factory), and ``work`` runs in order with every other call
    queued on the connection. It must not touch the event loop."""
    run: Callable[..., Awaitable[T]] = db._execute
    return await run(work, db._conn, *args, **kwargs)
