"""Why a call could not start or be changed. Each carries what a friendly message needs; the command tree's
error funnel turns them into text (services never format Discord replies)."""

from __future__ import annotations


class CallError(Exception):
    """Base of every expected call failure."""


class CallsDisabled(CallError):
    """An admin turned calls off in this server."""


class ConsentRequired(CallError):
    """The member has not chosen yet whether the agent may remember them."""


class CallAlreadyActive(CallError):
    def __init__(self, call_id: str):
        super().__init__(f"call {call_id} is still running")
        self.call_id = call_id


class QuotaReached(CallError):
    def __init__(self, limit: int, resets_at: float):
        super().__init__(f"daily limit of {limit} call{'s' if limit != 1 else ''} reached")
        self.limit = limit
        self.resets_at = resets_at


class CapacityReached(CallError):
    """Every agent slot (Agora's concurrency limit) is busy."""


class VoiceUnavailable(CallError):
    """Agora refused or did not answer; `detail` is for logs, never for members."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


class NoActiveCall(CallError):
    """/hangup without a call."""


class WebhookNotStored(Exception):
    """A verified webhook delivery could not be stored (a database error); Agora must send it again."""
