"""Typed errors for the Agora ConvoAI REST API.

The service has documented two error body shapes over time (spec §3.3): the current ``{"detail", "reason"}``
and the older ``{"message", "statusCode", "taskId", "requestResponse"}``. Both are parsed, any ``reason``
string is accepted, and non-JSON bodies are kept as a truncated detail.
"""

from __future__ import annotations

import json
from typing import Any

MAX_DETAIL_CHARS = 500


class AgoraError(Exception):
    """A failed ConvoAI operation.

    ``status`` is the HTTP status, or None when no HTTP response was received (connection error, timeout).
    ``task_id`` is the agent ID some 409 bodies of the older shape carry; None when absent.
    ``retry_after`` is the server's ``Retry-After`` hint in seconds, when it sent one.
    """

    hint: str = ""

    def __init__(
        self,
        operation: str,
        status: int | None,
        reason: str,
        detail: str,
        *,
        task_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.operation = operation
        self.status = status
        self.reason = reason
        self.detail = detail
        self.task_id = task_id
        self.retry_after = retry_after
        super().__init__(self._describe())

    def _describe(self) -> str:
        status_text = f"HTTP {self.status}" if self.status is not None else "no HTTP response"
        parts = [f"Agora ConvoAI {self.operation} failed: {status_text}"]
        if self.reason:
            parts.append(self.reason)
        if self.detail:
            parts.append(self.detail)
        message = ": ".join(parts)
        return f"{message} ({self.hint})" if self.hint else message

    def __str__(self) -> str:
        return self._describe()


class AgoraBadRequest(AgoraError):
    """400: the request body or a field value was rejected."""


class AgoraAuthError(AgoraError):
    """401/403: credentials rejected, or the service is not enabled for the account."""

    hint = (
        "check agora.customer_id / AGORA_CUSTOMER_SECRET (Agora Console → RESTful API), "
        "that agora.app_id belongs to that account, and that Conversational AI is enabled for the project"
    )


class AgoraNotFound(AgoraError):
    """404: the agent does not exist or has already exited."""


class AgoraConflict(AgoraError):
    """409: an agent with the same name already exists (TaskConflict)."""


class AgoraLimitExceeded(AgoraError):
    """422: a quota or the concurrent-agent limit (20 per App ID) is exhausted."""


class AgoraRateLimited(AgoraError):
    """429: too many requests."""


class AgoraUnavailable(AgoraError):
    """5xx, timeouts and connection errors (status None for the latter)."""


_ERROR_CLASS_BY_STATUS: dict[int, type[AgoraError]] = {
    400: AgoraBadRequest,
    401: AgoraAuthError,
    403: AgoraAuthError,
    404: AgoraNotFound,
    409: AgoraConflict,
    422: AgoraLimitExceeded,
    429: AgoraRateLimited,
}


def error_class_for_status(status: int) -> type[AgoraError]:
    if status >= 500:
        return AgoraUnavailable
    return _ERROR_CLASS_BY_STATUS.get(status, AgoraError)


def error_from_response(
    operation: str,
    status: int,
    body: bytes | str,
    *,
    retry_after: float | None = None,
) -> AgoraError:
    """Build the typed error for a non-2xx response, whatever its body looks like."""
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
    reason, detail, task_id = _parse_error_body(text)
    error_class = error_class_for_status(status)
    return error_class(operation, status, reason, detail, task_id=task_id, retry_after=retry_after)


def _parse_error_body(text: str) -> tuple[str, str, str | None]:
    try:
        decoded: Any = json.loads(text)
    except ValueError:
        return "", _truncate(text.strip()), None
    if not isinstance(decoded, dict):
        return "", _truncate(text.strip()), None
    reason = _first_text(decoded, "reason", "statusCode")
    detail = _first_text(decoded, "detail", "message")
    task_id = _first_text(decoded, "taskId") or None
    return reason, _truncate(detail), task_id


def _first_text(mapping: dict[str, Any], *keys: str) -> str:
    for key in keys:
        value = mapping.get(key)
        if value is None or value == "":
            continue
        return value if isinstance(value, str) else json.dumps(value)
    return ""


def _truncate(text: str) -> str:
    if len(text) <= MAX_DETAIL_CHARS:
        return text
    return text[:MAX_DETAIL_CHARS] + "…"
