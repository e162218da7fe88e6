"""The contract between the voice agent's LLM route (``bot.web.llm_route``) and live recall.

The route only speaks HTTP; what a turn does is behind an ``LLMBackend`` (``bot.memory.live.LiveRecall``). Errors
the agent should get as an answer are ``LLMRouteError``: an HTTP status and an OpenAI-shaped error body.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any, Protocol


class LLMRouteError(Exception):
    """A request answered with an OpenAI-shaped error instead of a stream."""

    def __init__(self, status: int, message: str, *, error_type: str, code: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.code = code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.error_type, "param": None, "code": self.code}}


def unauthorized() -> LLMRouteError:
    return LLMRouteError(
        401,
        "Incorrect API key provided: this key is not valid for a call in progress.",
        error_type="invalid_request_error",
        code="invalid_api_key",
    )


def bad_request(message: str) -> LLMRouteError:
    return LLMRouteError(400, message, error_type="invalid_request_error", code="invalid_request")


class RelayStream(Protocol):
    """One answer being relayed: its content type, its bytes (whole SSE events, those that arrived together in one
    piece), and a close that releases the upstream and finishes the turn even when ``events()`` never ran."""

    content_type: str

    def events(self) -> AsyncGenerator[bytes]: ...

    async def close(self) -> None: ...


class LLMSession(Protocol):
    """A request whose key was accepted: it belongs to one call."""

    async def start_turn(self, request: object) -> RelayStream: ...


class LLMBackend(Protocol):
    async def authorize(self, api_key: str | None) -> LLMSession:
        """The session of the call this key belongs to; raises ``LLMRouteError`` (401) otherwise."""
        ...
