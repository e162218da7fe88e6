"""Members and their consent (`AccountStore`) on SQLite."""

from __future__ import annotations

from bot.store.models import (
    UserRecord,
)
from bot.store.shared import SharedAccounts, user_record
from bot.store.sqlite.base import SqliteBase
from bot.store.sqlite.fences import _stop_remembering


class SqliteAccounts(SqliteBase, SharedAccounts):
    """Implements `bot.store.repository.AccountStore`."""

    async def get_user(self, user_id: int) -> UserRecord | None:
        row = await self._one("SELECT * FROM users WHERE user_id = ?", (user_id,))
        return None if row is None else user_record(row)

    async def set_consent(self, user_id: int, remember: bool, at: float) -> UserRecord:
        consent = "remember" if remember else "no_memory"
        async with self._tx() as db:
            await db.execute(
                "INSERT INTO users (user_id, memory_enabled, consent, consent_at, created_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (user_id) DO UPDATE SET consent = excluded.consent, consent_at = excluded.consent_at, "
                "memory_enabled = excluded.memory_enabled",
                (user_id, int(remember), consent, at, at),
            )
            if not remember:
                await _stop_remembering(db, user_id)
        user = await self.get_user(user_id)
        assert user is not None
        return user

    async def set_memory_enabled(self, user_id: int, enabled: bool, at: float) -> UserRecord:
        async with self._tx() as db:
            await db.execute(
                "INSERT INTO users (user_id, memory_enabled, created_at) VALUES (?, ?, ?) "
                "ON CONFLICT (user_id) DO UPDATE SET memory_enabled = excluded.memory_enabled",
                (user_id, int(enabled), at),
            )
            if not enabled:
                await _stop_remembering(db, user_id)
        user = await self.get_user(user_id)
        assert user is not None
        return user

    async def set_user_language(self, user_id: int, language: str | None, at: float) -> UserRecord:
        async with self._tx() as db:
            await db.execute(
                "INSERT INTO users (user_id, created_at, language) VALUES (?, ?, ?) "
                "ON CONFLICT (user_id) DO UPDATE SET language = excluded.language",
                (user_id, at, language),
            )
        user = await self.get_user(user_id)
        assert user is not None
        return user
