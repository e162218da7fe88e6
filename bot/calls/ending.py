"""Ending a call exactly once, whatever the trigger, and telling the listeners; when the disk is full, ending it all
the same (the agent stops, the member is told) and storing the ending once there is space again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from bot.agora import AgoraError, AgoraNotFound, ConvoAIClient
from bot.calls.agent_control import AgentControl
from bot.calls.errors import NoActiveCall
from bot.calls.leases import Leases
from bot.calls.model import CallEnded, CallListener, card_of
from bot.calls.recovery import RecoveryStore, count_lost_lines
from bot.calls.traffic import MembersWaiting
from bot.logs import bind
from bot.memory.importer import POST_CALL_JOB
from bot.memory.service import MemoryService
from bot.monitor import Counters
from bot.store.models import CallEnd, CallRecord, CallState, EndReason, Role
from bot.store.repository import StorageFull

log = logging.getLogger(__name__)


class EndingStore(RecoveryStore, Protocol):
    async def get_call(self, call_id: str) -> CallRecord | None: ...
    async def open_call_for_user(self, user_id: int) -> CallRecord | None: ...
    async def begin_call_ending(
        self, call_id: str, from_states: Sequence[CallState], **fields: Any
    ) -> tuple[CallRecord, int] | None: ...
    async def memory_generation(self, user_id: int) -> int: ...
    async def end_call(
        self,
        call_id: str,
        *,
        ended_at: float,
        agent_stop_pending: bool,
        post_call_job: str | None = None,
        not_before: float = 0.0,
    ) -> CallEnd: ...
    async def transition_call(
        self, call_id: str, from_states: Sequence[CallState], to_state: CallState, **fields: Any
    ) -> bool: ...
    async def count_call_turns(self, call_id: str) -> int: ...
    async def enqueue_job(self, kind: str, ref_id: str, at: float, *, not_before: float = 0.0) -> bool: ...


@dataclass
class UnsavedEnding:
    """A call's last history and how it ended, read before anything is written; kept in memory until stored (by
    `Ending.save_unsaved` when the disk was full)."""

    call_id: str
    reason: EndReason
    at: float
    window: list[tuple[Role, str]] | None = None
    generation: int | None = None
    stopped: bool = True


class Ending:
    def __init__(
        self,
        store: EndingStore,
        memory: MemoryService,
        agora: ConvoAIClient,
        *,
        agents: AgentControl,
        leases: Leases,
        members: MembersWaiting,
        counters: Counters,
        clock: Callable[[], float],
        max_history: int,
        history_webhook: bool,
        webhook_grace_seconds: float,
        released: Sequence[Callable[[str], None]] = (),
    ):
        """``history_webhook``: Agora's history webhook can arrive (a webhook secret is set), so post-call processing
        waits a moment for it. ``released``: told the id of each call whose ending is complete."""
        self.store = store
        self.memory = memory
        self.agora = agora
        self.agents = agents
        self.leases = leases
        self.members = members
        self.counters = counters
        self.clock = clock
        self.max_history = max_history
        self.history_webhook = history_webhook
        self.webhook_grace_seconds = webhook_grace_seconds
        self._released = [memory.release_call, agents.forget, *released]
        self._listeners: list[CallListener] = []
        self._finalizing: dict[str, asyncio.Task[CallEnded | None]] = {}
        self._unsaved: dict[str, UnsavedEnding] = {}
        self._final_history: set[str] = set()

    # ---- listeners -------------------------------------------------------------------------------------

    def add_listener(self, listener: CallListener) -> None:
        self._listeners.append(listener)

    async def _notify(self, ended: CallEnded) -> None:
        for listener in self._listeners:
            try:
                await listener.call_ended(ended)
            except Exception:
                log.exception("a call-ended listener failed for call %s", ended.call_id)

    # ---- ending ----------------------------------------------------------------------------------------

    async def hang_up(self, user_id: int, *, reason: EndReason = "hangup") -> CallEnded:
        call = await self.store.open_call_for_user(user_id)
        if call is None:
            raise NoActiveCall()
        ended = await self.finalize(call.call_id, reason)
        if ended is None:
            raise NoActiveCall()
        return ended

    def is_finalizing(self, call_id: str) -> bool:
        return call_id in self._finalizing

    async def finalize(self, call_id: str, reason: EndReason, *, unwatched: bool = False) -> CallEnded | None:
        """End a call exactly once, whatever the trigger. Concurrent triggers in this process share the
        winner's result; a trigger that loses to another process gets None. ``unwatched``: its agent stopped
        while no bot process watched the call, so what was said since the last checkpoint may be lost."""
        task = self._finalizing.get(call_id)
        if task is None:
            with bind(call_id=call_id):
                task = asyncio.get_running_loop().create_task(self._finalize_once(call_id, reason, unwatched))
            self._finalizing[call_id] = task
            task.add_done_callback(lambda _done: self._finalizing.pop(call_id, None))
        with self.members.waiting():
            return await asyncio.shield(task)  # a cancelled trigger must not leave the call half-ended

    async def _finalize_once(self, call_id: str, reason: EndReason, unwatched: bool = False) -> CallEnded | None:
        now = self.clock()
        try:
            began = await self.store.begin_call_ending(
                call_id,
                ["starting", "active"],
                end_reason=reason,
                owner=self.leases.owner,
                lease_until=now + self.leases.seconds,
            )
        except StorageFull:
            return await self._end_without_storage(call_id, reason)
        if began is None:
            return None
        call, generation = began
        return await self.complete(call, generation=generation, unwatched=unwatched)

    async def _last_history(self, call: CallRecord, generation: int | None = None) -> UnsavedEnding:
        """Read the history one last time (kept in memory); writes nothing. ``generation`` is the member's memory
        generation when the caller has just read it (it must be read before the history)."""
        ending = UnsavedEnding(call.call_id, call.end_reason or "ended", self.clock())
        if call.agent_id is None or call.private:
            return ending
        try:
            ending.generation = (
                generation if generation is not None else await self.store.memory_generation(call.user_id)
            )
            history = await self.agora.history(call.agent_id)
            ending.window = [(i.role, i.content) for i in history.contents]
            ending.at = self.clock()
        except AgoraNotFound:
            log.info("call %s: the agent had already stopped; keeping the last checkpoint", call.call_id)
        except AgoraError as exc:
            log.warning("call %s: last history read failed: %s", call.call_id, exc)
        return ending

    async def _record(self, call: CallRecord, ending: UnsavedEnding) -> None:
        if ending.window is not None and not call.private:
            await self.memory.record_snapshot(
                call,
                ending.window,
                max_history=self.max_history,
                generation=ending.generation,
                captured=int(ending.at * 1000),
                at=ending.at,
                current=call,
            )

    async def complete(
        self, call: CallRecord, *, generation: int | None = None, unwatched: bool = False
    ) -> CallEnded | None:
        """The idempotent tail of finalize (and of a takeover of a call that was ending): last history read, leave,
        mark ended, queue processing.

        The agent is stopped while the last history is stored (the history is read before, so nothing said
        is lost): the member's hang-up waits for the slower of the two, not for both in turn. A full disk does
        not keep the agent running: it is stopped first, the member is told the call could not be saved yet,
        and what was said is kept in memory and stored by `save_unsaved` once there is space.

        This process's lease on the call is renewed until the call has ended, not while the listeners are told
        (a card edit on a busy Discord): an ended call has no lease to renew."""
        async with self.leases.holding(call.call_id):
            ended = await self._end(call, generation, unwatched)
        if ended is not None:
            await self._notify(ended)
        return ended

    async def _end(self, call: CallRecord, generation: int | None, unwatched: bool) -> CallEnded | None:
        ending = await self._last_history(call, generation)
        leaving = None if call.agent_id is None else asyncio.ensure_future(self.agents.leave_quietly(call.agent_id))
        saved = True
        try:
            await self._record(call, ending)
        except StorageFull:
            saved = False
        finally:
            if leaving is not None:
                ending.stopped = await leaving
        if saved and unwatched and call.call_id not in self._final_history:
            call = replace(call, lines_lost=await count_lost_lines(self.agora, self.store, call))
        now = self.clock()
        job = POST_CALL_JOB if saved and not call.private else None
        try:
            end = await self.store.end_call(
                call.call_id,
                ended_at=now,
                agent_stop_pending=not ending.stopped,
                post_call_job=job,
                not_before=now + (self._history_grace(call) if job else 0.0),
            )
        except StorageFull:
            return await self._unsaved_ending(call, ending)
        won = end.won
        if won and not ending.stopped and call.agent_id is not None:
            log.warning("call %s ended but Agora would not stop its agent; retrying in the background", call.call_id)
            self.agents.keep_stopping(call.call_id, call.agent_id)
        for released in self._released:
            released(call.call_id)
        if not won:
            return None
        if not saved:
            return await self._unsaved_ending(call, ending)
        ended = CallEnded(
            call_id=call.call_id,
            user_id=call.user_id,
            guild_id=call.guild_id,
            reason=call.end_reason or "ended",
            turns_stored=end.turns,
            private=call.private,
            card=card_of(call),
            lines_lost=call.lines_lost,
        )
        self.counters.call_ended(ended.reason, ended.turns_stored)
        ids = {"call_id": ended.call_id, "user_id": ended.user_id, "guild_id": ended.guild_id}
        log.info("call ended (%s), %d lines stored", ended.reason, ended.turns_stored, extra=ids)
        return ended

    @property
    def unsaved(self) -> int:
        """Ended calls kept in memory until the disk has room (``save_unsaved``)."""
        return len(self._unsaved)

    async def ended_call(self, call_id: str) -> CallEnded | None:
        """A call that has ended, as its card shows it, for a process that did not end it (or a restarted one)."""
        call = await self.store.get_call(call_id)
        if call is None or call.state != "ended":
            return None
        return CallEnded(
            call_id=call.call_id,
            user_id=call.user_id,
            guild_id=call.guild_id,
            reason=call.end_reason or "ended",
            turns_stored=await self.store.count_call_turns(call.call_id),
            private=call.private,
            card=card_of(call),
            lines_lost=call.lines_lost,
        )

    # ---- Agora's final history -------------------------------------------------------------------------

    def final_history_arrived(self, call_id: str) -> None:
        """Agora's history webhook for a call not yet ended came: its post-call processing need not wait for it."""
        self._final_history.add(call_id)

    def _history_grace(self, call: CallRecord) -> float:
        """How long post-call processing waits for Agora's final history: not at all once it arrived, or when
        no webhook can bring it."""
        if not self.history_webhook or call.call_id in self._final_history:
            self._final_history.discard(call.call_id)
            return 0.0
        return self.webhook_grace_seconds

    # ---- a full disk -----------------------------------------------------------------------------------

    async def _end_without_storage(self, call_id: str, reason: EndReason) -> CallEnded | None:
        """The database cannot be written at all (disk full): still stop the agent and end the call for the
        member; the store catches up in `save_unsaved`."""
        if call_id in self._unsaved:
            return None
        call = await self.store.get_call(call_id)
        if call is None or call.state not in ("starting", "active"):
            return None
        ending = await self._last_history(replace(call, end_reason=reason))
        if call.agent_id is not None:
            ending.stopped = await self.agents.leave_quietly(call.agent_id)
        ended = await self._unsaved_ending(call, ending)
        await self._notify(ended)
        return ended

    async def _unsaved_ending(self, call: CallRecord, ending: UnsavedEnding) -> CallEnded:
        self._unsaved[call.call_id] = ending
        log.error(
            "call %s ended but the database is full: its end and last history are kept in memory and stored "
            "when there is space again (free disk space next to memory.database_path)",
            call.call_id,
        )
        if not ending.stopped and call.agent_id is not None:
            self.agents.keep_stopping(call.call_id, call.agent_id)
        ended = CallEnded(
            call_id=call.call_id,
            user_id=call.user_id,
            guild_id=call.guild_id,
            reason=ending.reason,
            turns_stored=await self.store.count_call_turns(call.call_id),
            private=call.private,
            saved=False,
        )
        return ended

    async def save_unsaved(self) -> int:
        """Store the endings a full disk kept in memory (from the periodic sweep); stops while still full."""
        saved = 0
        for call_id, ending in list(self._unsaved.items()):
            try:
                call = await self.store.get_call(call_id)
                if call is not None:
                    if call.state in ("starting", "active"):
                        await self.store.transition_call(
                            call_id, ["starting", "active"], "ending", end_reason=ending.reason
                        )
                    await self._record(call, ending)
                    await self.store.transition_call(
                        call_id, ["ending"], "ended", ended_at=ending.at, agent_stop_pending=not ending.stopped
                    )
                    if not call.private and await self.store.count_call_turns(call_id):
                        await self.store.enqueue_job(
                            POST_CALL_JOB, call_id, self.clock(), not_before=self.clock() + self._history_grace(call)
                        )
            except StorageFull:
                log.warning("the database is still full; %d ended calls wait to be stored", len(self._unsaved))
                return saved
            del self._unsaved[call_id]
            self.memory.release_call(call_id)
            saved += 1
            log.info("call %s: stored after the disk had room again", call_id)
        return saved
