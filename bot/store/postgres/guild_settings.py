"""Per-server settings (`GuildSettingsStore`) on PostgreSQL."""

from __future__ import annotations

from typing import Any

from bot.store.columns import GUILD_SETTING_NAMES as _GUILD_SETTING_NAMES
from bot.store.models import (
    GuildSettings,
)
from bot.store.postgres.base import PostgresBase, _guild
from bot.store.shared import SharedGuildSettings


class PostgresGuildSettings(PostgresBase, SharedGuildSettings):
    """Implements `bot.store.repository.GuildSettingsStore`."""

    async def get_guild_settings(self, guild_id: int) -> GuildSettings:
        row = await self._one("SELECT * FROM guild_settings WHERE guild_id = $1", guild_id)
        return GuildSettings(guild_id=guild_id) if row is None else _guild(row)

    async def update_guild_settings(self, guild_id: int, at: float, **changes: Any) -> GuildSettings:
        unknown = set(changes) - _GUILD_SETTING_NAMES
        if unknown:
            raise ValueError(f"unknown guild settings: {sorted(unknown)}")
        names = list(changes)
        columns = ", ".join(["guild_id", "updated_at", *names])
        placeholders = ", ".join(f"${i}" for i in range(1, len(names) + 3))
        updates = ", ".join(["updated_at = excluded.updated_at", *(f"{n} = excluded.{n}" for n in names)])
        row = await self._one(
            f"INSERT INTO guild_settings ({columns}) VALUES ({placeholders}) "
            f"ON CONFLICT (guild_id) DO UPDATE SET {updates} RETURNING *",
            guild_id,
            at,
            *changes.values(),
        )
        assert row is not None
        return _guild(row)

    async def delete_guild_settings(self, guild_id: int) -> None:
        await self._write("DELETE FROM guild_settings WHERE guild_id = $1", guild_id)
