"""Every text of a member's memory encrypted with that member's key, in front of any backend.

``EncryptedStore`` wraps a ``Store`` (SQLite or PostgreSQL alike): texts are sealed (``bot.keys.sealed``) on the way
in and opened on the way out, so the backend only ever sees ciphertext and keyed term hashes. Searches hash their
query terms the same way. A member whose key is gone (forgotten) has nothing readable: their rows, in any copy of
the database, are ciphertext nobody can open.

Methods that carry no member text pass straight through; a method of the backend that is in neither list is
refused (``AttributeError``), so a new text-bearing method cannot bypass encryption unnoticed.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from bot.keys.crypto import DecryptionFailed, MemberCipher
from bot.keys.encrypted_vectors import EncryptedVectors
from bot.keys.reading import OpenedReads, ReadKeys
from bot.keys.records import _opened, _sealed_write, _SealedFact, _SealedTurn, _with
from bot.keys.sealed import is_sealed, seal, unseal
from bot.keys.store import KeyStore
from bot.keys.terms import query_terms
from bot.store.columns import turn_record
from bot.store.models import (
    CallMemoryState,
    CallRecord,
    ChatRecord,
    Conversation,
    ConversationSummary,
    FactRecord,
    LivePlan,
    LivePlanNeeds,
    LiveWrite,
    NewTurn,
    RecentLines,
    TurnRecord,
    TurnsWrite,
    TurnUpdate,
)
from bot.store.repository import Store
from bot.store.specifics import specifics as count_specifics

ENCRYPTION_META = "memory_encryption"
"""The memory database's marker: once set, the bot does not start without the key store and its master key."""
ENCRYPTION_SCHEME = "aes-256-gcm/member-keys/v1"

TURN, FACT, CALL_SUMMARY, CHAT_SUMMARY = "turns.content", "facts.text", "calls.summary", "chats.summary"

PASS_THROUGH = frozenset(
    {
        "close",
        "schema_version",
        "ping",
        "write_health",  # counts of failed writes by kind, and why the last one failed: no member text
        "get_user",
        "set_consent",
        "set_memory_enabled",
        "get_guild_settings",
        "update_guild_settings",
        "delete_guild_settings",
        "retention_policies",
        "count_open_calls",
        "count_guild_calls_since",
        "create_chat",
        "end_chat",
        "count_call_turns",
        "count_turns",
        "count_facts",
        "count_conversations",
        "forget_call",
        "forget_chat",
        "forget_preview",  # counts only
        "forget_user",
        "scrub",
        "purge_transcripts",
        "enqueue_job",
        "expedite_job",
        "claim_job",
        "finish_job",
        "fail_job",
        "job_state",
        "notice_seen",
        "remember_notice",
        "get_meta",
        "set_meta",
        "bind_call_browser",
        "pending_scrub",
        "job_queue",
        "take_call_lease",  # a call's lease: ids and times only, no text
        "release_call_leases",
        "call_start_check",  # settings, consent, a call id and counts: no member text
        "end_call",  # a state change, a count and a queued job: no text
    }
)


class EncryptedStore(OpenedReads, EncryptedVectors):
    def __init__(self, backend: Store, keys: KeyStore):
        self.backend = backend
        self.keys = keys
        self.sealing_guard: Callable[[str], contextlib.AbstractAsyncContextManager[None]] | None = None
        """Exclusive use of the database while encrypting it in place (``bot.store.inuse``): refused while
        another bot process writes plain text to it."""
        hashed_search = getattr(backend, "search_hashed_terms", None)
        if hashed_search is not None:
            hashed_search()  # PostgreSQL: its queries now carry keyed hashes, not words to stem

    def __getattr__(self, name: str) -> Any:
        if name in PASS_THROUGH:
            return getattr(self.backend, name)
        raise AttributeError(f"EncryptedStore does not pass {name!r} through: decide whether it carries member text")

    async def open(self) -> None:
        """Opens the backend; the first time, encrypts whatever it already holds in place (a database from
        before encryption), scrubs the plain text's residue, then marks the database encrypted."""
        await self.backend.open()
        if await self.backend.get_meta(ENCRYPTION_META) is None:
            reseal = getattr(self.backend, "reseal_texts", None)
            if reseal is None:
                raise RuntimeError(f"{type(self.backend).__name__} cannot encrypt existing memory in place")
            guard = self.sealing_guard
            async with guard("encrypt the memory database in place") if guard else contextlib.nullcontext():
                if await reseal(self._seal_existing):
                    await self.backend.scrub()
                await self.backend.set_meta(ENCRYPTION_META, ENCRYPTION_SCHEME)
        count = getattr(self.backend, "count_specifics", None)
        if count is not None:
            await count(self._count_sealed)

    async def _count_sealed(self, user_id: int, value: str) -> int | None:
        """A sealed line's specifics (lines sealed before they were stored with it); None when it cannot be
        opened (a forgotten member's key is gone): its count stays missing."""
        cipher = await self._reader(user_id)
        if cipher is None or not is_sealed(value):
            return None
        try:
            return count_specifics(unseal(cipher, TURN, value))
        except DecryptionFailed:
            return None

    async def _seal_existing(self, user_id: int, column: str, value: str) -> str | None:
        if is_sealed(value):
            return None
        cipher = await self.keys.cipher(user_id, create=True)  # at the first open, before anything else writes
        assert cipher is not None
        return seal(cipher, column, value, indexed=column in (TURN, FACT))

    # ---- sealing ---------------------------------------------------------------------------------------

    async def _writer(self, user_id: int, generation: int | None = None) -> MemberCipher:
        """The key a write seals with. ``generation``: the one the write's fence checks, so the cached key
        serves only if it was read from the key store after that generation was seen (``CachingKeyStore``);
        a write without a fence reads the key from the key store."""
        cipher = await self.keys.cipher(user_id, create=True, generation=generation, fresh=generation is None)
        assert cipher is not None
        return cipher

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

    async def _hashed_query(self, user_id: int, query: str) -> str | None:
        cipher = await self._reader(user_id)
        terms = query_terms(query)
        if cipher is None or not terms:
            return None
        return " ".join(cipher.term_hash(term) for term in terms)

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

    async def transition_call(self, call_id: str, from_states: Sequence[Any], to_state: Any, **fields: Any) -> bool:
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
        self, call_id: str, from_states: Sequence[Any], **fields: Any
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

        def sealed_plan(stored: list[TurnRecord], whole: bool, anchored: bool) -> TurnsWrite | LivePlanNeeds | None:
            opened = [_with(t, "content", unseal(cipher, TURN, t.content)) for t in stored]
            write = plan(opened, whole, anchored)
            return _sealed_write(cipher, write) if isinstance(write, TurnsWrite) else write

        return await self.backend.write_live_turn(
            call_id,
            user_id,
            turn_key,
            tail=tail,
            plan=sealed_plan,
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
        self, user_id: int, limit: int, *, exclude_call_id: str | None = None
    ) -> list[TurnRecord]:
        """The lines with their text opened when first read (``_SealedTurn``): a call start ranks a few hundred
        lines by their stored specifics and reads the text of the few dozen that go into its block. A line
        counted before its specifics were stored is opened at once (ranking needs its text)."""
        turns = await self.backend.recent_turns_of(user_id, limit, exclude_call_id=exclude_call_id)
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

    # ---- facts and summaries ---------------------------------------------------------------------------

    async def get_fact(self, fact_id: int) -> FactRecord | None:
        return await self._fact(await self.backend.get_fact(fact_id))

    async def list_facts(
        self,
        user_id: int,
        *,
        include_superseded: bool = False,
        superseded_only: bool = False,
        offset: int = 0,
        limit: int = 100,
    ) -> list[FactRecord]:
        return await self._facts(
            await self.backend.list_facts(
                user_id,
                include_superseded=include_superseded,
                superseded_only=superseded_only,
                offset=offset,
                limit=limit,
            )
        )

    async def rank_facts(self, user_id: int, query: str, limit: int) -> list[tuple[FactRecord, float]]:
        hashed = await self._hashed_query(user_id, query)
        if hashed is None:
            return []
        ranked = await self.backend.rank_facts(user_id, hashed, limit)
        opened = {fact.fact_id: fact for fact in await self._facts([fact for fact, _ in ranked])}
        return [(opened[fact.fact_id], score) for fact, score in ranked if fact.fact_id in opened]

    async def search_facts(self, user_id: int, query: str, limit: int) -> list[FactRecord]:
        hashed = await self._hashed_query(user_id, query)
        if hashed is None:
            return []
        return await self._facts(await self.backend.search_facts(user_id, hashed, limit))

    async def facts_from(self, convo: Conversation) -> list[FactRecord]:
        return await self._facts(await self.backend.facts_from(convo))

    async def _summaries(self, user_id: int, rows: Sequence[ConversationSummary]) -> list[ConversationSummary]:
        keys = ReadKeys(self.keys)
        opened = []
        for r in rows:
            column = CALL_SUMMARY if r.kind == "call" else CHAT_SUMMARY
            lines = [await keys.open(user_id, TURN, line) for line in r.first_lines]
            opened.append(
                dataclasses.replace(
                    r,
                    summary=None if r.summary is None else await keys.open(user_id, column, r.summary),
                    first_lines=[line for line in lines if line is not None],
                )
            )
        keys.report()
        return opened

    async def latest_summaries(self, user_id: int, limit: int) -> list[ConversationSummary]:
        return await self._summaries(user_id, await self.backend.latest_summaries(user_id, limit))

    async def list_conversations(self, user_id: int, *, offset: int = 0, limit: int = 10) -> list[ConversationSummary]:
        return await self._summaries(
            user_id, await self.backend.list_conversations(user_id, offset=offset, limit=limit)
        )

    async def add_told_fact(
        self,
        user_id: int,
        text: str,
        at: float,
        *,
        convo: Conversation | None = None,
        supersedes: Sequence[int] = (),
        generation: int | None = None,
    ) -> int | None:
        cipher = await self._writer(user_id, generation)
        sealed = seal(cipher, FACT, text, indexed=True)
        return await self.backend.add_told_fact(
            user_id, sealed, at, convo=convo, supersedes=supersedes, generation=generation
        )

    async def apply_extraction(
        self,
        job_id: int,
        attempt: int,
        user_id: int,
        at: float,
        convo: Conversation,
        *,
        new_facts: Sequence[tuple[str, Sequence[int]]] = (),
        confirmed: Sequence[int] = (),
        summary: str | None = None,
        generation: int | None = None,
    ) -> int | None:
        cipher = await self._writer(user_id, generation)
        column = CALL_SUMMARY if convo.kind == "call" else CHAT_SUMMARY
        return await self.backend.apply_extraction(
            job_id,
            attempt,
            user_id,
            at,
            convo,
            new_facts=[(seal(cipher, FACT, text, indexed=True), ids) for text, ids in new_facts],
            confirmed=confirmed,
            summary=None if summary is None else seal(cipher, column, summary, indexed=False),
            generation=generation,
        )

    # ---- forgetting and export -------------------------------------------------------------------------

    async def forget_fact(
        self,
        user_id: int,
        fact_id: int,
        *,
        turn_ids: Sequence[int] = (),
        summaries: Sequence[Conversation] = (),
    ) -> FactRecord | None:
        return await self._fact(
            await self.backend.forget_fact(user_id, fact_id, turn_ids=turn_ids, summaries=summaries)
        )

    async def export_user(self, user_id: int) -> dict[str, Any]:
        """Everything stored, decrypted. A member whose key is gone has nothing that can be read: the export
        says so and lists nothing."""
        data = await self.backend.export_user(user_id)
        if await self.keys.cipher(user_id, create=False, fresh=True) is None:
            data["facts"], data["calls"], data["chats"] = [], [], []
            data["note"] = "Nothing is stored about this member that can be read."
            return data
        keys = ReadKeys(self.keys)  # a value sealed under a key that no longer exists is left out (reading.py)
        facts = []
        for fact in data.get("facts", []):
            fact["text"] = await keys.open(user_id, FACT, fact["text"])
            if fact["text"] is not None:
                facts.append(fact)
        data["facts"] = facts
        for kind, column in (("calls", CALL_SUMMARY), ("chats", CHAT_SUMMARY)):
            for conversation in data.get(kind, []):
                if conversation.get("summary") is not None:
                    conversation["summary"] = await keys.open(user_id, column, conversation["summary"])
                turns = [turn for turn in conversation.get("turns", []) if isinstance(turn, dict)]
                for turn in turns:
                    turn["content"] = await keys.open(user_id, TURN, turn["content"])
                conversation["turns"] = [turn for turn in turns if turn["content"] is not None]
        keys.report()
        return data


__all__ = ["ENCRYPTION_META", "ENCRYPTION_SCHEME", "EncryptedStore", "is_sealed"]
