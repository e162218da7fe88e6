"""The values the call package hands out (a started call, an ended one, a server's usage) and the timings its parts
share, so that each part depends on these and not on one another."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from bot.store.models import CallRecord, EndReason


@dataclass(frozen=True)
class CallTimings:
    """How long the call lifecycle waits, between what; the defaults are the bot's, tests pass shorter ones."""

    leave_retry_first_seconds: float = 5.0
    """An agent Agora would not stop is asked again after this long, then after twice as long each time..."""
    leave_retry_max_seconds: float = 300.0
    """... up to this long between two tries."""
    checkpoint_yield_max_seconds: float = 2.0
    """A checkpoint waits at most this long (and at most a quarter of the checkpoint interval) for the starts and
    hang-ups in flight: saving a running call's history can wait a moment, a member who is waiting cannot."""
    webhook_grace_seconds: float = 15.0
    """Post-call processing waits at most this long after a call ends, so Agora's history webhook (NCS 103) can land
    first; it starts at once when that webhook already arrived or when no webhook is configured."""


@dataclass(frozen=True)
class StartedCall:
    call_id: str
    link_url: str
    link_expires_at: float
    max_minutes: int
    private: bool
    memory_paused: bool = False
    """Private only because the member paused their memory (not a private call they asked for)."""
    language: str = "en"
    """The language the call is held in (`bot.calls.language`)."""
    language_wanted: str | None = None
    """The language the member would have had, when this bot's voice settings cannot hold calls in it."""
    remembers_earlier: bool = False
    """The agent starts with something remembered of the member (not their first remembered call)."""


@dataclass(frozen=True)
class CallEnded:
    call_id: str
    user_id: int
    guild_id: int | None
    reason: EndReason
    turns_stored: int
    private: bool
    card: tuple[str, int] | None = None  # (interaction token, message id) of the member's card, if it was shown
    saved: bool = True
    """False when the disk was full: the call ended and its agent stopped, but it is stored later."""
    lines_lost: int = 0
    """Things the member said while no bot process ran that could not be stored (`bot.calls.recovery`)."""


class CallListener(Protocol):
    async def call_ended(self, ended: CallEnded) -> None: ...


@dataclass(frozen=True)
class GuildUsage:
    calls_today: int
    active_now: int


def start_of_day(ts: float) -> float:
    day = datetime.fromtimestamp(ts, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day.timestamp()


def card_of(call: CallRecord) -> tuple[str, int] | None:
    """The member's call card (interaction token, message id), when one was shown and stored."""
    if call.notify_token and call.card_message_id is not None:
        return call.notify_token, call.card_message_id
    return None
