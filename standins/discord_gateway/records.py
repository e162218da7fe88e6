"""What the fake records and passes between its parts: rejected requests and answers for tests, uploaded files,
an incoming request, an interaction, a gateway connection, and the Discord error a handler raises."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from standins.discord_gateway.openapi import Operation
from standins.discord_gateway.protocol import JSON_CONTENT_TYPE
from standins.discord_gateway.schema_errors import insert_error


@dataclass
class InvalidRequest:
    """A request the fake rejected because the bot got something wrong (not an unimplemented route)."""

    method: str
    path: str  # request path below /api/v10, with query string
    operation: str | None  # e.g. "POST /webhooks/{webhook_id}/{webhook_token}"
    status: int
    body: Any
    errors: dict[str, Any]  # the Discord-shaped error object sent back
    problems: list[str]  # human-readable, one line per problem

    def describe(self) -> str:
        lines = "\n    ".join(self.problems)
        return f"{self.method} {self.path} -> {self.status}\n    {lines}"


@dataclass
class InvalidResponse:
    """A JSON answer of the fake that does not match Discord's documented response schema (a fake bug)."""

    operation: str
    status: int
    payload: Any
    problems: list[str]


@dataclass(frozen=True)
class UploadedFile:
    """A file the bot attached to a request (multipart part ``files[<index>]``)."""

    filename: str
    data: bytes
    content_type: str | None
    attachment_id: str  # id of the attachment in the created/edited message ("" if no message was created)
    message_id: str | None


@dataclass
class IncomingRequest:
    method: str
    path: str
    params: dict[str, str]
    query: Mapping[str, str]
    body: Any
    files: list[tuple[int, str, bytes, str | None]]  # (index, filename, bytes, content type)
    operation: Operation


@dataclass
class Interaction:
    id: str
    token: str
    type: int
    user_id: str
    payload: dict[str, Any]
    acknowledged: bool = False
    pushed_at: float = field(default_factory=time.monotonic)
    """When the fake sent the interaction to the bot: Discord's 3 seconds for the first answer start here."""
    original_message_id: str | None = None  # the message @original refers to, once there is one
    message_ids: set[str] = field(default_factory=set)  # every message created/edited through this token
    place: str = "server"  # where it happened (standins.discord_gateway.places.Place)


@dataclass
class GatewayConnection:
    ws: web.WebSocketResponse
    sequence: int = 0
    identified: bool = False
    shard: list[int] | None = None


class Rejection(Exception):
    """Raised by handlers to answer with a Discord error (and record it when it is the bot's fault)."""

    def __init__(
        self,
        status: int,
        message: str,
        code: int,
        errors: dict[str, Any] | None = None,
        problems: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.errors = status, message, code, errors
        self.problems = list(problems) or [f"{message} (code {code})"]


def invalid_form_body(path: Sequence[str], code: str, message: str) -> Rejection:
    """A 50035 rejection with one Discord-shaped error at ``path``."""
    errors: dict[str, Any] = {}
    insert_error(errors, path, {"code": code, "message": message})
    return Rejection(400, "Invalid Form Body", 50035, errors, [f"{'.'.join(path) or '<body>'}: {message}"])


def form_problems(problems: Sequence[tuple[Sequence[str], str, str]]) -> Rejection:
    """A 50035 rejection with one Discord-shaped error per (path, code, message)."""
    errors: dict[str, Any] = {}
    for path, code, message in problems:
        insert_error(errors, path, {"code": code, "message": message})
    lines = [f"{'.'.join(path) or '<body>'}: {message}" for path, _code, message in problems]
    return Rejection(400, "Invalid Form Body", 50035, errors, lines)


def unknown(what: str, code: int) -> Rejection:
    return Rejection(404, f"Unknown {what}", code)


def json_response(payload: Any, status: int = 200) -> web.Response:
    """JSON answer built by hand (spec gotcha 1).

    aiohttp's json_response says ``application/json; charset=utf-8``; discord.http.json_or_text only parses
    the body when the header is exactly ``application/json``.
    """
    return web.Response(status=status, body=json.dumps(payload).encode(), headers={"Content-Type": JSON_CONTENT_TYPE})


def utc_now_iso() -> str:
    return datetime.now(UTC).isoformat()
