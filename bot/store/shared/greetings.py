"""Members' prepared greetings and their switch for them, the same queries on both backends."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bot.store.models import PreparedGreeting, UserRecord
from bot.store.shared.base import SqlBase

GREETING_COLUMNS = ("language", "name", "follow_up", "call_id", "chat_id", "fact_ids", "prepared_at")


def fact_ids_text(fact_ids: tuple[int, ...]) -> str:
    """``(12, 15)`` as stored: ``',12,15,'`` (the triggers of migration 20 find one id by ``',12,'``)."""
    return "," + "".join(f"{int(i)}," for i in fact_ids)


def greeting_record(row: Any, prefix: str = "") -> PreparedGreeting | None:
    """The greeting in ``row`` (its columns named ``prefix`` + column), or None when the row holds none."""
    if row[f"{prefix}language"] is None:
        return None
    return PreparedGreeting(
        language=row[f"{prefix}language"],
        prepared_at=float(row[f"{prefix}prepared_at"]),
        name=row[f"{prefix}name"],
        follow_up=row[f"{prefix}follow_up"],
        call_id=row[f"{prefix}call_id"],
        chat_id=row[f"{prefix}chat_id"],
        fact_ids=tuple(int(i) for i in str(row[f"{prefix}fact_ids"]).split(",") if i),
    )


class SharedGreetings(SqlBase):
    """Implements `bot.store.repository.GreetingStore`, and the member's switch of `AccountStore`."""

    if TYPE_CHECKING:  # the composed store's

        async def get_user(self, user_id: int) -> UserRecord | None: ...

    async def save_greeting(self, user_id: int, greeting: PreparedGreeting, *, generation: int) -> bool:
        async with self._shared_transaction() as tx:
            if not await tx.write_allowed(user_id, generation, None):
                return False
            await tx.changed(
                f"INSERT INTO greetings (user_id, {', '.join(GREETING_COLUMNS)}) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (user_id) DO UPDATE SET "
                + ", ".join(f"{name} = excluded.{name}" for name in GREETING_COLUMNS),
                user_id,
                greeting.language,
                greeting.name,
                greeting.follow_up,
                greeting.call_id,
                greeting.chat_id,
                fact_ids_text(greeting.fact_ids),
                greeting.prepared_at,
            )
        return True

    async def get_greeting(self, user_id: int) -> PreparedGreeting | None:
        row = await self._row(f"SELECT {', '.join(GREETING_COLUMNS)} FROM greetings WHERE user_id = $1", user_id)
        return None if row is None else greeting_record(row)

    async def drop_greeting(self, user_id: int) -> None:
        await self._changed("DELETE FROM greetings WHERE user_id = $1", user_id)

    async def set_personal_greetings(self, user_id: int, enabled: bool, at: float) -> UserRecord:
        """Turning them off deletes the member's prepared greeting in the same transaction."""
        async with self._shared_transaction() as tx:
            await tx.changed(
                "INSERT INTO users (user_id, created_at, personal_greetings) VALUES ($1, $2, $3) "
                "ON CONFLICT (user_id) DO UPDATE SET personal_greetings = excluded.personal_greetings",
                user_id,
                at,
                enabled,
            )
            if not enabled:
                await tx.changed("DELETE FROM greetings WHERE user_id = $1", user_id)
        user = await self.get_user(user_id)
        assert user is not None
        return user
