"""What the queries written once stand on: SQLite's reading of PostgreSQL's placeholders (the one difference
between the dialects in these queries, besides ``SqlBase.greatest``), the row mappers both backends share, and
``SqlBase``, the primitives each backend's foundation gives them."""

from __future__ import annotations

import functools
import json
import re
from abc import ABC, abstractmethod
from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar, Protocol

from bot.store.columns import CALL_COLUMNS, CHAT_COLUMNS
from bot.store.models import (
    CallRecord,
    ChatRecord,
    Conversation,
    UserRecord,
)

OPEN_STATES = "('starting', 'active', 'ending')"
"""The states of a call that is not over, as SQL."""
_PLACEHOLDER = re.compile(r"\$(\d+)")


@functools.cache
def sqlite_sql(sql: str) -> str:
    """``sql`` with PostgreSQL's placeholders as SQLite's numbered ones (``$2`` -> ``?2``: the same parameter)."""
    return _PLACEHOLDER.sub(r"?\1", sql)


def user_record(row: Any) -> UserRecord:
    return UserRecord(
        user_id=row["user_id"],
        memory_enabled=bool(row["memory_enabled"]),
        consent=row["consent"],
        consent_at=row["consent_at"],
        created_at=row["created_at"],
        language=row["language"],
        locale=row["locale"],
        personal_greetings=bool(row["personal_greetings"]),
    )


def call_record(row: Any) -> CallRecord:
    data = {name: row[name] for name in CALL_COLUMNS}
    data["private"] = bool(data["private"])
    data["history_anchored"] = bool(data["history_anchored"])
    data["agent_stop_pending"] = bool(data["agent_stop_pending"])
    return CallRecord(**data)


def chat_record(row: Any) -> ChatRecord:
    data = {name: row[name] for name in CHAT_COLUMNS}
    data["private"] = bool(data["private"])
    return ChatRecord(**data)


def db_value(value: Any) -> Any:
    """A call field as both databases take it (booleans as themselves: SQLite binds them as 0 and 1)."""
    if isinstance(value, dict | list):
        return json.dumps(value)
    return value


class Tx(Protocol):
    """One transaction of a backend, for the writes written once: its statements (``sql`` in PostgreSQL's
    placeholders) and the memory fence checked inside it."""

    async def rows(self, sql: str, *params: Any) -> list[Any]: ...
    async def value(self, sql: str, *params: Any) -> Any:
        """The first column of the first row, or None."""
        ...

    async def changed(self, sql: str, *params: Any) -> int:
        """The rows the statement changed."""
        ...

    async def write_allowed(self, user_id: int, generation: int | None, convo: Conversation | None) -> bool:
        """The memory fence every write of a member's memory passes (``ConversationStore.memory_generation``)."""
        ...


class SqlBase(ABC):
    """What the queries written once need of a backend: four primitives, each one round trip, and a transaction.
    ``sql`` is in PostgreSQL's placeholders. ``greatest``: the dialect's larger-of-two function."""

    greatest: ClassVar[str]

    @abstractmethod
    def _shared_transaction(self) -> AbstractAsyncContextManager[Tx]:
        """One transaction (the write-health record and the storage errors mapped, as every write's)."""

    @abstractmethod
    async def _rows(self, sql: str, *params: Any) -> list[Any]:
        """Every row ``sql`` returns."""

    @abstractmethod
    async def _row(self, sql: str, *params: Any) -> Any | None:
        """The first row ``sql`` returns, or None."""

    @abstractmethod
    async def _changed(self, sql: str, *params: Any) -> int:
        """A write of one statement (atomic on its own): the rows it changed."""

    async def _value(self, sql: str, *params: Any) -> Any:
        row = await self._row(sql, *params)
        return None if row is None else row[0]
