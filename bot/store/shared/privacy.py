"""What forgetting and export read, the same query on both backends."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bot.store.columns import FACT_COLUMNS, TURN_COLUMNS
from bot.store.export import build_export
from bot.store.models import (
    Conversation,
    ForgetResult,
    UserRecord,
)
from bot.store.shared.base import (
    SqlBase,
)


def only_from(column: str) -> str:
    """The ids of the facts that came only from the conversation ``column = $1``."""
    return (
        f"SELECT fact_id FROM fact_sources WHERE {column} = $1 "
        f"EXCEPT SELECT fact_id FROM fact_sources WHERE {column} IS NULL OR {column} != $1 "
        f"UNION SELECT fact_id FROM facts WHERE source_{column} = $1 "
        "AND fact_id NOT IN (SELECT fact_id FROM fact_sources)"
    )


class SharedPrivacy(SqlBase):
    """What forgetting and export read, the same query on both backends (the deletions are each backend's
    own)."""

    if TYPE_CHECKING:  # the composed store's

        async def get_user(self, user_id: int) -> UserRecord | None: ...

    async def forget_preview(self, convo: Conversation) -> ForgetResult:
        column, ref = convo.column, convo.ref_id
        row = await self._row(
            f"SELECT (SELECT COUNT(*) FROM ({only_from(column)}) AS only_here), "
            f"(SELECT COUNT(*) FROM turns WHERE {column} = $1), "
            f"(SELECT COUNT(*) FROM {convo.table} WHERE {column} = $1)",
            ref,
        )
        facts, turns, found = (0, 0, 0) if row is None else (int(row[0]), int(row[1]), int(row[2]))
        return ForgetResult(
            turns=turns,
            facts=facts,
            calls=found if convo.kind == "call" else 0,
            chats=found if convo.kind == "chat" else 0,
        )

    async def pending_scrub(self) -> bool:
        return await self._row("SELECT 1 FROM pending_scrubs LIMIT 1") is not None

    async def begin_forget(self, user_id: int) -> int:
        async with self._shared_transaction() as tx:
            return int(
                await tx.value(
                    "INSERT INTO memory_fences (user_id, generation, forget_begun) VALUES ($1, 1, 1) "
                    "ON CONFLICT (user_id) DO UPDATE SET generation = memory_fences.generation + 1, "
                    "forget_begun = memory_fences.generation + 1 RETURNING generation",
                    user_id,
                )
            )

    async def interrupted_forgets(self) -> list[int]:
        rows = await self._rows("SELECT user_id FROM memory_fences WHERE forget_begun IS NOT NULL ORDER BY user_id")
        return [int(row[0]) for row in rows]

    async def export_user(self, user_id: int) -> dict[str, Any]:
        user = await self.get_user(user_id)
        facts = await self._rows(f"SELECT {FACT_COLUMNS} FROM facts WHERE user_id = $1 ORDER BY fact_id", user_id)
        calls = await self._rows("SELECT * FROM calls WHERE user_id = $1 ORDER BY started_at", user_id)
        chats = await self._rows("SELECT * FROM chats WHERE user_id = $1 ORDER BY started_at", user_id)
        turns = await self._rows(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE user_id = $1 ORDER BY spoken_at, seq", user_id
        )
        return build_export(user_id, user, facts=facts, calls=calls, chats=chats, turns=turns)
