"""Who may forget what, and what the member learns goes before it goes: the rules `/forget` and the `/memory` panel
apply before anything is deleted. The deleting itself is `MemoryService`'s.

A member forgets only their own facts, calls and chats, whatever id a command or a button names; a call is
forgotten only once it is over (while it runs its lines are still being written: `/hangup` first). What a request
names that is not the member's reads exactly like what does not exist, so no id can probe another member's
memory."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar

from bot.memory.forgetting import FactTraces
from bot.memory.service import MemoryService
from bot.store.models import CallRecord, ChatRecord, Conversation, ConversationSummary, FactRecord, ForgetResult

log = logging.getLogger(__name__)

T = TypeVar("T")

CLOSED_CALL_STATES = ("ended", "failed")
OFFER_WAIT_SECONDS = 2.0
"""How long `/forget`'s suggestions wait for the store. Discord wants the first answer to every interaction within
3 s ("you must send an initial response within 3 seconds", discord-testing §4.3) and an autocomplete cannot be
deferred: its answer is the suggestions themselves (callback 8, §5). The store may wait 4-5 s behind another
writer's lock (`memory.lock_timeout_seconds`), so past this the suggestions say the memory is busy, in time."""
Refusal = Literal["not_found", "still_running"]
"""Why a conversation cannot be forgotten: not the member's (or not there), or a call still running."""


class ForgetRequestStore(Protocol):
    """What the rules read: whose a conversation is and whether it is over, and what forgetting would take."""

    async def get_call(self, call_id: str) -> CallRecord | None: ...
    async def get_chat(self, chat_id: str) -> ChatRecord | None: ...
    async def forget_preview(self, convo: Conversation) -> ForgetResult: ...
    async def count_facts(self, user_id: int, *, include_superseded: bool = False) -> int: ...
    async def count_conversations(self, user_id: int) -> int: ...
    async def list_facts(self, user_id: int, *, limit: int = 100) -> list[FactRecord]: ...
    async def list_conversations(
        self, user_id: int, *, offset: int = 0, limit: int = 10
    ) -> list[ConversationSummary]: ...


@dataclass(frozen=True)
class Forgettable:
    """A call or chat of the member's that is over, so it may be forgotten."""

    conversation: Conversation
    started_at: float


Counted = tuple[Forgettable, ForgetResult]
"""A conversation the member may forget, with what forgetting it deletes (or deleted)."""


@dataclass(frozen=True)
class Everything:
    """What forgetting everything takes: every fact (earlier versions included) and every call and chat."""

    facts: int
    conversations: int


class ForgetRequests:
    def __init__(self, store: ForgetRequestStore, memory: MemoryService) -> None:
        self.store = store
        self.memory = memory

    # ---- one fact --------------------------------------------------------------------------------------

    async def fact(self, user_id: int, fact_id: int) -> FactTraces | None:
        """The member's fact and what forgetting it also removes (`FactTraces.removes_more`: ask first); None when
        it is not theirs."""
        traces = await self.memory.fact_traces(user_id, fact_id)
        if traces is None:
            log.info("user %s asked to forget a fact that is not theirs or does not exist", user_id)
        return traces

    async def forget_fact(self, user_id: int, fact_id: int) -> FactTraces | None:
        traces = await self.memory.forget_fact(user_id, fact_id)
        if traces is None:
            log.info("user %s asked to forget a fact that is not theirs or does not exist", user_id)
            return None
        log.info(
            "user %s forgot fact %s with %d lines and %d summaries",
            user_id,
            fact_id,
            len(traces.turn_ids),
            len(traces.summaries),
        )
        return traces

    async def facts(self, user_id: int, limit: int) -> list[FactRecord] | None:
        """The member's current facts, newest first: what `/forget item` offers; None when the store did not answer
        within ``OFFER_WAIT_SECONDS``."""
        return await self._in_time(self.store.list_facts(user_id, limit=limit), user_id)

    # ---- one call or chat ------------------------------------------------------------------------------

    async def conversation(self, user_id: int, convo: Conversation) -> Forgettable | Refusal:
        """``convo`` with when it started, when the member may forget it; otherwise why not."""
        started_at: float | None = None
        if convo.kind == "call":
            call = await self.store.get_call(convo.ref_id)
            if call is not None and call.user_id == user_id:
                if call.state not in CLOSED_CALL_STATES:
                    return "still_running"
                started_at = call.started_at
        else:
            chat = await self.store.get_chat(convo.ref_id)
            if chat is not None and chat.user_id == user_id:
                started_at = chat.started_at
        if started_at is None:
            log.info("user %s asked to forget a conversation that is not theirs or does not exist", user_id)
            return "not_found"
        return Forgettable(convo, started_at)

    async def preview_conversation(self, user_id: int, convo: Conversation) -> Counted | Refusal:
        """What forgetting ``convo`` would delete, deleting nothing, for the member to confirm first."""
        found = await self.conversation(user_id, convo)
        if isinstance(found, str):
            return found
        return found, await self.store.forget_preview(convo)

    async def forget_conversation(self, user_id: int, convo: Conversation) -> Counted | Refusal:
        """Forget ``convo`` when the member may (asked again: the confirmation may be minutes old)."""
        found = await self.conversation(user_id, convo)
        if isinstance(found, str):
            return found
        result = await self.memory.forget_conversation(user_id, convo.kind, convo.ref_id)
        if result is None:
            log.info("user %s asked to forget a conversation that is not theirs or does not exist", user_id)
            return "not_found"
        log.info(
            "user %s forgot %s %s: %d turns, %d facts", user_id, convo.kind, convo.ref_id, result.turns, result.facts
        )
        return found, result

    async def conversations(self, user_id: int, limit: int) -> list[ConversationSummary] | None:
        """The member's calls and chats, newest first: what `/forget call` offers; None when the store did not
        answer within ``OFFER_WAIT_SECONDS``."""
        return await self._in_time(self.store.list_conversations(user_id, limit=limit), user_id)

    @staticmethod
    async def _in_time(read: Awaitable[T], user_id: int) -> T | None:
        try:
            async with asyncio.timeout(OFFER_WAIT_SECONDS):
                return await read
        except TimeoutError:
            log.warning(
                "the store did not answer within %.1f s: user %s was told their memory is busy",
                OFFER_WAIT_SECONDS,
                user_id,
            )
            return None

    # ---- everything ------------------------------------------------------------------------------------

    async def everything(self, user_id: int) -> Everything:
        return Everything(
            await self.store.count_facts(user_id, include_superseded=True),
            await self.store.count_conversations(user_id),
        )

    async def forget_everything(self, user_id: int) -> ForgetResult:
        result = await self.memory.forget_everything(user_id)
        log.info(
            "user %s forgot everything: %d calls, %d chats, %d turns, %d facts",
            user_id,
            result.calls,
            result.chats,
            result.turns,
            result.facts,
        )
        return result
