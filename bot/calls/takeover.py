"""Taking over calls no live bot process looks after (after a restart, or when another process died): each is
looked up at Agora and resumed or ended."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from bot.agora import AgoraError, AgoraNotFound, ConvoAIClient
from bot.calls.agent import RUNNING_STATUSES, stop_reason
from bot.calls.agent_control import AgentControl
from bot.calls.checkpoints import Checkpoints
from bot.calls.ending import Ending
from bot.calls.leases import Leases
from bot.calls.starting import CallStarter
from bot.store.models import CallRecord

log = logging.getLogger(__name__)


class TakeoverStore(Protocol):
    async def open_calls(self) -> list[CallRecord]: ...


class Takeover:
    def __init__(
        self,
        store: TakeoverStore,
        agora: ConvoAIClient,
        *,
        agents: AgentControl,
        checkpoints: Checkpoints,
        ending: Ending,
        leases: Leases,
        starter: CallStarter,
        drain_inbox: Callable[[], Awaitable[int]],
        sweep_seconds: float,
    ):
        self.store = store
        self.agora = agora
        self.agents = agents
        self.checkpoints = checkpoints
        self.ending = ending
        self.leases = leases
        self.starter = starter
        self.drain_inbox = drain_inbox
        self.sweep_seconds = sweep_seconds
        self._closed = False

    def close(self) -> None:
        self._closed = True

    def _busy_here(self, call_id: str) -> bool:
        return (
            self.checkpoints.is_watched(call_id)
            or self.ending.is_finalizing(call_id)
            or self.starter.is_starting(call_id)
        )

    async def reconcile(self) -> dict[str, int]:
        """After a (re)start, and then periodically: every call not ended that no live bot process looks after
        (its lease ran out, or was released) is taken over, looked up at Agora, and resumed or finalized."""
        counts = {"resumed": 0, "finalized": 0, "failed": 0}
        try:
            await self.drain_inbox()
        except Exception:
            log.exception("the webhook inbox could not be processed at start-up; the sweep retries")
        await self.agents.stop_left_running()
        for call in await self.store.open_calls():
            if self._busy_here(call.call_id):
                continue
            if self._closed:
                break
            if not await self.leases.take(call.call_id):
                continue  # another live process looks after it
            if call.state == "starting":
                await self.starter.abandon(call, "the bot restarted while the call was starting")
                counts["failed"] += 1
                continue
            if call.state == "ending":
                await self.ending.complete(call)
                counts["finalized"] += 1
                continue
            assert call.agent_id is not None
            try:
                info = await self.agora.query(call.agent_id)
            except AgoraNotFound:
                await self.ending.finalize(call.call_id, "agent_stopped", unwatched=True)
                counts["finalized"] += 1
                continue
            except AgoraError as exc:
                log.warning("call %s: Agora unreachable during reconcile, resuming checkpoints: %s", call.call_id, exc)
                info = None
            if info is None or info.status in RUNNING_STATUSES:
                if info is not None:
                    # Save what Agora still offers now: its history window keeps sliding while we wait.
                    try:
                        await self.checkpoints.checkpoint(call.call_id, give_way=False)
                    except Exception:
                        log.exception("call %s: checkpoint after the restart failed; the loop retries", call.call_id)
                self.checkpoints.watch(call.call_id)
                counts["resumed"] += 1
            else:
                await self.ending.finalize(call.call_id, stop_reason(info.message), unwatched=True)
                counts["finalized"] += 1
        return counts

    async def run(self, stop: asyncio.Event) -> None:
        """Take over the calls of bot processes that died, a few times per lease period."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.sweep_seconds)
            if stop.is_set() or self._closed:
                return
            try:
                counts = await self.reconcile()
                if any(counts.values()):
                    log.info("took over the calls of a stopped bot process: %s", counts)
            except Exception:
                log.exception("taking over orphaned calls failed; trying again shortly")
