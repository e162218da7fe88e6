"""While a call runs: every checkpoint interval, save the agent's history, renew the call's lease and its agent's
token, and end the call when its agent stopped or its time is up."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from bot.agora import AgoraError, AgoraNotFound, ConvoAIClient
from bot.calls.agent_control import AgentControl
from bot.calls.ending import Ending
from bot.calls.leases import Leases
from bot.calls.traffic import MembersWaiting
from bot.logs import bind
from bot.memory.service import MemoryService
from bot.store.models import CallRecord
from bot.store.repository import StorageFull

log = logging.getLogger(__name__)


class CheckpointStore(Protocol):
    async def get_call(self, call_id: str) -> CallRecord | None: ...
    async def call_and_generation(self, call_id: str) -> tuple[CallRecord, int] | None: ...
    async def open_calls(self) -> list[CallRecord]: ...


class Checkpoints:
    def __init__(
        self,
        store: CheckpointStore,
        memory: MemoryService,
        agora: ConvoAIClient,
        *,
        agents: AgentControl,
        ending: Ending,
        leases: Leases,
        members: MembersWaiting,
        clock: Callable[[], float],
        interval_seconds: float,
        max_history: int,
        yield_max_seconds: float,
        run_loops: bool = True,
    ):
        """``run_loops``: each watched call gets its checkpoint loop (the tests drive checkpoints themselves)."""
        self.store = store
        self.memory = memory
        self.agora = agora
        self.agents = agents
        self.ending = ending
        self.leases = leases
        self.members = members
        self.clock = clock
        self.interval_seconds = interval_seconds
        self.max_history = max_history
        self.give_way_seconds = min(yield_max_seconds, interval_seconds / 4)
        self.run_loops = run_loops
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._closed = False

    def is_watched(self, call_id: str) -> bool:
        return call_id in self._tasks

    def watch(self, call_id: str) -> None:
        if not self.run_loops or self._closed or call_id in self._tasks:
            return
        with bind(call_id=call_id):  # every line the loop logs carries the call's id
            task = asyncio.get_running_loop().create_task(self._loop(call_id), name=f"call-{call_id}")
        self._tasks[call_id] = task

        def forget(_task: asyncio.Task[None]) -> None:
            self._tasks.pop(call_id, None)

        task.add_done_callback(forget)

    async def close(self) -> None:
        """At shutdown: stop watching (the calls' leases hand them to the next process)."""
        self._closed = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def save_all(self, grace_seconds: float) -> None:
        """At shutdown: save this process's active calls once more, within ``grace_seconds``."""
        # Only this process's calls: another process's calls are its own business.
        active = [c for c in await self.store.open_calls() if c.state == "active" and c.owner == self.leases.owner]

        async def save() -> None:
            for call in active:
                try:
                    await self.checkpoint(call.call_id, give_way=False)
                except Exception:
                    log.exception("final checkpoint of call %s failed at shutdown", call.call_id)

        try:
            await asyncio.wait_for(save(), timeout=grace_seconds)
        except TimeoutError:
            log.warning("shutdown grace of %.0f s ran out while saving %d calls", grace_seconds, len(active))

    async def _loop(self, call_id: str) -> None:
        full = False
        while not self._closed:
            await asyncio.sleep(self.interval_seconds)
            try:
                if not await self.leases.take(call_id):
                    call = await self.store.get_call(call_id)  # ended: nobody looks after it, nothing to say
                    if call is not None and call.state in ("starting", "active", "ending"):
                        log.info("call %s is looked after by another bot process now", call_id)
                    return
                keep_watching, full = await self.checkpoint(call_id), False
            except StorageFull:
                if not full:  # once, not every checkpoint: Agora keeps the lines meanwhile
                    log.warning("call %s: the database is full; checkpoints resume once there is space", call_id)
                keep_watching, full = True, True
            except Exception:
                log.exception("checkpoint of call %s failed; trying again at the next one", call_id)
                keep_watching = True
            if not keep_watching:
                return

    async def checkpoint(self, call_id: str, *, give_way: bool = True) -> bool:
        """Save the agent's current history; finalize if the agent is gone or the time is up.

        With ``give_way`` (the periodic checkpoint) it first lets the starts and endings in flight finish, for a
        bounded moment (`MembersWaiting.give_way`); a takeover or shutdown saves at once. Returns False once the
        call no longer needs checkpoints."""
        if give_way:
            await self.members.give_way(self.give_way_seconds)
        read = await self.store.call_and_generation(call_id)  # the generation before the history read fences it
        if read is None:
            return False
        call, generation = read
        if call.state != "active" or call.agent_id is None:
            return False
        if self.clock() >= call.started_at + call.max_minutes * 60:
            await self.ending.finalize(call_id, "max_duration")
            return False
        if self.agents.needs_renewal(call):
            await self.agents.renew_token(call_id)
        try:
            history = await self.agora.history(call.agent_id)
        except AgoraNotFound:
            reason = await self.agents.stopped_reason(call.agent_id)
            if reason is None:
                return True
            await self.ending.finalize(call_id, reason)
            return False
        except AgoraError as exc:
            log.warning("checkpoint of call %s failed, will retry: %s", call_id, exc)
            return True
        if not call.private:
            await self.memory.record_snapshot(
                call,
                [(i.role, i.content) for i in history.contents],
                max_history=self.max_history,
                generation=generation,
                current=call,  # read just above: saves the merge reading it again
            )
        return True
