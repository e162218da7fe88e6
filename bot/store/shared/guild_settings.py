"""The servers' retention read, the same query on both backends."""

from __future__ import annotations

from bot.store.shared.base import (
    SqlBase,
)


class SharedGuildSettings(SqlBase):
    """The servers' retention read, the same query on both backends."""

    async def retention_policies(self) -> list[tuple[int, int]]:
        rows = await self._rows(
            "SELECT guild_id, retention_days FROM guild_settings WHERE retention_days IS NOT NULL "
            "AND retention_days > 0"
        )
        return [(r[0], r[1]) for r in rows]
