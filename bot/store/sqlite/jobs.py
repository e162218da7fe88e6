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

    # ---- notices and meta ------------------------------------------------------------------------------

    async def remember_notice(self, notice_id: str, at: float) -> bool:
        async with self._tx() as db:
            cur = await db.execute(
                "INSERT INTO notices (notice_id, received_at) VALUES (?, ?) ON CONFLICT (notice_id) DO NOTHING",
                (notice_id, at),
            )
            await db.execute("DELETE FROM notices WHERE received_at < ?", (at - NOTICE_KEEP_SECONDS,))
            return cur.rowcount == 1
