"""Dense retrieval's storage: one embedding per line (turn) and per current fact of a member, with the model that
made it, as packed little-endian float32 (``pack``/``unpack``). The table (``memory_vectors``, migration 7 on both
backends) references its line or fact with ``ON DELETE CASCADE``, so every way of forgetting (an item, a call or
chat, everything, retention) deletes the vectors in the same transaction; a line whose text changes loses its
vector (a trigger) and is embedded again. Both backends implement ``VectorStore`` in their own small module
(``bot.store.sqlite.vectors``, ``bot.store.postgres.vectors``); the encrypting layer encrypts the vector bytes with the
member's key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from bot.store.columns import FACT_COLUMNS, TURN_COLUMNS
from bot.store.models import FactRecord, TurnRecord

ItemKind = Literal["turn", "fact"]
VECTOR_COLUMN = "memory_vectors.vector"
"""The name the encrypting layer binds into each encrypted vector (associated data), like the text columns."""


@dataclass(frozen=True)
class EmbedItem:
    """A line or fact that has no vector of the wanted model yet, with its text."""

    kind: ItemKind
    item_id: int
    user_id: int
    text: str


@dataclass(frozen=True)
class StoredVector:
    kind: ItemKind
    item_id: int
    user_id: int
    vector: bytes
    vector_id: int = 0
    """The row's id: ids only grow, so a reader that kept vectors up to an id can read just the newer ones."""


class VectorStore(Protocol):
    """Embeddings of a member's lines and facts (dense retrieval)."""

    async def unembedded(self, user_id: int, model: str, limit: int) -> list[EmbedItem]:
        """Up to ``limit`` of the member's lines and current facts without a vector of ``model``: facts first,
        then lines, newest first."""
        ...

    async def put_vectors(self, user_id: int, model: str, vectors: Sequence[tuple[ItemKind, int, bytes]]) -> int:
        """Store (or replace) the vectors of the member's lines/facts ``(kind, id, packed)`` in one transaction;
        a line or fact that no longer exists (forgotten meanwhile) gets none. Returns how many were stored."""
        ...

    async def member_vectors(self, user_id: int, model: str, *, after_id: int = 0) -> list[StoredVector]:
        """The member's vectors of ``model`` whose row id is above ``after_id``, in id order."""
        ...

    async def vectors_stamp(self, user_id: int, model: str) -> tuple[int, int]:
        """Changes whenever the member's vectors of ``model`` do (ids are never reused): (count, sum of ids)."""
        ...

    async def count_vectors(self, user_id: int | None = None) -> int:
        """All vector rows (of one member, or of everyone), whatever their model."""
        ...

    async def turns_by_id(self, user_id: int, turn_ids: Sequence[int]) -> list[TurnRecord]: ...
    async def facts_by_id(self, user_id: int, fact_ids: Sequence[int]) -> list[FactRecord]: ...


def stored_vector(user_id: int, vector_id: int, turn_id: int | None, fact_id: int | None, blob: bytes) -> StoredVector:
    """A ``memory_vectors`` row (exactly one of turn_id and fact_id is set)."""
    if turn_id is not None:
        return StoredVector("turn", int(turn_id), user_id, bytes(blob), int(vector_id))
    assert fact_id is not None
    return StoredVector("fact", int(fact_id), user_id, bytes(blob), int(vector_id))


def pack(vector: npt.NDArray[np.float32]) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


def unpack(blob: bytes) -> npt.NDArray[np.float32]:
    return np.frombuffer(blob, dtype="<f4").astype(np.float32)


TURN_NAMES = [name.strip() for name in TURN_COLUMNS.split(",")]
FACT_NAMES = [name.strip() for name in FACT_COLUMNS.split(",")]


def turn_record(row: Sequence[Any]) -> TurnRecord:
    values = dict(zip(TURN_NAMES, row, strict=True))
    values["partial"] = bool(values["partial"])
    values["interrupted"] = bool(values["interrupted"])
    return TurnRecord(**values)


def fact_record(row: Sequence[Any]) -> FactRecord:
    values = dict(zip(FACT_NAMES, row, strict=True))
    values["told"] = bool(values["told"])
    return FactRecord(**values)
