"""The post-call queue, webhook notices and meta (`JobStore`) on SQLite."""

from __future__ import annotations

from bot.store.models import (
    Job,
)
from bot.store.repository import NOTICE_KEEP_SECONDS
from bot.store.shared import SharedJobs
from bot.store.sqlite.base import SqliteBase


class SqliteJobs(SqliteBase, SharedJobs):
    """Implements `bot.store.repository.JobStore`: the durable post-call queue, webhook notice de-duplication
    and small key/value state."""

    async def enqueue_job(self, kind: str, ref_id: str, at: float, *, not_before: float = 0.0) -> bool:
        added = await self._write(
            "INSERT INTO jobs (kind, ref_id, created_at, updated_at, not_before) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (kind, ref_id) DO NOTHING",
            (kind, ref_id, at, at, not_before),
        )
        return added == 1

    async def expedite_job(self, kind: str, ref_id: str, at: float) -> bool:
        changed = await self._write(
            "UPDATE jobs SET not_before = ?, updated_at = ? WHERE kind = ? AND ref_id = ? AND state = 'pending' "
            "AND not_before > ?",
            (at, at, kind, ref_id, at),
        )
        return changed == 1

    async def claim_job(self, at: float, lease_seconds: float) -> Job | None:
        """Take the oldest due job; a 'running' job whose lease ran out (its worker died) is due again."""
        async with self._tx() as db:
            async with db.execute(
                "SELECT job_id, kind, ref_id, attempts FROM jobs WHERE (state = 'pending' AND not_before <= ?) "
                "OR (state = 'running' AND not_before <= ?) ORDER BY job_id LIMIT 1",
                (at, at),
            ) as cur:
                row = await cur.fetchone()
            if row is None:
                return None
            await db.execute(
                "UPDATE jobs SET state = 'running', attempts = attempts + 1, not_before = ?, updated_at = ? "
                "WHERE job_id = ?",
                (at + lease_seconds, at, row["job_id"]),
            )
            return Job(job_id=row["job_id"], kind=row["kind"], ref_id=row["ref_id"], attempts=row["attempts"] + 1)

    async def finish_job(self, job_id: int, at: float) -> None:
        await self._write("UPDATE jobs SET state = 'done', updated_at = ? WHERE job_id = ?", (at, job_id))

    async def fail_job(self, job_id: int, at: float, error: str, *, retry_at: float | None) -> None:
        async with self._tx() as db:
            if retry_at is None:
                await db.execute(
                    "UPDATE jobs SET state = 'failed', last_error = ?, updated_at = ? WHERE job_id = ?",
                    (error[:500], at, job_id),
                )
            else:
                await db.execute(
                    "UPDATE jobs SET state = 'pending', last_error = ?, not_before = ?, updated_at = ? "
                    "WHERE job_id = ?",
                    (error[:500], retry_at, at, job_id),
                )

    # ---- notices and meta ------------------------------------------------------------------------------

    async def notice_seen(self, notice_id: str) -> bool:
        return await self._one("SELECT 1 FROM notices WHERE notice_id = ?", (notice_id,)) is not None

    async def remember_notice(self, notice_id: str, at: float) -> bool:
        async with self._tx() as db:
            cur = await db.execute(
                "INSERT INTO notices (notice_id, received_at) VALUES (?, ?) ON CONFLICT (notice_id) DO NOTHING",
                (notice_id, at),
            )
            await db.execute("DELETE FROM notices WHERE received_at < ?", (at - NOTICE_KEEP_SECONDS,))
            return cur.rowcount == 1

    async def get_meta(self, key: str) -> str | None:
        value = await self._scalar("SELECT value FROM meta WHERE key = ?", (key,))
        return None if value is None else str(value)

    async def set_meta(self, key: str, value: str) -> None:
        await self._write(
            "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )
