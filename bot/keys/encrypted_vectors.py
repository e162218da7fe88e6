"""The encrypting layer's part of ``VectorStore`` (a part of ``EncryptedStore``): a member's embeddings are their
data (an embedding says much about its text), so each packed vector is encrypted with the member's key, with the
column and the line or fact it belongs to bound as associated data (a vector cannot be moved to another row or
member). The texts handed out for embedding, and the lines and facts looked up by id, are opened like every other
text."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from bot.keys.crypto import DecryptionFailed, MemberCipher
from bot.keys.reading import OpenedReads, ReadKeys
from bot.keys.records import raise_forgotten
from bot.store.models import FactRecord, TurnRecord
from bot.store.vectors import VECTOR_COLUMN, EmbedItem, ItemKind, StoredVector

TURN_TEXT, FACT_TEXT = "turns.content", "facts.text"


def _column(kind: ItemKind, item_id: int) -> str:
    return f"{VECTOR_COLUMN}/{kind}/{item_id}"


def _opened_vectors(cipher: MemberCipher, stored: Sequence[StoredVector]) -> list[StoredVector]:
    return [dataclasses.replace(v, vector=cipher.decrypt_bytes(_column(v.kind, v.item_id), v.vector)) for v in stored]


class EncryptedVectors(OpenedReads):
    async def _vector_cipher(self, user_id: int, *, fresh: bool = False) -> MemberCipher:
        cipher = await self.keys.cipher(user_id, create=False, fresh=fresh)
        if cipher is None:
            raise_forgotten(user_id, VECTOR_COLUMN)
        return cipher

    async def unembedded(self, user_id: int, model: str, limit: int) -> list[EmbedItem]:
        items = await self.backend.unembedded(user_id, model, limit)
        keys = ReadKeys(self.keys)  # what does not open (sealed under a key that no longer exists) is left out
        opened = []
        for item in items:
            text = await keys.open(user_id, TURN_TEXT if item.kind == "turn" else FACT_TEXT, item.text)
            if text is not None:
                opened.append(EmbedItem(item.kind, item.item_id, item.user_id, text))
        keys.report()
        return opened

    async def put_vectors(self, user_id: int, model: str, vectors: Sequence[tuple[ItemKind, int, bytes]]) -> int:
        # Never a new key (a forgotten member has nothing to embed), and the key store's own: never a deleted one.
        cipher = await self._vector_cipher(user_id, fresh=True)
        sealed = [
            (kind, item_id, cipher.encrypt_bytes(_column(kind, item_id), blob)) for kind, item_id, blob in vectors
        ]
        return await self.backend.put_vectors(user_id, model, sealed)

    async def member_vectors(self, user_id: int, model: str, *, after_id: int = 0) -> list[StoredVector]:
        stored = await self.backend.member_vectors(user_id, model, after_id=after_id)
        if not stored:
            return []
        cipher = await self._vector_cipher(user_id)
        try:
            return _opened_vectors(cipher, stored)
        except DecryptionFailed:  # a key cached from before a forget elsewhere: read it again, once
            return _opened_vectors(await self._vector_cipher(user_id, fresh=True), stored)

    async def vectors_stamp(self, user_id: int, model: str) -> tuple[int, int]:
        return await self.backend.vectors_stamp(user_id, model)

    async def count_vectors(self, user_id: int | None = None) -> int:
        return await self.backend.count_vectors(user_id)

    async def turns_by_id(self, user_id: int, turn_ids: Sequence[int]) -> list[TurnRecord]:
        return await self._turns(await self.backend.turns_by_id(user_id, turn_ids))

    async def facts_by_id(self, user_id: int, fact_ids: Sequence[int]) -> list[FactRecord]:
        return await self._facts(await self.backend.facts_by_id(user_id, fact_ids))
