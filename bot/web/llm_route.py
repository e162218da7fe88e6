"""``POST /llm/v1/chat/completions``: the voice agent's LLM endpoint (live recall), an OpenAI-compatible route.

The route only speaks HTTP: the key check, the body limits and the streaming response. What a turn does (store
the line, build the memory, call the upstream, store the reply) is behind an ``LLMBackend``
(``bot.web.llm_backend``), which ``bot.memory.live.LiveRecall`` implements.

* 401 in the OpenAI error shape for a missing, forged, other-call or ended-call key, before the body is read.
* 413 for a body over 1 MiB; 400 for one that is not a JSON object, spells a number JSON has no place for (NaN,
  Infinity, 1e999) or nests deeper than ``MAX_JSON_DEPTH``: all before anything is stored or sent upstream.
* The upstream's events are written as they arrive; an agent that disconnects mid-reply ends the relay (the reply
  is stored as sent). No request or reply text is logged.
"""

from __future__ import annotations

import json
import logging
import math

from aiohttp import web
from aiohttp.client_exceptions import ClientConnectionResetError

from bot.web.limits import read_bounded
from bot.web.llm_backend import LLMBackend, LLMRouteError, bad_request

log = logging.getLogger(__name__)

LLM_ROUTE = "/llm/v1/chat/completions"
MAX_LLM_BODY_BYTES = 1024 * 1024
MAX_JSON_DEPTH = 64
"""Arrays and objects inside each other; a tool's JSON schema needs a few dozen at most. Deeper values parse but
break the code that handles them later (a RecursionError once the line is stored)."""
LIVE_RECALL_KEY = web.AppKey("live_recall", LLMBackend)


def add_llm_route(app: web.Application, live: LLMBackend) -> None:
    app[LIVE_RECALL_KEY] = live
    app.router.add_post(LLM_ROUTE, _chat_completions, name="llm_chat_completions")


def _error(exc: LLMRouteError) -> web.Response:
    return web.json_response(exc.body(), status=exc.status)


def _bearer(request: web.Request) -> str | None:
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    return (value.strip() or None) if scheme.lower() == "bearer" else None


def _not_json_number(text: str) -> float:
    raise ValueError(f"{text} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range")
    return value


def _depth_within(value: object, limit: int) -> bool:
    """Whether no array or object in ``value`` lies more than ``limit`` levels deep (walked without recursion)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return False
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return True


def parse_body(raw: bytes) -> object:
    """The request's JSON, read strictly; ``LLMRouteError`` (400) for anything the rest of the turn cannot take."""
    too_deep = bad_request(f"The JSON body nests arrays and objects more than {MAX_JSON_DEPTH} levels deep.")
    try:
        body = json.loads(raw, parse_constant=_not_json_number, parse_float=_finite)
    except RecursionError:
        raise too_deep from None
    except ValueError:  # not JSON (UnicodeDecodeError and JSONDecodeError are ValueErrors), or NaN/Infinity
        raise bad_request("We could not parse the JSON body of your request.") from None
    if not _depth_within(body, MAX_JSON_DEPTH):
        raise too_deep
    return body


async def _chat_completions(request: web.Request) -> web.StreamResponse:
    live = request.app[LIVE_RECALL_KEY]
    try:
        session = await live.authorize(_bearer(request))
    except LLMRouteError as exc:
        return _error(exc)
    raw = await read_bounded(request, MAX_LLM_BODY_BYTES)
    if raw is None:
        return _error(
            LLMRouteError(
                413, "The request body is larger than 1 MiB.", error_type="invalid_request_error", code="too_large"
            )
        )
    try:
        turn = await session.start_turn(parse_body(raw))
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


__all__ = ["LIVE_RECALL_KEY", "LLM_ROUTE", "MAX_JSON_DEPTH", "MAX_LLM_BODY_BYTES", "add_llm_route", "parse_body"]
