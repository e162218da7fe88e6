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

    # ---- notices and meta ------------------------------------------------------------------------------

    async def remember_notice(self, notice_id: str, at: float) -> bool:
        async with self._tx() as db:
            status = await db.execute(
                "INSERT INTO notices (notice_id, received_at) VALUES ($1, $2) ON CONFLICT (notice_id) DO NOTHING",
                notice_id,
                at,
            )
            await db.execute("DELETE FROM notices WHERE received_at < $1", at - NOTICE_KEEP_SECONDS)
            return _count(status) == 1
