"""What members read when something could not be done: short, friendly, and saying what to do next, in the
member's language (``bot.i18n``: the ``errors.*`` keys).

Pure text, no Discord types, so the wording is tested on its own and reused by the command tree and views."""

from __future__ import annotations

from bot.calls.errors import (
    CallAlreadyActive,
    CallError,
    CallsDisabled,
    CapacityReached,
    ConsentRequired,
    NoActiveCall,
    QuotaReached,
    VoiceUnavailable,
)
from bot.i18n import Words
from bot.llm import LLMError
from bot.memory.chat import ChatDisabled
from bot.places import ServerWithoutBot
from bot.store.repository import StorageFull

CALL_ERRORS: tuple[tuple[type[CallError], str], ...] = (
    (CallsDisabled, "errors.calls_disabled"),
    (CallAlreadyActive, "errors.call_already_active"),
    (CapacityReached, "errors.capacity_reached"),
    (VoiceUnavailable, "errors.voice_unavailable"),
    (NoActiveCall, "errors.no_active_call"),
    (ConsentRequired, "errors.consent_required"),
)


def relative_time(ts: float) -> str:
    """A Discord timestamp ("in 3 hours"): each member's client renders it in their own language."""
    return f"<t:{int(ts)}:R>"


def for_call_error(error: CallError, words: Words) -> str:
    if isinstance(error, QuotaReached):
        calls = words.count("count.call", error.limit)
        return words("errors.quota_reached", calls=calls, when=relative_time(error.resets_at))
    key = next((key for kind, key in CALL_ERRORS if isinstance(error, kind)), "errors.something_went_wrong")
    return words(key)


def for_error(error: BaseException, words: Words) -> str | None:
    """The member-facing text for an expected error, or None for an unexpected one."""
    if isinstance(error, CallError):
        return for_call_error(error, words)
    if isinstance(error, ChatDisabled):
        return words("errors.chat_disabled")
    if isinstance(error, StorageFull):
        return words("errors.storage_full")
    if isinstance(error, LLMError):
        return words("errors.llm")
    if isinstance(error, ServerWithoutBot):
        return words("errors.server_without_bot")
    return None


def cooldown(retry_at: float, words: Words) -> str:
    return words("errors.cooldown", when=relative_time(retry_at))
