"""Deadlines for clients that stall, and a bound on what a body may hold (``read_bounded``, every route's one
reader of a body).

A request's headers and its body must arrive within ``READ_TIMEOUT_SECONDS``.

aiohttp has no read timeout of its own: a client that sends its headers and then dribbles (or never sends) the
body holds its connection and a handler for as long as it likes (2,000 such webhook connections were all still
open after 100 s). Two bounds, both ``read_timeout`` (``WebServer(read_timeout=...)``):

* Headers: aiohttp's keep-alive timer runs from the moment a connection opens and closes it when no whole request
  arrived by then; it also closes idle keep-alive connections after that long (the call page polls every few
  seconds; the Caddyfile keeps its idle connections to the bot for less).
* Body: ``read_deadline`` starts when the headers are in; a body still incomplete at the deadline makes the
  handler's read raise ``BodyTimeout``, answered with 408 (OpenAI's error shape on the LLM route) and the
  connection closed. Only reads fail: a handler busy with anything else is never interrupted, and a response that
  streams for longer (the LLM route's replies) is not affected once the body is complete.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

log = logging.getLogger(__name__)

READ_TIMEOUT_SECONDS = 20.0
READ_TIMEOUT_KEY = web.AppKey("read_timeout", float)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class BodyTimeout(TimeoutError):
    """The request's body did not arrive within the read timeout. A TimeoutError, so that aiohttp's lingering
    read after the response gives up quietly and closes the connection."""


@web.middleware
async def read_deadline(request: web.Request, handler: Handler) -> web.StreamResponse:
    if not request.body_exists:
        return await handler(request)
    timeout = request.app.get(READ_TIMEOUT_KEY, READ_TIMEOUT_SECONDS)
    payload = request.content

    def expire() -> None:
        if not payload.is_eof():
            payload.set_exception(BodyTimeout())

    deadline = asyncio.get_running_loop().call_later(timeout, expire)
    try:
        return await handler(request)
    except BodyTimeout:
        log.info("a request's body did not arrive within %.0f s; connection closed", timeout)
        return _timed_out(request)
    finally:
        deadline.cancel()


async def read_bounded(request: web.Request, limit: int) -> bytes | None:
    """The request's body, or None when it holds more than ``limit`` bytes (said by its Content-Length, or found
    while reading: nothing past the limit is read)."""
    if request.content_length is not None and request.content_length > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    while chunk := await request.content.readany():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _timed_out(request: web.Request) -> web.Response:
    message = "The request body did not arrive in time."
    if request.path.startswith("/llm/"):
        error = {"message": message, "type": "invalid_request_error", "param": None, "code": "timeout"}
        response = web.json_response({"error": error}, status=408)
    else:
        response = web.json_response({"error": message}, status=408)
    response.force_close()
    return response
