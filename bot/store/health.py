"""Whether the store's writes succeed: what `/healthz` and `/metrics` report while members are told storage is
full (or a write fails for another reason), instead of "ok" and no error counted."""

from __future__ import annotations

import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import asyncpg

from bot.store.repository import StorageFull

EXPECTED = (sqlite3.IntegrityError, asyncpg.IntegrityConstraintViolationError)
"""A constraint a write was meant to test (a duplicate, a row that went away): the database works."""


FAILING_WINDOW_SECONDS = 120.0
"""How long a failed write keeps the store reported as failing. On a full disk some small writes (an update in
place) still succeed between the failing ones; the bot retries storing an ended call every minute, so a disk that
stays full stays reported without flapping to "ok"."""


@dataclass
class WriteHealth:
    """Failed writes by kind since the process started, and why the last one failed while it is recent."""

    clock: Callable[[], float] = time.monotonic
    window_seconds: float = FAILING_WINDOW_SECONDS
    failures: Counter[str] = field(default_factory=Counter)
    last_failure: str | None = None
    last_failed_at: float | None = None
    _last_write_failed: bool = False

    @property
    def failing(self) -> str | None:
        """Why writes fail: the last failure, while the most recent write failed or it is within the window."""
        if self.last_failed_at is None:
            return None
        if self._last_write_failed or self.clock() - self.last_failed_at < self.window_seconds:
            return self.last_failure
        return None

    @property
    def writable(self) -> bool:
        """Whether the most recent write succeeded: true again the moment one does, while ``failing`` still
        reports the episode for the window."""
        return not self._last_write_failed

    @contextmanager
    def write(self) -> Iterator[None]:
        try:
            yield
        except StorageFull as exc:
            self._failed("StorageFull", f"the disk or database is full ({exc})")
            raise
        except EXPECTED:
            raise
        except (sqlite3.Error, asyncpg.PostgresError, OSError) as exc:
            self._failed(type(exc).__name__, f"{type(exc).__name__}: {exc}")
            raise
        self._last_write_failed = False

    def _failed(self, kind: str, why: str) -> None:
        self.failures[kind] += 1
        self.last_failure, self.last_failed_at, self._last_write_failed = why, self.clock(), True
