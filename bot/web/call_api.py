"""The call page's JSON API (status, hang-up, token renewal) and Agora's webhook receiver."""

from __future__ import annotations

import asyncio
import json
import logging

from aiohttp import web

from bot.web.backend import CallStatus, WebhookRetryLater
from bot.web.call_page import BACKEND_KEY, SETTINGS_KEY, browser_cookie, is_valid_link_token
from bot.web.limits import read_bounded

log = logging.getLogger(__name__)

MAX_WEBHOOK_BYTES = 1024 * 1024


MAX_HANGUP_BODY_BYTES = 4096


WEBHOOK_TIMEOUT_SECONDS = 8.0  # Agora NCS wants an answer within 10 s


def _invalid_link_json() -> web.Response:
    return web.json_response({"error": "invalid link"}, status=404)


def _status_json(status: CallStatus | None) -> web.Response:
    if status is None:
        return _invalid_link_json()
    return web.json_response(status.to_json())


async def api_status(request: web.Request) -> web.Response:
    token = request.match_info["link_token"]
    if not is_valid_link_token(token):
        return _invalid_link_json()
    transcript = request.query.get("transcript") == "1"
    return _status_json(
        await request.app[BACKEND_KEY].status(token, browser=browser_cookie(request), transcript=transcript)
    )


def _parse_via(request: web.Request, body: bytes) -> str:
    """ "beacon" when the query or body says so (the page's sendBeacon body is the text "beacon");
    "page" otherwise (the End call button sends {"via": "page"})."""
    candidates: list[object] = [request.query.get("via")]
    text = body.decode("utf-8", "replace").strip()
    if text:
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes: plain text
            parsed = text
        candidates.append(parsed.get("via") if isinstance(parsed, dict) else parsed)
    for candidate in candidates:
        if candidate in ("page", "beacon"):
            return str(candidate)
    return "page"


def _origin_allowed(request: web.Request) -> bool:
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    allowed = {request.app[SETTINGS_KEY].public_origin, f"{request.scheme}://{request.host}".lower()}
    return origin.lower() in allowed


async def api_hangup(request: web.Request) -> web.Response:
    token = request.match_info["link_token"]
    if not is_valid_link_token(token):
        return _invalid_link_json()
    if not _origin_allowed(request):
        return web.json_response({"error": "forbidden"}, status=403)
    body = await read_bounded(request, MAX_HANGUP_BODY_BYTES) or b""
    via = _parse_via(request, body)
    page = request.query.get("page")
    page_id = page if page and is_valid_link_token(page) else None
    backend = request.app[BACKEND_KEY]
    return _status_json(await backend.hang_up(token, via=via, page_id=page_id, browser=browser_cookie(request)))


async def api_token(request: web.Request) -> web.Response:
    """A fresh RTC token for a long call's page, asked for when the SDK says the current one is about to expire."""
    token = request.match_info["link_token"]
    if not is_valid_link_token(token):
        return _invalid_link_json()
    if not _origin_allowed(request):
        return web.json_response({"error": "forbidden"}, status=403)
    renewed = await request.app[BACKEND_KEY].renew_token(token, browser=browser_cookie(request))
    if renewed is None:
        return _invalid_link_json()
    return web.json_response({"token": renewed})


async def agora_webhook(request: web.Request) -> web.Response:
    raw_body = await read_bounded(request, MAX_WEBHOOK_BYTES)
    if raw_body is None:
        return web.json_response({"code": 1, "msg": "payload too large"}, status=413)
    try:
        async with asyncio.timeout(WEBHOOK_TIMEOUT_SECONDS):
            ok = await request.app[BACKEND_KEY].receive_webhook(raw_body, request.headers)
    except TimeoutError:
        log.warning("Agora webhook handling took longer than %.0f s", WEBHOOK_TIMEOUT_SECONDS)
        return web.json_response({"code": 1, "msg": "busy"}, status=503)
    except WebhookRetryLater:
        return web.json_response({"code": 1, "msg": "not stored, send again"}, status=503)
    if not ok:
        return web.json_response({"code": 1, "msg": "invalid signature"}, status=401)
    return web.json_response({"code": 0, "msg": "success"})


def add_call_api_routes(app: web.Application) -> None:
    app.router.add_get("/api/calls/{link_token}/status", api_status, name="api_status")
    app.router.add_post("/api/calls/{link_token}/hangup", api_hangup, name="api_hangup")
    app.router.add_post("/api/calls/{link_token}/token", api_token, name="api_token")
    app.router.add_post("/agora/webhook", agora_webhook, name="agora_webhook")
