"""The encrypting layer's calls, chats and their lines (mixed into ``bot.keys.encrypted.EncryptedStore``): summaries
and lines sealed on the way in and opened on the way out; what carries no member text (ids, states, counts, leases)
passes straight to the backend."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from bot.keys.reading import OpenedReads
from bot.keys.records import (
    CALL_SUMMARY,
    CHAT_SUMMARY,
    FACT,
    TURN,
    _opened,
    _sealed_write,
    _SealedFact,
    _SealedTurn,
    _with,
)
from bot.keys.sealed import seal
from bot.store.columns import turn_record
from bot.store.live_plan import LivePlan, LiveWrite, layered
from bot.store.models import (
    CallEnd,
    CallMemoryState,
    CallRecord,
    CallStartCheck,
    CallState,
    ChatRecord,
    FactRecord,
    NewTurn,
    RecentLines,
    TurnRecord,
    TurnsWrite,
    TurnUpdate,
)
from bot.store.specifics import specifics as count_specifics


class EncryptedConversations(OpenedReads):
    """``ConversationStore`` and ``CallStepStore`` in front of the backend."""

    # ---- memory generations: each one read tells the key cache (``CachingKeyStore.observe``) ----------------

    async def memory_generation(self, user_id: int) -> int:
        generation = await self.backend.memory_generation(user_id)
        self.keys.observe(user_id, generation)
        return generation

    async def memory_stamp(self, user_id: int) -> tuple[int, int]:
        stamp = await self.backend.memory_stamp(user_id)
        self.keys.observe(user_id, stamp[1])
        return stamp

    async def _call(self, call: CallRecord | None) -> CallRecord | None:
        if call is None or call.summary is None:
            return call
        return dataclasses.replace(call, summary=await self._open_text(call.user_id, CALL_SUMMARY, call.summary))

    async def _chat(self, chat: ChatRecord | None) -> ChatRecord | None:
        if chat is None or chat.summary is None:
            return chat
        return dataclasses.replace(chat, summary=await self._open_text(chat.user_id, CHAT_SUMMARY, chat.summary))

    # ---- calls and chats -------------------------------------------------------------------------------

    async def create_call(self, call: CallRecord) -> None:
        if call.summary is not None:
            cipher = await self._writer(call.user_id)
            call = dataclasses.replace(call, summary=seal(cipher, CALL_SUMMARY, call.summary, indexed=False))
        await self.backend.create_call(call)

    async def get_call(self, call_id: str) -> CallRecord | None:
        return await self._call(await self.backend.get_call(call_id))

    async def get_call_by_link_hash(self, link_hash: str) -> CallRecord | None:
        return await self._call(await self.backend.get_call_by_link_hash(link_hash))

    async def call_memory_state(self, call_id: str) -> CallMemoryState | None:
        state = await self.backend.call_memory_state(call_id)
        if state is not None:
            self.keys.observe(state.call.user_id, state.generation)
        if state is None or state.call.summary is None:
            return state
        summary = await self._open_text(state.call.user_id, CALL_SUMMARY, state.call.summary)
        return dataclasses.replace(state, call=dataclasses.replace(state.call, summary=summary))

    async def get_call_by_agent_id(self, agent_id: str) -> CallRecord | None:
        return await self._call(await self.backend.get_call_by_agent_id(agent_id))

    async def open_call_for_user(self, user_id: int) -> CallRecord | None:
        return await self._call(await self.backend.open_call_for_user(user_id))

    async def open_calls(self) -> list[CallRecord]:
        return [c for c in [await self._call(c) for c in await self.backend.open_calls()] if c is not None]

    async def calls_with_agent_to_stop(self) -> list[CallRecord]:
        calls = [await self._call(c) for c in await self.backend.calls_with_agent_to_stop()]
        return [c for c in calls if c is not None]

    async def _sealed_fields(self, call_id: str, fields: dict[str, Any]) -> dict[str, Any]:
        if fields.get("summary") is None:
            return fields
        call = await self.backend.get_call(call_id)
        if call is None:
            return fields
        cipher = await self._writer(call.user_id)
        return {**fields, "summary": seal(cipher, CALL_SUMMARY, fields["summary"], indexed=False)}

    async def transition_call(
        self, call_id: str, from_states: Sequence[CallState], to_state: CallState, **fields: Any
    ) -> bool:
        return await self.backend.transition_call(
            call_id, from_states, to_state, **await self._sealed_fields(call_id, fields)
        )

    async def call_and_generation(self, call_id: str) -> tuple[CallRecord, int] | None:
        read = await self.backend.call_and_generation(call_id)
        if read is None:
            return None
        self.keys.observe(read[0].user_id, read[1])
        opened = await self._call(read[0])
        assert opened is not None
        return opened, read[1]

    async def begin_call_ending(
        self, call_id: str, from_states: Sequence[CallState], **fields: Any
    ) -> tuple[CallRecord, int] | None:
        began = await self.backend.begin_call_ending(call_id, from_states, **await self._sealed_fields(call_id, fields))
        if began is None:
            return None
        call, generation = began
        self.keys.observe(call.user_id, generation)
        opened = await self._call(call)
        assert opened is not None
        return opened, generation

    async def update_call(self, call_id: str, **fields: Any) -> None:
        await self.backend.update_call(call_id, **await self._sealed_fields(call_id, fields))

    async def get_chat(self, chat_id: str) -> ChatRecord | None:
        return await self._chat(await self.backend.get_chat(chat_id))

    async def open_chat_for_user(self, user_id: int) -> ChatRecord | None:
        return await self._chat(await self.backend.open_chat_for_user(user_id))

    async def idle_chats(self, last_message_before: float) -> list[ChatRecord]:
        chats = [await self._chat(c) for c in await self.backend.idle_chats(last_message_before)]
        return [c for c in chats if c is not None]

    # ---- turns -----------------------------------------------------------------------------------------

    async def call_turns(self, call_id: str) -> list[TurnRecord]:
        return await self._turns(await self.backend.call_turns(call_id))

    async def call_tail(self, call_id: str, limit: int) -> list[TurnRecord]:
        return await self._turns(await self.backend.call_tail(call_id, limit))

    async def chat_turns(self, chat_id: str) -> list[TurnRecord]:
        return await self._turns(await self.backend.chat_turns(chat_id))

    async def apply_call_turns(
        self,
        call_id: str,
        user_id: int,
        inserts: Sequence[NewTurn],
        updates: Sequence[TurnUpdate],
        *,
        anchored: bool,
        checkpoint_at: float,
        generation: int | None = None,
        expected_version: int | None = None,
        live_key: str | None = None,
    ) -> bool:
        sealed = _sealed_write(await self._writer(user_id, generation), TurnsWrite(inserts, updates, anchored))
        return await self.backend.apply_call_turns(
            call_id,
            user_id,
            sealed.inserts,
            sealed.updates,
            anchored=anchored,
            checkpoint_at=checkpoint_at,
            generation=generation,
            expected_version=expected_version,
            live_key=live_key,
        )

    async def write_live_turn(
        self,
        call_id: str,
        user_id: int,
        turn_key: str | None,
        *,
        tail: int,
        plan: LivePlan,
        checkpoint_at: float,
        generation: int,
    ) -> LiveWrite:
        """The plan sees the lines opened and its write is sealed, wherever the backend runs it (SQLite: on its
        database thread)."""
        cipher = await self._writer(user_id, generation)
        return await self.backend.write_live_turn(
            call_id,
            user_id,
            turn_key,
            tail=tail,
            plan=layered(plan, lambda turn: _opened(turn, cipher), lambda write: _sealed_write(cipher, write)),
            checkpoint_at=checkpoint_at,
            generation=generation,
        )

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
    ) -> int | None:
        cipher = await self._writer(user_id, generation)
        return await self.backend.append_chat_turn(
            chat_id,
            user_id,
            role,
            seal(cipher, TURN, content, indexed=True),
            at,
            generation=generation,
            specifics=count_specifics(content) if specifics is None else specifics,
        )

    async def search_turns(
        self, user_id: int, query: str, limit: int, *, exclude_call_id: str | None = None
    ) -> list[TurnRecord]:
        hashed = await self._hashed_query(user_id, query)
        if hashed is None:
            return []
        return await self._turns(
            await self.backend.search_turns(user_id, hashed, limit, exclude_call_id=exclude_call_id)
        )

    async def rank_turns(
        self, user_id: int, query: str, limit: int, *, exclude_call_id: str | None = None
    ) -> list[tuple[TurnRecord, float]]:
        hashed = await self._hashed_query(user_id, query)
        if hashed is None:
            return []
        ranked = await self.backend.rank_turns(user_id, hashed, limit, exclude_call_id=exclude_call_id)
        opened = {turn.turn_id: turn for turn in await self._turns([turn for turn, _ in ranked])}
        return [(opened[turn.turn_id], score) for turn, score in ranked if turn.turn_id in opened]

    async def recent_turns_of(
        self, user_id: int, limit: int, *, exclude_call_id: str | None = None, before: float | None = None
    ) -> list[TurnRecord]:
        """The lines with their text opened when first read (``_SealedTurn``): a call start ranks a few hundred
        lines by their stored specifics and reads the text of the few dozen that go into its block. A line
        counted before its specifics were stored is opened at once (ranking needs its text)."""
        turns = await self.backend.recent_turns_of(user_id, limit, exclude_call_id=exclude_call_id, before=before)
        if not turns:
            return []
        if any(turn.user_id != user_id for turn in turns):
            return await self._turns(turns)
        sampled = await self._sampled(user_id, TURN, turns[-1].content)
        if sampled is None:
            return await self._turns(turns)
        cipher = sampled[0]
        return [_SealedTurn.of(turn, cipher) if turn.specifics is not None else _opened(turn, cipher) for turn in turns]

    async def call_start_memory(self, user_id: int, *, facts: int, lines: int) -> tuple[list[FactRecord], RecentLines]:
        """Texts opened only when read: the facts' (``_SealedFact``), and the lines' for the lines made into records
        (``_SealedTurn``). A call start ranks a few hundred lines by their stored specifics and uses a few dozen,
        and renders only the facts that fit its share of the block (about half of the page)."""
        page, recent = await self.backend.call_start_memory(user_id, facts=facts, lines=lines)
        if not page and not recent.rows:
            return [], recent
        if page:
            sampled = await self._sampled(user_id, FACT, page[0].text)
        else:
            sampled = await self._sampled(user_id, TURN, turn_record(recent.rows[-1]).content)
        if sampled is None:
            return await self._facts(page), await self._recent_opened(recent)
        cipher, text = sampled
        if any(fact.user_id != user_id for fact in page):
            opened = await self._facts(page)
        else:
            opened = [_SealedFact.of(fact, cipher) for fact in page[1:]]
            if page:
                opened.insert(0, _with(page[0], "text", text))
        return opened, RecentLines(recent.rows, lambda row: _SealedTurn.of(turn_record(row), cipher))

    async def turns_at(self, positions: Sequence[tuple[str, int]]) -> list[TurnRecord]:
        return await self._turns(await self.backend.turns_at(positions))

    # ---- no member text: straight to the backend -------------------------------------------------------

    async def conversation_lengths(self, refs: Sequence[str]) -> dict[str, int]:
        return await self.backend.conversation_lengths(refs)

    async def count_open_calls(self) -> int:
        return await self.backend.count_open_calls()

    async def count_guild_calls_since(self, guild_id: int, since: float) -> int:
        return await self.backend.count_guild_calls_since(guild_id, since)

    async def take_call_lease(self, call_id: str, owner: str, now: float, until: float) -> bool:
        return await self.backend.take_call_lease(call_id, owner, now, until)

    async def release_call_leases(self, owner: str) -> None:
        await self.backend.release_call_leases(owner)

    async def bind_call_browser(self, call_id: str, browser_hash: str) -> bool:
        return await self.backend.bind_call_browser(call_id, browser_hash)

    async def call_start_check(self, user_id: int, guild_id: int | None, since: float) -> CallStartCheck:
        check = await self.backend.call_start_check(user_id, guild_id, since)
        if check.greeting is None:
            return check
        return dataclasses.replace(check, greeting=await self._greeting(user_id, check.greeting))

    async def end_call(
        self,
        call_id: str,
        *,
        ended_at: float,
        agent_stop_pending: bool,
        post_call_job: str | None = None,
        not_before: float = 0.0,
    ) -> CallEnd:
        return await self.backend.end_call(
            call_id,
            ended_at=ended_at,
            agent_stop_pending=agent_stop_pending,
            post_call_job=post_call_job,
            not_before=not_before,
        )

    async def create_chat(self, chat: ChatRecord) -> None:
        await self.backend.create_chat(chat)

    async def end_chat(self, chat_id: str, at: float) -> bool:
        return await self.backend.end_chat(chat_id, at)

    async def count_call_turns(self, call_id: str) -> int:
        return await self.backend.count_call_turns(call_id)

    async def count_turns(self, user_id: int, *, outside_call_id: str | None = None) -> int:
        return await self.backend.count_turns(user_id, outside_call_id=outside_call_id)
