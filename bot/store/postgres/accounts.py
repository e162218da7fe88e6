"""Members and their consent (`AccountStore`) on PostgreSQL."""

from __future__ import annotations

from bot.store.models import (
    UserRecord,
)
from bot.store.postgres.base import PostgresBase
from bot.store.postgres.fences import _stop_remembering
from bot.store.shared import SharedAccounts, user_record


class PostgresAccounts(PostgresBase, SharedAccounts):
    """Implements `bot.store.repository.AccountStore`."""

    async def get_user(self, user_id: int) -> UserRecord | None:
        row = await self._one("SELECT * FROM users WHERE user_id = $1", user_id)
        return None if row is None else user_record(row)

    async def set_consent(self, user_id: int, remember: bool, at: float) -> UserRecord:
        async with self._tx() as db:
            row = await db.fetchrow(
                "INSERT INTO users (user_id, memory_enabled, consent, consent_at, created_at) "
                "VALUES ($1, $2, $3, $4, $4) ON CONFLICT (user_id) DO UPDATE SET consent = excluded.consent, "
                "consent_at = excluded.consent_at, memory_enabled = excluded.memory_enabled RETURNING *",
                user_id,
                remember,
                "remember" if remember else "no_memory",
                at,
            )
            if not remember:
                await _stop_remembering(db, user_id)
        assert row is not None
        return user_record(row)

    async def set_memory_enabled(self, user_id: int, enabled: bool, at: float) -> UserRecord:
        async with self._tx() as db:
            row = await db.fetchrow(
                "INSERT INTO users (user_id, memory_enabled, created_at) VALUES ($1, $2, $3) "
                "ON CONFLICT (user_id) DO UPDATE SET memory_enabled = excluded.memory_enabled RETURNING *",
                user_id,
                enabled,
                at,
            )
            if not enabled:
                await _stop_remembering(db, user_id)
        assert row is not None
        return user_record(row)

    async def set_user_language(self, user_id: int, language: str | None, at: float) -> UserRecord:
        async with self._tx() as db:
            row = await db.fetchrow(
                "INSERT INTO users (user_id, created_at, language) VALUES ($1, $2, $3) "
                "ON CONFLICT (user_id) DO UPDATE SET language = excluded.language RETURNING *",
                user_id,
                at,
                language,
            )
        assert row is not None
        return user_record(row)
