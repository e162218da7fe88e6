"""Reading a ConvoAI request and checking its fields. Every problem is an :class:`ApiError`, which the REST pipeline
answers with the documented ``{"detail", "reason"}`` body."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from standins.agora_emulator.contract import STATUS_CODES


class ApiError(Exception):
    """Raised anywhere in a handler; the middleware turns it into the documented error body."""

    def __init__(self, status: int, reason: str, detail: str) -> None:
        super().__init__(f"{status} {reason}: {detail}")
        self.status = status
        self.reason = reason
        self.detail = detail


def json_response(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(body, status=status, headers=headers)


def error_response(status: int, reason: str, detail: str) -> web.Response:
    return json_response(status, {"detail": detail, "reason": reason})


async def json_object_body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        body = json.loads(raw)
    except ValueError:
        raise ApiError(400, "InvalidRequestBody", "request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "InvalidRequestBody", "request body must be a JSON object")
    return body


def required(container: dict[str, Any], key: str, label: str) -> Any:
    value = container.get(key)
    if value is None:
        raise ApiError(400, "MissingRequiredField", f"{label} is required")
    return value


def required_text(body: dict[str, Any], key: str) -> str:
    value = required(body, key, key)
    if not isinstance(value, str) or not value:
        raise ApiError(400, "InvalidFieldValue", f"{key} must be a non-empty string")
    return value


def check_object(value: Any, label: str) -> None:
    if not isinstance(value, dict):
        raise ApiError(400, "InvalidFieldValue", f"{label} must be an object")


def check_optional_bool(container: dict[str, Any], key: str, label: str) -> None:
    value = container.get(key)
    if value is not None and not isinstance(value, bool):
        raise ApiError(400, "InvalidFieldValue", f"{label} must be a boolean")


def check_int_range(container: dict[str, Any], key: str, label: str, low: int, high: int) -> None:
    value = container.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ApiError(400, "InvalidFieldValue", f"{label} must be an integer in [{low}, {high}]")


def check_system_messages(value: Any) -> None:
    if not isinstance(value, list) or not all(
        isinstance(message, dict) and isinstance(message.get("role"), str) and isinstance(message.get("content"), str)
        for message in value
    ):
        raise ApiError(
            400,
            "InvalidFieldValue",
            "properties.llm.system_messages must be a list of {role, content} strings",
        )


def is_numeric_uid(uid: str) -> bool:
    return uid.isascii() and uid.isdigit() and int(uid) <= 2**32 - 1


def parse_states(raw: str) -> set[int]:
    try:
        states = {int(part) for part in raw.split(",") if part.strip()}
    except ValueError:
        raise ApiError(400, "InvalidFieldValue", "state must be comma-separated integers") from None
    if not states or not states <= set(STATUS_CODES.values()):
        raise ApiError(400, "InvalidFieldValue", f"state values must be in {sorted(STATUS_CODES.values())}")
    return states


def query_int(query: Any, key: str, default: int) -> int:
    raw = query.get(key)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ApiError(400, "InvalidFieldValue", f"{key} must be an integer") from None
