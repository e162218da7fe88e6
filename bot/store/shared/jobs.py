"""The job queue, webhook notices and meta where both backends ask the same."""

from __future__ import annotations

from bot.store.shared.base import (
    SqlBase,
)


class SharedJobs(SqlBase):
    """The job queue, webhook notices and meta where both backends ask the same: each one statement, atomic on
    its own (a claim, and remembering a notice, are each backend's own)."""

    async def enqueue_job(self, kind: str, ref_id: str, at: float, *, not_before: float = 0.0) -> bool:
        added = await self._changed(
            "INSERT INTO jobs (kind, ref_id, created_at, updated_at, not_before) VALUES ($1, $2, $3, $3, $4) "
            "ON CONFLICT (kind, ref_id) DO NOTHING",
            kind,
            ref_id,
            at,
            not_before,
        )
        return added == 1

    async def expedite_job(self, kind: str, ref_id: str, at: float) -> bool:
        changed = await self._changed(
            "UPDATE jobs SET not_before = $3, updated_at = $3 WHERE kind = $1 AND ref_id = $2 AND state = 'pending' "
            "AND not_before > $3",
            kind,
            ref_id,
            at,
        )
        return changed == 1

    async def finish_job(self, job_id: int, at: float) -> None:
        await self._changed("UPDATE jobs SET state = 'done', updated_at = $2 WHERE job_id = $1", job_id, at)

    async def fail_job(self, job_id: int, at: float, error: str, *, retry_at: float | None) -> None:
        if retry_at is None:
            await self._changed(
                "UPDATE jobs SET state = 'failed', last_error = $2, updated_at = $3 WHERE job_id = $1",
                job_id,
                error[:500],
                at,
            )
        else:
            await self._changed(
                "UPDATE jobs SET state = 'pending', last_error = $2, not_before = $4, updated_at = $3 "
                "WHERE job_id = $1",
                job_id,
                error[:500],
                at,
                retry_at,
            )

    async def notice_seen(self, notice_id: str) -> bool:
        return await self._row("SELECT 1 FROM notices WHERE notice_id = $1", notice_id) is not None

    async def get_meta(self, key: str) -> str | None:
        value = await self._value("SELECT value FROM meta WHERE key = $1", key)
        return None if value is None else str(value)

    async def set_meta(self, key: str, value: str) -> None:
        await self._changed(
            "INSERT INTO meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            key,
            value,
        )

    async def job_queue(self) -> tuple[int, float | None]:
        """Jobs waiting or running, and the creation time of the oldest of them (None when there are none)."""
        row = await self._row("SELECT COUNT(*), MIN(created_at) FROM jobs WHERE state IN ('pending', 'running')")
        if row is None:
            return 0, None
        return int(row[0]), None if row[1] is None else float(row[1])

    async def job_state(self, kind: str, ref_id: str) -> str | None:
        state = await self._value("SELECT state FROM jobs WHERE kind = $1 AND ref_id = $2", kind, ref_id)
        return None if state is None else str(state)
