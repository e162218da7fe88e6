"""OpenAI-shaped refusals: the error body the real API answers with, the request body that is not JSON, and the
500 of a test that scripted no reply."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web


class FakeLLMRequestError(Exception):
    """A request the real API would reject; becomes an OpenAI-shaped error response."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        error_type: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.error_type = error_type

    def response(self) -> web.Response:
        body = {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }
        return web.json_response(body, status=self.status)


def no_scripted_reply(request_json: dict[str, Any]) -> str:
    raise FakeLLMRequestError(
        500,
        "FakeLLM: no scripted reply (call queue_reply() or set_responder() in the test)",
        error_type="server_error",
    )


def json_body(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise FakeLLMRequestError(
            400,
            "We could not parse the JSON body of your request. "
            "(HINT: This likely means you aren't using your HTTP library correctly.)",
        ) from exc
    if not isinstance(body, dict):
        raise FakeLLMRequestError(400, "The request body must be a JSON object.")
    return body
