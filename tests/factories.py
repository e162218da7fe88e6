"""Builders for records used across test packages."""

from __future__ import annotations

import itertools
import time

from bot.store.models import CallRecord

_ids = itertools.count(1)


def make_call(user_id: int = 42, *, guild_id: int | None = 7, state: str = "active", **overrides) -> CallRecord:
    n = next(_ids)
    fields = dict(
        call_id=f"call-{n}",
        user_id=user_id,
        guild_id=guild_id,
        channel=f"ch-{n}",
        agent_name=f"agent-{n}",
        user_uid=1000 + n,
        agent_uid=900000 + n,
        state=state,
        max_minutes=30,
        started_at=time.time(),
    )
    fields.update(overrides)
    return CallRecord(**fields)
