"""The encrypting layer's part of ``VectorStore`` (mixed into ``EncryptedStore``): a member's embeddings are their
data (an embedding says much about its text), so each packed vector is encrypted with the member's key, with the
column and the line or fact it belongs to bound as associated data (a vector cannot be moved to another row or
member). The texts handed out for embedding, and the lines and facts looked up by id, are opened like every other
text."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from bot.keys.crypto import MemberCipher
from bot.keys.sealed import unseal
from bot.store.models import FactRecord, TurnRecord
from bot.store.vectors import VECTOR_COLUMN, EmbedItem, ItemKind, StoredVector

if TYPE_CHECKING:
    from bot.store.repository import Store

TURN_TEXT, FACT_TEXT = "turns.content", "facts.text"


def _column(kind: ItemKind, item_id: int) -> str:
    return f"{VECTOR_COLUMN}/{kind}/{item_id}"


class EncryptedVectors:
    if TYPE_CHECKING:
        backend: Store

        async def _writer(self, user_id: int) -> MemberCipher: ...
        async def _reader(self, user_id: int) -> MemberCipher | None: ...
        async def _turns(self, turns: Sequence[TurnRecord]) -> list[TurnRecord]: ...
        async def _facts(self, facts: Sequence[FactRecord]) -> list[FactRecord]: ...

    async def _vector_cipher(self, user_id: int) -> MemberCipher:
        cipher = await self._reader(user_id)
        if cipher is None:
            from bot.keys.encrypted import raise_forgotten

            raise_forgotten(user_id, VECTOR_COLUMN)
        return cipher

    async def unembedded(self, user_id: int, model: str, limit: int) -> list[EmbedItem]:
        items = await self.backend.unembedded(user_id, model, limit)
        if not items:
            return []
        cipher = await self._vector_cipher(user_id)
        return [
            EmbedItem(
                i.kind, i.item_id, i.user_id, unseal(cipher, TURN_TEXT if i.kind == "turn" else FACT_TEXT, i.text)
            )
            for i in items
        ]

    async def put_vectors(self, user_id: int, model: str, vectors: Sequence[tuple[ItemKind, int, bytes]]) -> int:
        cipher = await self._vector_cipher(user_id)  # never a new key: a forgotten member has nothing to embed
        sealed = [
            (kind, item_id, cipher.encrypt_bytes(_column(kind, item_id), blob)) for kind, item_id, blob in vectors
        ]
        return await self.backend.put_vectors(user_id, model, sealed)

    async def member_vectors(self, user_id: int, model: str, *, after_id: int = 0) -> list[StoredVector]:
        stored = await self.backend.member_vectors(user_id, model, after_id=after_id)
        if not stored:
            return []
        cipher = await self._vector_cipher(user_id)
        return [
            dataclasses.replace(v, vector=cipher.decrypt_bytes(_column(v.kind, v.item_id), v.vector)) for v in stored
        ]

    async def vectors_stamp(self, user_id: int, model: str) -> tuple[int, int]:
        return await self.backend.vectors_stamp(user_id, model)

    async def count_vectors(self, user_id: int | None = None) -> int:
        return await self.backend.count_vectors(user_id)

    async def turns_by_id(self, user_id: int, turn_ids: Sequence[int]) -> list[TurnRecord]:
        return await self._turns(await self.backend.turns_by_id(user_id, turn_ids))

    async def facts_by_id(self, user_id: int, fact_ids: Sequence[int]) -> list[FactRecord]:
        return await self._facts(await self.backend.facts_by_id(user_id, fact_ids))
