"""The post-call queue, webhook notices and meta (`JobStore`) on PostgreSQL."""

from __future__ import annotations

from bot.store.models import (
    Job,
)
from bot.store.postgres.base import PostgresBase, _count
from bot.store.repository import NOTICE_KEEP_SECONDS
from bot.store.shared import SharedJobs


class PostgresJobs(PostgresBase, SharedJobs):
    """Implements `bot.store.repository.JobStore`: the durable post-call queue (claimed with `FOR UPDATE SKIP
    LOCKED`), webhook notice de-duplication and small key/value state."""

    async def enqueue_job(self, kind: str, ref_id: str, at: float, *, not_before: float = 0.0) -> bool:
        added = await self._write(
            "INSERT INTO jobs (kind, ref_id, created_at, updated_at, not_before) VALUES ($1, $2, $3, $3, $4) "
            "ON CONFLICT (kind, ref_id) DO NOTHING",
            kind,
            ref_id,
            at,
            not_before,
        )
        return added == 1

    async def expedite_job(self, kind: str, ref_id: str, at: float) -> bool:
        changed = await self._write(
            "UPDATE jobs SET not_before = $3, updated_at = $3 WHERE kind = $1 AND ref_id = $2 AND state = 'pending' "
            "AND not_before > $3",
            kind,
            ref_id,
            at,
        )
        return changed == 1

    async def claim_job(self, at: float, lease_seconds: float) -> Job | None:
        """Take the oldest due job; a 'running' job whose lease ran out (its worker died) is due again. SKIP LOCKED
        lets several processes claim at once without waiting on, or taking, each other's job."""
        row = await self._one(
            "UPDATE jobs SET state = 'running', attempts = attempts + 1, not_before = $2, updated_at = $1 "
            "WHERE job_id = (SELECT job_id FROM jobs WHERE state IN ('pending', 'running') AND not_before <= $1 "
            "ORDER BY job_id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING job_id, kind, ref_id, attempts",
            at,
            at + lease_seconds,
        )
        if row is None:
            return None
        return Job(job_id=row["job_id"], kind=row["kind"], ref_id=row["ref_id"], attempts=row["attempts"])

    async def finish_job(self, job_id: int, at: float) -> None:
        await self._write("UPDATE jobs SET state = 'done', updated_at = $2 WHERE job_id = $1", job_id, at)

    async def fail_job(self, job_id: int, at: float, error: str, *, retry_at: float | None) -> None:
        if retry_at is None:
            await self._write(
                "UPDATE jobs SET state = 'failed', last_error = $2, updated_at = $3 WHERE job_id = $1",
                job_id,
                error[:500],
                at,
            )
        else:
            await self._write(
                "UPDATE jobs SET state = 'pending', last_error = $2, not_before = $4, updated_at = $3 "
                "WHERE job_id = $1",
                job_id,
                error[:500],
                at,
                retry_at,
            )

    # ---- notices and meta ------------------------------------------------------------------------------

    async def notice_seen(self, notice_id: str) -> bool:
        return await self._one("SELECT 1 FROM notices WHERE notice_id = $1", notice_id) is not None

    async def remember_notice(self, notice_id: str, at: float) -> bool:
        async with self._tx() as db:
            status = await db.execute(
                "INSERT INTO notices (notice_id, received_at) VALUES ($1, $2) ON CONFLICT (notice_id) DO NOTHING",
                notice_id,
                at,
            )
            await db.execute("DELETE FROM notices WHERE received_at < $1", at - NOTICE_KEEP_SECONDS)
            return _count(status) == 1

    async def get_meta(self, key: str) -> str | None:
        value = await self.pool.fetchval("SELECT value FROM meta WHERE key = $1", key)
        return None if value is None else str(value)

    async def set_meta(self, key: str, value: str) -> None:
        await self._write(
            "INSERT INTO meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            key,
            value,
        )
