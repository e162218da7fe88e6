"""Every text of a member's memory encrypted with that member's key, in front of any backend.

``EncryptedStore`` wraps a ``Backend`` (SQLite or PostgreSQL alike): texts are sealed (``bot.keys.sealed``) on the way
in and opened on the way out, so the backend only ever sees ciphertext and keyed term hashes. Searches hash their
query terms the same way. A member whose key is gone (forgotten) has nothing readable: their rows, in any copy of
the database, are ciphertext nobody can open.

It implements ``Store`` method by method, in three parts: calls, chats and lines (``encrypted_conversations``),
embeddings (``encrypted_vectors``), and here the rest. A method that carries no member text passes straight
through, written out like any other: a method added to ``Store`` and not here makes ``EncryptedStore`` no longer a
``Store`` for the type checker (``bot.app.build_store``), so a new text-bearing method cannot bypass encryption
unnoticed.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from bot.keys.crypto import DecryptionFailed
from bot.keys.encrypted_conversations import EncryptedConversations
from bot.keys.encrypted_vectors import EncryptedVectors
from bot.keys.reading import ReadKeys
from bot.keys.records import CALL_SUMMARY, CHAT_SUMMARY, FACT, TURN
from bot.keys.sealed import is_sealed, seal, unseal
from bot.keys.store import KeyStore
from bot.store.health import WriteHealth
from bot.store.models import (
    Conversation,
    ConversationSummary,
    FactRecord,
    ForgetResult,
    GuildSettings,
    Job,
    UserRecord,
)
from bot.store.repository import Backend
from bot.store.specifics import specifics as count_specifics

ENCRYPTION_META = "memory_encryption"
"""The memory database's marker: once set, the bot does not start without the key store and its master key."""
ENCRYPTION_SCHEME = "aes-256-gcm/member-keys/v1"


class EncryptedStore(EncryptedConversations, EncryptedVectors):
    def __init__(self, backend: Backend, keys: KeyStore):
        super().__init__(backend, keys)
        self.sealing_guard: Callable[[str], contextlib.AbstractAsyncContextManager[None]] | None = None
        """Exclusive use of the database while encrypting it in place (``bot.store.inuse``): refused while
        another bot process writes plain text to it."""
        backend.search_hashed_terms()

    async def open(self) -> None:
        """Opens the backend; the first time, encrypts whatever it already holds in place (a database from
        before encryption), scrubs the plain text's residue, then marks the database encrypted."""
        await self.backend.open()
        if await self.backend.get_meta(ENCRYPTION_META) is None:
            guard = self.sealing_guard
            async with guard("encrypt the memory database in place") if guard else contextlib.nullcontext():
                if await self.backend.reseal_texts(self._seal_existing):
                    await self.backend.scrub()
                await self.backend.set_meta(ENCRYPTION_META, ENCRYPTION_SCHEME)
        await self.backend.count_specifics(self._count_sealed)

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

    # ---- no member text: straight to the backend -------------------------------------------------------

    async def close(self) -> None:
        await self.backend.close()

    async def schema_version(self) -> int:
        return await self.backend.schema_version()

    async def ping(self) -> None:
        await self.backend.ping()

    @property
    def write_health(self) -> WriteHealth:
        return self.backend.write_health

    async def get_user(self, user_id: int) -> UserRecord | None:
        return await self.backend.get_user(user_id)

    async def set_consent(self, user_id: int, remember: bool, at: float) -> UserRecord:
        return await self.backend.set_consent(user_id, remember, at)

    async def set_memory_enabled(self, user_id: int, enabled: bool, at: float) -> UserRecord:
        return await self.backend.set_memory_enabled(user_id, enabled, at)

    async def set_user_language(self, user_id: int, language: str | None, at: float) -> UserRecord:
        return await self.backend.set_user_language(user_id, language, at)

    async def set_user_locale(self, user_id: int, locale: str) -> None:
        return await self.backend.set_user_locale(user_id, locale)

    async def get_guild_settings(self, guild_id: int) -> GuildSettings:
        return await self.backend.get_guild_settings(guild_id)

    async def update_guild_settings(self, guild_id: int, at: float, **changes: Any) -> GuildSettings:
        return await self.backend.update_guild_settings(guild_id, at, **changes)

    async def delete_guild_settings(self, guild_id: int) -> None:
        await self.backend.delete_guild_settings(guild_id)

    async def retention_policies(self) -> list[tuple[int, int]]:
        return await self.backend.retention_policies()

    async def count_facts(self, user_id: int, *, include_superseded: bool = False) -> int:
        return await self.backend.count_facts(user_id, include_superseded=include_superseded)

    async def count_conversations(self, user_id: int) -> int:
        return await self.backend.count_conversations(user_id)

    async def forget_call(self, user_id: int, call_id: str) -> ForgetResult | None:
        return await self.backend.forget_call(user_id, call_id)

    async def forget_chat(self, user_id: int, chat_id: str) -> ForgetResult | None:
        return await self.backend.forget_chat(user_id, chat_id)

    async def forget_preview(self, convo: Conversation) -> ForgetResult:
        return await self.backend.forget_preview(convo)

    async def begin_forget(self, user_id: int) -> int:
        return await self.backend.begin_forget(user_id)

    async def forget_user(self, user_id: int, *, begun: int | None = None) -> ForgetResult:
        return await self.backend.forget_user(user_id, begun=begun)

    async def interrupted_forgets(self) -> list[int]:
        return await self.backend.interrupted_forgets()

    async def scrub(self) -> bool:
        return await self.backend.scrub()

    async def pending_scrub(self) -> bool:
        return await self.backend.pending_scrub()

    async def purge_transcripts(self, *, guild_id: int | None, older_than: float) -> int:
        return await self.backend.purge_transcripts(guild_id=guild_id, older_than=older_than)

    async def enqueue_job(self, kind: str, ref_id: str, at: float, *, not_before: float = 0.0) -> bool:
        return await self.backend.enqueue_job(kind, ref_id, at, not_before=not_before)

    async def expedite_job(self, kind: str, ref_id: str, at: float) -> bool:
        return await self.backend.expedite_job(kind, ref_id, at)

    async def claim_job(self, at: float, lease_seconds: float) -> Job | None:
        return await self.backend.claim_job(at, lease_seconds)

    async def finish_job(self, job_id: int, at: float) -> None:
        await self.backend.finish_job(job_id, at)

    async def fail_job(self, job_id: int, at: float, error: str, *, retry_at: float | None) -> None:
        await self.backend.fail_job(job_id, at, error, retry_at=retry_at)

    async def job_state(self, kind: str, ref_id: str) -> str | None:
        return await self.backend.job_state(kind, ref_id)

    async def job_queue(self) -> tuple[int, float | None]:
        return await self.backend.job_queue()

    async def notice_seen(self, notice_id: str) -> bool:
        return await self.backend.notice_seen(notice_id)

    async def remember_notice(self, notice_id: str, at: float) -> bool:
        return await self.backend.remember_notice(notice_id, at)

    async def get_meta(self, key: str) -> str | None:
        return await self.backend.get_meta(key)

    async def set_meta(self, key: str, value: str) -> None:
        await self.backend.set_meta(key, value)


__all__ = ["ENCRYPTION_META", "ENCRYPTION_SCHEME", "EncryptedStore", "is_sealed"]
