"""Typed errors for the OpenAI-compatible chat-completions client.

Messages name the setting most likely at fault, because the person reading them is usually someone running the
config doctor or reading a log, not a developer with a debugger. The setting names live here so the config
layer and these messages cannot drift apart silently.
"""

from __future__ import annotations

API_KEY_SETTING = "LLM_API_KEY"
BASE_URL_SETTING = "LLM_BASE_URL"
MODEL_SETTING = "LLM_MODEL"


class LLMError(Exception):
    """A failed LLM call. ``status`` is the HTTP status, or None when no HTTP response was received."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class LLMUnavailable(LLMError):
    """The service could not answer now: timeouts, connection errors, 5xx, or 429 after all retries."""


class LLMBadResponse(LLMError):
    """The service answered 2xx with something that is not a chat completion (or a models list)."""
