"""Text chat with the bot on the same memory as voice calls.

A member's messages form a chat session that ends after ``idle_minutes`` of silence (or on request) and is then
queued as a ``post_chat`` job, exactly like a finished call. Turns are stored as ``text`` turns of the session,
so what is said here reaches the next call's context, and the other way round.

The memory block is built before the new message is stored: otherwise the query-aware retrieval would find
the message itself as the best "related line". Private messages, and messages of a member whose memory is
paused, are neither stored nor given any memory: the model sees only the persona and that message.

While the member's memory is on, the model is also offered the memory tools (``bot.memory.tools``: remember,
correct, forget), so "remember that…" or "that's wrong, I moved to Leeds" work here as in a call: its calls are
carried out for this member only, and it is asked again with their results; only what it says reaches the member.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncGenerator, Callable
from typing import Any, Protocol

from bot.llm.client import LLMClient
from bot.memory.own_words import OwnWords
from bot.memory.postcall import POST_CHAT_JOB
from bot.memory.service import MemoryService
from bot.memory.tokens import estimate_message_tokens
from bot.memory.tools import MAX_ROUNDS, MEMORY_TOOLS, ToolTurn
from bot.store.models import ChatRecord, Conversation, TurnRecord, UserRecord, remembers


class ChatStore(Protocol):
    """What text chat reads and writes."""

    async def append_chat_turn(
        self,
        chat_id: str,
        user_id: int,
        role: str,
        content: str,
        at: float,
        *,
        generation: int | None = None,
        specifics: int | None = None,
    ) -> int | None: ...
    async def chat_turns(self, chat_id: str) -> list[TurnRecord]: ...
    async def create_chat(self, chat: ChatRecord) -> None: ...
    async def end_chat(self, chat_id: str, at: float) -> bool: ...
    async def enqueue_job(self, kind: str, ref_id: str, at: float, *, not_before: float = 0.0) -> bool: ...
    async def get_chat(self, chat_id: str) -> ChatRecord | None: ...
    async def get_user(self, user_id: int) -> UserRecord | None: ...
    async def idle_chats(self, last_message_before: float) -> list[ChatRecord]: ...
    async def memory_generation(self, user_id: int) -> int: ...
    async def open_chat_for_user(self, user_id: int) -> ChatRecord | None: ...


log = logging.getLogger(__name__)

HISTORY_TURNS = 20
HISTORY_TOKENS = 2000


class ChatDisabled(Exception):
    """Text chat needs an LLM, and none is configured."""


class ChatService:
    def __init__(
        self,
        store: ChatStore,
        memory: MemoryService,
        llm: LLMClient | None,
        *,
        idle_minutes: float,
        persona: str,
        clock: Callable[[], float] = time.time,
        history_turns: int = HISTORY_TURNS,
        history_tokens: int = HISTORY_TOKENS,
        own_words: OwnWords | None = None,
    ):
        """``own_words``: offer the model the memory tools while the member's memory is on."""
        self.store = store
        self.own_words = own_words
        self.memory = memory
        self.llm = llm
        self.idle_seconds = idle_minutes * 60
        self.persona = persona
        self._clock = clock
        self.history_turns = history_turns
        self.history_tokens = history_tokens
        self._locks: dict[int, asyncio.Lock] = {}

    @property
    def enabled(self) -> bool:
        return self.llm is not None

    def reply(
        self, user_id: int, guild_id: int | None, message: str, *, private: bool = False, public: bool = False
    ) -> AsyncGenerator[str, None]:
        """Stream the answer to one message as text deltas. ``private``: the member asked for no memory this
        once. ``public``: the answer is posted where others read it, so it never reads or writes memory, whatever
        the member chose (nothing private can surface in a channel).

        Raises ChatDisabled at once (not on first iteration) when no LLM is configured. The assistant's answer
        is stored only once it is complete; if the stream fails or the consumer stops early, the member's
        message stays stored and no partial answer is."""
        if self.llm is None:
            raise ChatDisabled("text chat needs an LLM: set LLM_BASE_URL")
        return self._reply(self.llm, user_id, guild_id, message, private or public)

    async def _reply(
        self, llm: LLMClient, user_id: int, guild_id: int | None, message: str, private: bool
    ) -> AsyncGenerator[str, None]:
        user = await self.store.get_user(user_id)
        remember = remembers(user, private=private)
        if not remember:
            messages = [{"role": "system", "content": self.persona}, {"role": "user", "content": message}]
            async with contextlib.aclosing(llm.stream(messages)) as stream:
                async for delta in stream:
                    yield delta
            return

        generation = await self.store.memory_generation(user_id)  # a forget or pause from now on fences the writes
        context = await self.memory.build_context(user_id, persona=self.persona, query=message)
        async with self._lock(user_id):
            chat = await self._session(user_id, guild_id)
            history = await self._history(chat.chat_id)
            await self.store.append_chat_turn(
                chat.chat_id, user_id, "user", message, self._clock(), generation=generation
            )
        request: dict[str, Any] = {"messages": [*context, *history, {"role": "user", "content": message}]}
        tools = None
        if self.own_words is not None:
            request["tools"] = MEMORY_TOOLS
            tools = ToolTurn(self.own_words, user_id, Conversation("chat", chat.chat_id), generation, request)

        parts: list[str] = []
        async with contextlib.aclosing(self._answer(llm, request, tools)) as stream:
            async for delta in stream:
                parts.append(delta)
                yield delta
        answer = "".join(parts)
        if answer.strip():
            await self.store.append_chat_turn(
                chat.chat_id, user_id, "assistant", answer, self._clock(), generation=generation
            )

    async def _answer(
        self, llm: LLMClient, request: dict[str, Any], tools: ToolTurn | None
    ) -> AsyncGenerator[str, None]:
        """The model's text for ``request``; with ``tools``, each round of memory tool calls is carried out and
        the model asked again, and its text before and after them is the answer."""
        while True:
            said: list[str] = []
            stream = llm.stream(
                request["messages"],
                tools=request.get("tools"),
                tool_choice=request.get("tool_choice"),
                on_chunk=None if tools is None else tools.calls.take,
            )
            async with contextlib.aclosing(stream) as deltas:
                async for delta in deltas:
                    said.append(delta)
                    yield delta
            if tools is None or not tools.calls.pending or tools.rounds >= MAX_ROUNDS:
                return  # after the last round, calls the model was told it may not make are not carried out
            request = await tools.ask_again("".join(said))

    async def close_idle_sessions(self) -> int:
        """End every session silent for longer than the idle gap and queue it; returns how many were ended."""
        cutoff = self._clock() - self.idle_seconds
        ended = 0
        for listed in await self.store.idle_chats(cutoff):
            async with self._lock(listed.user_id):
                chat = await self.store.get_chat(listed.chat_id)
                if chat is None or chat.ended_at is not None or chat.last_message_at >= cutoff:
                    continue
                if await self._end(chat):
                    ended += 1
        return ended

    async def end_session(self, user_id: int) -> bool:
        """End the member's open session now (e.g. they said goodbye); False when none was open."""
        async with self._lock(user_id):
            chat = await self.store.open_chat_for_user(user_id)
            return chat is not None and await self._end(chat)

    # ---- sessions --------------------------------------------------------------------------------------

    def _lock(self, user_id: int) -> asyncio.Lock:
        return self._locks.setdefault(user_id, asyncio.Lock())

    async def _session(self, user_id: int, guild_id: int | None) -> ChatRecord:
        now = self._clock()
        chat = await self.store.open_chat_for_user(user_id)
        if chat is not None and now - chat.last_message_at > self.idle_seconds:
            await self._end(chat)
            chat = None
        if chat is None:
            chat = ChatRecord(
                chat_id=f"chat-{uuid.uuid4().hex}",
                user_id=user_id,
                guild_id=guild_id,
                private=False,
                started_at=now,
                last_message_at=now,
            )
            await self.store.create_chat(chat)
        return chat

    async def _end(self, chat: ChatRecord) -> bool:
        """Queue first, then end: a crash in between leaves a queued job that waits for the session to end,
        never an ended session that nobody processes."""
        await self.store.enqueue_job(POST_CHAT_JOB, chat.chat_id, self._clock())
        ended = await self.store.end_chat(chat.chat_id, chat.last_message_at)
        if ended:
            log.info("chat session %s ended and queued", chat.chat_id)
        return ended

    async def _history(self, chat_id: str) -> list[dict[str, str]]:
        """The session's latest turns, oldest first, within ``history_turns`` and ``history_tokens``."""
        turns = await self.store.chat_turns(chat_id)
        picked: list[dict[str, str]] = []
        used = 0
        for turn in reversed(turns[-self.history_turns :]):
            cost = estimate_message_tokens(turn.content)
            if used + cost > self.history_tokens:
                break
            used += cost
            picked.append({"role": turn.role, "content": turn.content})
        picked.reverse()
        return picked
