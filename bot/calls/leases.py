"""Which bot process looks after a call: a lease in the store, renewed at every checkpoint (and while a call ends),
taken over by another process once it runs out."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Protocol

log = logging.getLogger(__name__)

LEASE_CHECKPOINTS = 3
"""A call stays with the process that looks after it for this many checkpoint intervals after the last renewal."""
STARTING_LEASE_SECONDS = 120.0
"""A starting call (joining the agent, with retries) is left alone by other processes for at least this long."""


class LeaseStore(Protocol):
    async def take_call_lease(self, call_id: str, owner: str, now: float, until: float) -> bool: ...
    async def release_call_leases(self, owner: str) -> None: ...


class Leases:
    def __init__(self, store: LeaseStore, *, owner: str, checkpoint_seconds: float, clock: Callable[[], float]):
        self.store = store
        self.owner = owner
        self.clock = clock
        self.seconds = LEASE_CHECKPOINTS * checkpoint_seconds
        """How long a call stays this process's after its last renewal (every checkpoint renews it). When a
        process dies, another takes its calls over once their leases run out."""

    @property
    def starting_seconds(self) -> float:
        return max(self.seconds, STARTING_LEASE_SECONDS)

    async def take(self, call_id: str) -> bool:
        now = self.clock()
        return await self.store.take_call_lease(call_id, self.owner, now, now + self.seconds)

    @contextlib.asynccontextmanager
    async def holding(self, call_id: str) -> AsyncIterator[None]:
        """Keep renewing this process's lease on the call while the block runs.

        Ending a call (last history read, leave, merge) can outlast one lease period on a saturated process;
        without renewal another process would take the ending over and stop the agent and notify a second time."""

        async def renew() -> None:
            while True:
                await asyncio.sleep(self.seconds / 3)
                try:
                    kept = await self.take(call_id)
                except Exception as exc:  # the database is busy or full: try again at the next beat
                    log.warning("call %s: renewing its lease failed: %s", call_id, exc)
                    continue
                if not kept:
                    log.warning("call %s: another bot process took over its lease while it was ending", call_id)
                    return

        renewing = asyncio.get_running_loop().create_task(renew())
        try:
            yield
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing

    async def release_all(self) -> None:
        """At shutdown: another process takes this one's calls over at once."""
        await self.store.release_call_leases(self.owner)
