"""What members read when something could not be done: short, friendly, and saying what to do next.

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
from bot.llm import LLMError
from bot.memory.chat import ChatDisabled
from bot.store.repository import StorageFull

SOMETHING_WENT_WRONG = "Something went wrong on our side. Please try again in a moment."
NEEDS_MANAGE_SERVER = "You need the **Manage Server** permission to change the bot's settings here."
SERVER_ONLY = "This command works inside a server, not in direct messages."
MEMORY_PAUSED = "Your memory is paused, so nothing is remembered. Resume it from `/memory`."
CALL_ENDED_NOT_SAVED = (
    "**Call ended.** The agent has stopped. The bot's storage is full right now, so this call isn't saved yet: "
    "it is saved automatically as soon as there is space again. Nothing else for you to do."
)
STORAGE_FULL = (
    "The bot can't save anything right now because its storage is full. Please try again later; if it keeps "
    "happening, tell the person who hosts the bot."
)
CALLS_NOT_CONFIGURED = "Voice calls are not set up on this bot yet. Ask the person who hosts it to configure Agora."


def plural(n: int, word: str, many: str | None = None) -> str:
    """ "1 call", "2 calls": every count a member reads goes through here."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def relative_time(ts: float) -> str:
    return f"<t:{int(ts)}:R>"


def for_call_error(error: CallError) -> str:
    if isinstance(error, CallsDisabled):
        return "Voice calls are turned off in this server. An admin can turn them on with `/settings calls`."
    if isinstance(error, CallAlreadyActive):
        return "You already have a call running. End it with `/hangup` (or its **Hang up** button) first."
    if isinstance(error, QuotaReached):
        return (
            f"You've reached today's limit of {plural(error.limit, 'call')} in this server. "
            f"You can call again {relative_time(error.resets_at)}."
        )
    if isinstance(error, CapacityReached):
        return "All voice agents are busy right now. Please try again in a few minutes."
    if isinstance(error, VoiceUnavailable):
        return (
            "Voice calls are not available right now. Please try again later; "
            "if it keeps happening, tell a server admin."
        )
    if isinstance(error, NoActiveCall):
        return "You don't have a call running. Start one with `/call`."
    if isinstance(error, ConsentRequired):
        return "Please choose whether the agent may remember you first: type `/call` again."
    return SOMETHING_WENT_WRONG


def for_error(error: BaseException) -> str | None:
    """The member-facing text for an expected error, or None for an unexpected one."""
    if isinstance(error, CallError):
        return for_call_error(error)
    if isinstance(error, ChatDisabled):
        return "Text chat is not enabled on this bot. Voice calls still work: try `/call`."
    if isinstance(error, StorageFull):
        return STORAGE_FULL
    if isinstance(error, LLMError):
        return "I can't answer right now: the language model did not respond. Please try again in a minute."
    return None


def cooldown(retry_at: float) -> str:
    return f"Slow down! You can use this again {relative_time(retry_at)}."
