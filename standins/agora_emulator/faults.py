"""What a test makes go wrong in the ConvoAI API: the next answers of an operation fail (before or after the
request was processed, in Agora's or its legacy error shape, with ``Retry-After``), or wait until released."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from standins.agora_emulator.fields import json_response

DEFAULT_REASONS = {
    400: "InvalidFieldValue",
    401: "InvalidPermission",
    403: "ServiceNotEnabled",
    404: "TaskNotFound",
    409: "TaskConflict",
    422: "ConcurrencyLimitExceeded",
    429: "TooManyRequests",
    500: "InternalError",
    502: "ServiceUnavailable",
    503: "ServiceUnavailable",
    504: "TaskOperationTimeout",
}


@dataclass
class FailureRule:
    remaining: int
    status: int
    operation: str | None
    reason: str
    detail: str
    after_processing: bool
    retry_after: float | None
    legacy_body: bool

    def matches(self, operation: str, after_processing: bool) -> bool:
        return (
            self.remaining > 0
            and self.after_processing == after_processing
            and (self.operation is None or self.operation == operation)
        )


@dataclass
class ResponseGate:
    """See ``AgoraEmulator.hold_responses``: ``reached`` is set when a held answer is ready."""

    reached: asyncio.Event = field(default_factory=asyncio.Event)
    opened: asyncio.Event = field(default_factory=asyncio.Event)

    def release(self) -> None:
        self.opened.set()


def injected_response(rule: FailureRule) -> web.Response:
    headers = {"Retry-After": f"{rule.retry_after:g}"} if rule.retry_after is not None else None
    if rule.legacy_body:
        body: dict[str, Any] = {
            "message": rule.detail,
            "requestResponse": {},
            "statusCode": rule.reason,
            "taskId": "",
        }
    else:
        body = {"detail": rule.detail, "reason": rule.reason}
    return json_response(rule.status, body, headers)


class FaultInjection:
    """The emulator's injected failures and held answers; the REST pipeline asks :meth:`_take_failure` before and
    after handling a request and waits on the operation's :class:`ResponseGate`."""

    def _init_faults(self) -> None:
        self._failure_rules: list[FailureRule] = []
        self._gates: dict[str, ResponseGate] = {}

    def fail_next(
        self,
        n: int,
        status: int,
        *,
        operation: str | None = None,
        reason: str | None = None,
        detail: str | None = None,
        retry_after: float | None = None,
        legacy_body: bool = False,
    ) -> None:
        """The next ``n`` requests for ``operation`` (any operation when None) fail with ``status`` without
        being processed. Operations: join, leave, query, list, update, history, speak, interrupt, think, turns."""
        self._add_failure(n, status, operation, reason, detail, retry_after, legacy_body, after_processing=False)

    def fail_after_processing_next(
        self,
        n: int,
        status: int,
        operation: str | None = None,
        *,
        reason: str | None = None,
        detail: str | None = None,
    ) -> None:
        """The next ``n`` requests for ``operation`` ARE processed (a join creates its agent) but the answer
        is the error ``status``: a response lost after the service acted."""
        self._add_failure(n, status, operation, reason, detail, None, False, after_processing=True)

    def hold_responses(self, operation: str) -> ResponseGate:
        """Requests for ``operation`` are processed but their answers wait until the gate is released: a
        request in flight, for races ("forget while the hang-up's history read is on its way")."""
        gate = ResponseGate()
        self._gates[operation] = gate
        return gate

    def clear_failures(self) -> None:
        self._failure_rules.clear()

    def _add_failure(
        self,
        n: int,
        status: int,
        operation: str | None,
        reason: str | None,
        detail: str | None,
        retry_after: float | None,
        legacy_body: bool,
        *,
        after_processing: bool,
    ) -> None:
        if n < 1:
            raise ValueError("n must be at least 1")
        self._failure_rules.append(
            FailureRule(
                remaining=n,
                status=status,
                operation=operation,
                reason=reason or DEFAULT_REASONS.get(status, "InternalError"),
                detail=detail or f"injected failure (HTTP {status})",
                after_processing=after_processing,
                retry_after=retry_after,
                legacy_body=legacy_body,
            )
        )

    def _take_failure(self, operation: str, *, after_processing: bool) -> FailureRule | None:
        for rule in self._failure_rules:
            if rule.matches(operation, after_processing):
                rule.remaining -= 1
                return rule
        return None
