"""Members waiting: the starts and endings in flight, for which the checkpoints of running calls give way."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Iterator


class MembersWaiting:
    def __init__(self) -> None:
        self._count = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """Count an operation a member is waiting for (a start, an ending), so checkpoints give way to it."""
        self._count += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._count -= 1
            if not self._count:
                self._idle.set()

    async def give_way(self, bound: float) -> None:
        """Wait, at most about ``bound`` seconds, until no start or ending is in flight: under a burst of calls the
        checkpoints of running calls (no one waits for them) then do not share the event loop and the database
        with the members who are waiting. A checkpoint is late by at most that much, far less than it takes to
        talk past the agent's history window."""
        if self._idle.is_set() or self._closed:
            return
        # Spread over half the bound, so the checkpoints held back by one burst do not all resume at once.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout=bound * (0.5 + random.random() / 2))

    def close(self) -> None:
        """At shutdown: the final saves wait for nobody."""
        self._closed = True
