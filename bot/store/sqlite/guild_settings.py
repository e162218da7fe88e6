"""Per-server settings (`GuildSettingsStore`) on SQLite."""

from __future__ import annotations

from typing import Any

from bot.store.columns import GUILD_SETTING_NAMES as _GUILD_SETTING_NAMES
from bot.store.models import (
    GuildSettings,
)
from bot.store.shared import SharedGuildSettings
from bot.store.sqlite.base import SqliteBase, _guild


class SqliteGuildSettings(SqliteBase, SharedGuildSettings):
    """Implements `bot.store.repository.GuildSettingsStore`."""

    async def get_guild_settings(self, guild_id: int) -> GuildSettings:
        return _guild(guild_id, await self._one("SELECT * FROM guild_settings WHERE guild_id = ?", (guild_id,)))

    async def update_guild_settings(self, guild_id: int, at: float, **changes: Any) -> GuildSettings:
        unknown = set(changes) - _GUILD_SETTING_NAMES
        if unknown:
            raise ValueError(f"unknown guild settings: {sorted(unknown)}")
        async with self._tx() as db:
            await db.execute(
                "INSERT INTO guild_settings (guild_id, updated_at) VALUES (?, ?) ON CONFLICT (guild_id) DO NOTHING",
                (guild_id, at),
            )
            if changes:
                assignments = ", ".join(f"{name} = ?" for name in changes)
                values = [int(v) if isinstance(v, bool) else v for v in changes.values()]
                await db.execute(
                    f"UPDATE guild_settings SET {assignments}, updated_at = ? WHERE guild_id = ?",
                    (*values, at, guild_id),
                )
        return await self.get_guild_settings(guild_id)

    async def delete_guild_settings(self, guild_id: int) -> None:
        async with self._tx() as db:
            await db.execute("DELETE FROM guild_settings WHERE guild_id = ?", (guild_id,))
