"""``POST /llm/v1/chat/completions``: the voice agent's LLM endpoint (live recall), an OpenAI-compatible route.

The route only speaks HTTP: the key check, the body limits and the streaming response. What a turn does (store
the line, build the memory, call the upstream, store the reply) is behind an ``LLMBackend``
(``bot.web.llm_backend``), which ``bot.memory.live.LiveRecall`` implements.

* 401 in the OpenAI error shape for a missing, forged, other-call or ended-call key, before the body is read.
* 413 for a body over 1 MiB, 400 for one that is not a JSON object.
* The upstream's events are written as they arrive; an agent that disconnects mid-reply ends the relay (the reply
  is stored as sent). No request or reply text is logged.
"""

from __future__ import annotations

import json
import logging

from aiohttp import web
from aiohttp.client_exceptions import ClientConnectionResetError

from bot.web.llm_backend import LLMBackend, LLMRouteError, bad_request

log = logging.getLogger(__name__)

LLM_ROUTE = "/llm/v1/chat/completions"
MAX_LLM_BODY_BYTES = 1024 * 1024
LIVE_RECALL_KEY = web.AppKey("live_recall", LLMBackend)


def add_llm_route(app: web.Application, live: LLMBackend) -> None:
    app[LIVE_RECALL_KEY] = live
    app.router.add_post(LLM_ROUTE, _chat_completions, name="llm_chat_completions")


def _error(exc: LLMRouteError) -> web.Response:
    return web.json_response(exc.body(), status=exc.status)


def _bearer(request: web.Request) -> str | None:
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    return (value.strip() or None) if scheme.lower() == "bearer" else None


async def _read_body(request: web.Request) -> bytes | None:
    """The body, or None when it is over the limit (read no further than that)."""
    if request.content_length is not None and request.content_length > MAX_LLM_BODY_BYTES:
        return None
    chunks: list[bytes] = []
    size = 0
    while chunk := await request.content.readany():
        size += len(chunk)
        if size > MAX_LLM_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def _chat_completions(request: web.Request) -> web.StreamResponse:
    live = request.app[LIVE_RECALL_KEY]
    try:
        session = await live.authorize(_bearer(request))
    except LLMRouteError as exc:
        return _error(exc)
    raw = await _read_body(request)
    if raw is None:
        return _error(
            LLMRouteError(
                413, "The request body is larger than 1 MiB.", error_type="invalid_request_error", code="too_large"
            )
        )
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
        return _error(bad_request("We could not parse the JSON body of your request."))
    try:
        turn = await session.start_turn(body)
    except LLMRouteError as exc:
        return _error(exc)
    response = web.StreamResponse(status=200, headers={"Content-Type": turn.content_type, "Cache-Control": "no-cache"})
    events = turn.events()
    try:
        await response.prepare(request)
        async for event in events:
            await response.write(event)
        await response.write_eof()
    except (ConnectionResetError, ClientConnectionResetError):
        log.info("the agent closed the stream mid-reply (interrupted)")
    finally:
        await events.aclose()
        await turn.close()
    return response


__all__ = ["LIVE_RECALL_KEY", "LLM_ROUTE", "MAX_LLM_BODY_BYTES", "add_llm_route"]
