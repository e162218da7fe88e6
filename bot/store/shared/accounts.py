"""The member's Discord locale kept on their row, the same query on both backends."""

from __future__ import annotations

from bot.store.shared.base import SqlBase


class SharedAccounts(SqlBase):
    """Part of `bot.store.repository.AccountStore` written once."""

    async def set_user_locale(self, user_id: int, locale: str) -> None:
        """Only on the row of a member who chose to be remembered and has not paused; no row is created, and a
        locale already kept is not written again."""
        await self._changed(
            "UPDATE users SET locale = $2 WHERE user_id = $1 AND consent = 'remember' AND memory_enabled "
            "AND (locale IS NULL OR locale <> $2)",
            user_id,
            locale,
        )
