"""The bot's web server: the call page, its small JSON API, the Agora NCS webhook and a health check.

Routes
------
``GET  /call/{link_token}``                 the call page, "this call has ended" (410) when the call is over,
                                            the "no longer valid" page (404), or "already open elsewhere" (409)
                                            when another browser opened the link first (the first one gets a
                                            cookie binding the link to it)
``GET  /api/calls/{link_token}/status``     JSON ``CallStatus`` or 404 ``{"error": "invalid link"}``; with
                                            ``?transcript=1`` also the call's stored lines (bound browser only)
``POST /api/calls/{link_token}/hangup``     JSON ``CallStatus`` or 404 (accepts any body: fetch or sendBeacon)
``POST /api/calls/{link_token}/token``      ``{"token": …}``, a fresh RTC token for the bound browser of a running
                                            call (Agora tokens last a day at most, calls up to 72 h), or 404
``POST /agora/webhook``                     Agora NCS receiver (raw body + headers go to the backend)
``GET  /healthz``                           the health report as JSON, 503 when it raises; through a proxy only
                                            its status (``bot.web.operator``, which also serves ``/metrics``)
``GET  /static/...``                        call.js, call.css, invalid.html, ended.html
``POST /llm/v1/chat/completions``           the voice agent's LLM with live recall (``bot.web.llm_route``)

Link tokens are secrets (they are the only credential of a call page): they are validated before they reach
the backend, never logged (see ``RedactingAccessLogger``) and kept out of Referer headers.
"""

from __future__ import annotations

import asyncio
import errno
import html
import json
import logging
import re
import traceback
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote, urlsplit

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from bot.web.backend import (
    PAGE_STATES,
    CallPageBackend,
    CallStatus,
    OpenElsewhere,
    OperatorView,
    PageSession,
    WebhookRetryLater,
)
from bot.web.limits import READ_TIMEOUT_KEY, READ_TIMEOUT_SECONDS, read_bounded, read_deadline
from bot.web.llm_backend import LLMBackend
from bot.web.llm_route import add_llm_route
from bot.web.operator import add_operator_routes

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parent / "static"
MAX_WEBHOOK_BYTES = 1024 * 1024
MAX_HANGUP_BODY_BYTES = 4096
MAX_TOKEN_LENGTH = 128
WEBHOOK_TIMEOUT_SECONDS = 8.0  # Agora NCS wants an answer within 10 s
DEFAULT_STATUS_POLL_INTERVAL = 4.0

_TOKEN_RE = re.compile(r"[A-Za-z0-9_-]+={0,2}")
_LINK_PREVIEW_UA = re.compile(
    r"discordbot|slackbot|twitterbot|facebookexternalhit|telegrambot|whatsapp|linkedinbot|skypeuripreview"
    r"|embedly|googlebot|bingbot",
    re.IGNORECASE,
)
_PLACEHOLDER_RE = re.compile(r"\{\{([A-Z_]+)\}\}")
BROWSER_COOKIE = "memcall_browser"
BROWSER_COOKIE_MAX_AGE = 30 * 86400


def is_valid_link_token(token: str) -> bool:
    """URL-safe base64 (optionally padded), 1..128 characters."""
    return 0 < len(token) <= MAX_TOKEN_LENGTH and _TOKEN_RE.fullmatch(token) is not None


# ----------------------------------------------------------------------------------------------------
# Access log without link tokens

_ROUTE_TOKEN_RE = re.compile(r"^(/call/|/api/calls/)[^/]*")
_LONG_SEGMENT_RE = re.compile(r"(?<=/)[A-Za-z0-9_=%-]{16,}(?=/|$)")


def redact_path(raw_path: str) -> str:
    """The request path with link tokens (and anything token-like, and the query string) replaced."""
    path, sep, _query = raw_path.partition("?")
    path = _ROUTE_TOKEN_RE.sub(r"\1<redacted>", path)
    path = _LONG_SEGMENT_RE.sub("<redacted>", path)
    return path + ("?<redacted>" if sep else "")


class RedactingAccessLogger(AbstractAccessLogger):
    """Common-log-like access lines whose path never contains a link token. No Referer, no query string."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        user_agent = (request.headers.get("User-Agent") or "-")[:200]
        self.logger.info(
            '%s "%s %s HTTP/%d.%d" %d %d %.3fs "%s"',
            request.remote or "-",
            request.method,
            redact_path(request.raw_path),
            request.version.major,
            request.version.minor,
            response.status,
            response.body_length,
            time,
            user_agent,
        )

    @property
    def enabled(self) -> bool:
        return self.logger.isEnabledFor(logging.INFO)


# ----------------------------------------------------------------------------------------------------
# Application


@dataclass(frozen=True)
class _PageSettings:
    sdk_url: str
    public_url: str
    public_origin: str
    csp: str
    call_template: str
    invalid_html: str
    ended_html: str
    preview_html: str
    status_poll_interval: float
    emulator_controls_url: str | None = None


BACKEND_KEY = web.AppKey("call_page_backend", CallPageBackend)
SETTINGS_KEY = web.AppKey("call_page_settings", _PageSettings)

_PREVIEW_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex, nofollow">
<title>Voice call</title>
<meta property="og:title" content="Voice call">
<meta property="og:description" content="Open this link in your browser to join your voice call.">
</head>
<body><p>Open this link in your browser to join your voice call.</p></body>
</html>
"""


_ELSEWHERE_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex, nofollow">
<meta name="referrer" content="no-referrer">
<title>Call already open elsewhere</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/static/call.css">
</head>
<body>
<main class="card" aria-labelledby="title">
  <h1 id="title">This call is already open elsewhere</h1>
  <p>A call link works only in the browser that opened it first. Continue the call there.</p>
  <p>To move the call here, type <code>/hangup</code> in Discord, then <code>/call</code> for a new link.</p>
</main>
</body>
</html>
"""


def _origin(url: str) -> str | None:
    parts = urlsplit(url)
    if not parts.scheme and not parts.netloc:
        return None  # a same-origin path such as /static/vendor/AgoraRTC.js
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"unsupported URL {url!r}: expected http(s)://host/...")
    return f"{parts.scheme}://{parts.netloc}".lower()


def build_csp(sdk_url: str, emulator_controls_url: str | None = None) -> str:
    sdk_origin = _origin(sdk_url)
    extra = f" {sdk_origin}" if sdk_origin else ""
    emulator_origin = _origin(emulator_controls_url) if emulator_controls_url else None
    connect_extra = extra + (f" {emulator_origin}" if emulator_origin and emulator_origin != sdk_origin else "")
    return "; ".join(
        [
            "default-src 'self'",
            f"script-src 'self'{extra}",
            "style-src 'self'",
            "img-src 'self' data: blob:",
            "media-src 'self' blob: mediastream:",
            # The Agora SDK talks to many edge servers (https + wss) chosen at run time.
            f"connect-src 'self' https: wss:{connect_extra}",
            "worker-src 'self' blob:",
            "object-src 'none'",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        ]
    )


def create_app(
    backend: CallPageBackend,
    *,
    sdk_url: str,
    public_url: str,
    status_poll_interval: float = DEFAULT_STATUS_POLL_INTERVAL,
    monitor: OperatorView | None = None,
    live_recall: LLMBackend | None = None,
    read_timeout: float = READ_TIMEOUT_SECONDS,
    emulator_controls_url: str | None = None,
) -> web.Application:
    """Build the aiohttp application. ``sdk_url`` is the Agora Web SDK (UMD build exposing global AgoraRTC);
    ``public_url`` is the externally visible base URL (https in production), used to check the Origin of
    hang-up requests; ``read_timeout`` bounds how long a request's body may take to arrive (``bot.web.limits``);
    ``emulator_controls_url`` (``agora.emulator``, the demo only) gives the page its "type instead of speaking" box."""
    public_origin = _origin(public_url)
    if public_origin is None:
        raise ValueError("public_url must be an absolute http(s) URL")
    settings = _PageSettings(
        sdk_url=sdk_url,
        public_url=public_url.rstrip("/"),
        public_origin=public_origin,
        csp=build_csp(sdk_url, emulator_controls_url),
        call_template=(STATIC_DIR / "call.html").read_text(encoding="utf-8"),
        invalid_html=(STATIC_DIR / "invalid.html").read_text(encoding="utf-8"),
        ended_html=(STATIC_DIR / "ended.html").read_text(encoding="utf-8"),
        preview_html=_PREVIEW_HTML,
        status_poll_interval=status_poll_interval,
        emulator_controls_url=emulator_controls_url,
    )
    app = web.Application(middlewares=[_security_middleware, read_deadline], client_max_size=MAX_WEBHOOK_BYTES)
    app[READ_TIMEOUT_KEY] = read_timeout
    app[BACKEND_KEY] = backend
    app[SETTINGS_KEY] = settings
    app.router.add_get("/call/{link_token}", _call_page, name="call_page")
    app.router.add_get("/api/calls/{link_token}/status", _api_status, name="api_status")
    app.router.add_post("/api/calls/{link_token}/hangup", _api_hangup, name="api_hangup")
    app.router.add_post("/api/calls/{link_token}/token", _api_token, name="api_token")
    app.router.add_post("/agora/webhook", _agora_webhook, name="agora_webhook")
    add_operator_routes(app, backend.health, monitor)
    if live_recall is not None:
        add_llm_route(app, live_recall)
    app.router.add_static("/static/", STATIC_DIR, name="static", show_index=False, follow_symlinks=False)
    return app


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _apply_security_headers(request: web.Request, h: MutableMapping[str, str]) -> None:
    settings = request.app[SETTINGS_KEY]
    h["X-Content-Type-Options"] = "nosniff"
    h["Referrer-Policy"] = "no-referrer"
    h["Content-Security-Policy"] = settings.csp
    h["X-Frame-Options"] = "DENY"
    h["Permissions-Policy"] = "microphone=(self), camera=(), geolocation=()"
    h["Cache-Control"] = "no-cache" if request.path.startswith("/static/") else "no-store"
    if request.path.startswith("/call/"):
        h["X-Robots-Tag"] = "noindex, nofollow"


def _wants_json(request: web.Request) -> bool:
    return request.path.startswith(("/api/", "/agora/", "/healthz"))


@web.middleware
async def _security_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        _apply_security_headers(request, exc.headers)
        raise
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        token = request.match_info.get("link_token", "")
        text = "".join(traceback.format_exception(exc))
        if token:
            text = text.replace(token, "<redacted>")
        route = request.match_info.route.name or "?"
        log.error("unhandled error in %s %s route %s\n%s", request.method, redact_path(request.path), route, text)
        if request.path.startswith("/llm/"):  # the voice agent's LLM route answers in OpenAI's error shape
            error = {"message": "internal error", "type": "server_error", "param": None, "code": "internal_error"}
            response = web.json_response({"error": error}, status=500)
        elif _wants_json(request):
            response = web.json_response({"error": "internal error"}, status=500)
        else:
            response = web.Response(
                status=500,
                text="Something went wrong. Please try again in a moment.",
                content_type="text/plain",
            )
    _apply_security_headers(request, response.headers)
    return response


def _invalid_page(request: web.Request) -> web.Response:
    return web.Response(
        status=404, text=request.app[SETTINGS_KEY].invalid_html, content_type="text/html", charset="utf-8"
    )


def _json_for_script(data: object) -> str:
    """JSON safe to embed in a <script type="application/json"> element (no "</script>", no HTML entities)."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _iso_utc(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def page_config(
    session: PageSession, *, status_poll_interval: float, emulator_controls_url: str | None = None
) -> dict[str, object]:
    """The join parameters as embedded in the call page (element #call-config); with the Agora emulator, also
    where typed lines go (``typeUrl``: the emulator hears them as the member's speech in this channel)."""
    config: dict[str, object] = {
        "appId": session.app_id,
        "channel": session.channel,
        "token": session.rtc_token,
        "uid": int(session.user_uid),
        "agentUid": int(session.agent_uid),
        "state": session.state,
        "expiresAt": _iso_utc(session.expires_at),
        "maxMinutes": int(session.max_minutes),
        "pollIntervalMs": max(100, round(status_poll_interval * 1000)),
        "pageId": session.page_id,
        "reopened": session.reopened,
        "elapsedSeconds": round(session.elapsed_seconds),
    }
    if emulator_controls_url is not None:
        config["typeUrl"] = f"{emulator_controls_url}/channels/{quote(session.channel, safe='')}/user_says"
    return config


def render_call_page(settings: _PageSettings, session: PageSession) -> str:
    values = {
        "SDK_URL": html.escape(settings.sdk_url, quote=True),
        "CONFIG_JSON": _json_for_script(
            page_config(
                session,
                status_poll_interval=settings.status_poll_interval,
                emulator_controls_url=settings.emulator_controls_url,
            )
        ),
        "MAX_MINUTES": html.escape(str(int(session.max_minutes))),
    }
    return _PLACEHOLDER_RE.sub(lambda m: values.get(m.group(1), m.group(0)), settings.call_template)


async def _call_page(request: web.Request) -> web.StreamResponse:
    token = request.match_info["link_token"]
    if not is_valid_link_token(token):
        return _invalid_page(request)
    settings = request.app[SETTINGS_KEY]
    # Link unfurlers (Discord embeds the links it sees) and HEAD probes must not bind the link to themselves.
    if request.method == "HEAD" or _LINK_PREVIEW_UA.search(request.headers.get("User-Agent", "")):
        return web.Response(text=settings.preview_html, content_type="text/html", charset="utf-8")
    try:
        session = await request.app[BACKEND_KEY].open_page(token, browser=_browser(request))
    except OpenElsewhere:
        return web.Response(status=409, text=_ELSEWHERE_HTML, content_type="text/html", charset="utf-8")
    if session is None or session.state not in PAGE_STATES:
        status = await request.app[BACKEND_KEY].status(token, browser=_browser(request))
        if status is not None and status.state in ("ended", "failed"):
            return web.Response(status=410, text=settings.ended_html, content_type="text/html", charset="utf-8")
        return _invalid_page(request)
    response = web.Response(text=render_call_page(settings, session), content_type="text/html", charset="utf-8")
    if session.browser_key is not None:
        response.set_cookie(
            BROWSER_COOKIE,
            session.browser_key,
            max_age=BROWSER_COOKIE_MAX_AGE,
            path="/",
            httponly=True,
            samesite="Lax",  # sent when the member opens the link from Discord again (a top-level navigation)
            secure=settings.public_url.startswith("https://"),
        )
    return response


def _browser(request: web.Request) -> str | None:
    value = request.cookies.get(BROWSER_COOKIE)
    return value if value and is_valid_link_token(value) else None


def _invalid_link_json() -> web.Response:
    return web.json_response({"error": "invalid link"}, status=404)


def _status_json(status: CallStatus | None) -> web.Response:
    if status is None:
        return _invalid_link_json()
    return web.json_response(status.to_json())


async def _api_status(request: web.Request) -> web.Response:
    token = request.match_info["link_token"]
    if not is_valid_link_token(token):
        return _invalid_link_json()
    transcript = request.query.get("transcript") == "1"
    return _status_json(await request.app[BACKEND_KEY].status(token, browser=_browser(request), transcript=transcript))


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


async def _api_hangup(request: web.Request) -> web.Response:
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
    return _status_json(await backend.hang_up(token, via=via, page_id=page_id, browser=_browser(request)))


async def _api_token(request: web.Request) -> web.Response:
    """A fresh RTC token for a long call's page, asked for when the SDK says the current one is about to expire."""
    token = request.match_info["link_token"]
    if not is_valid_link_token(token):
        return _invalid_link_json()
    if not _origin_allowed(request):
        return web.json_response({"error": "forbidden"}, status=403)
    renewed = await request.app[BACKEND_KEY].renew_token(token, browser=_browser(request))
    if renewed is None:
        return _invalid_link_json()
    return web.json_response({"token": renewed})


async def _agora_webhook(request: web.Request) -> web.Response:
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


# ----------------------------------------------------------------------------------------------------
# Runner


class PortInUse(Exception):
    """The call page's port is taken, usually by another bot process: each process needs its own port."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        super().__init__(
            f"web.port {port} on {host} is already in use, probably by another bot process: give each process its "
            "own port (WEB_PORT) behind the proxy; this process stopped before touching any call"
        )


class WebServer:
    """Runs ``create_app`` on host:port with the redacting access log. ``port=0`` picks a free port; after
    ``start()`` the bound port is in ``port`` and the base URL in ``url``."""

    def __init__(
        self,
        backend: CallPageBackend,
        *,
        host: str,
        port: int,
        sdk_url: str,
        public_url: str,
        status_poll_interval: float = DEFAULT_STATUS_POLL_INTERVAL,
        shutdown_timeout: float = 5.0,
        monitor: OperatorView | None = None,
        live_recall: LLMBackend | None = None,
        read_timeout: float = READ_TIMEOUT_SECONDS,
        emulator_controls_url: str | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.app = create_app(
            backend,
            sdk_url=sdk_url,
            public_url=public_url,
            status_poll_interval=status_poll_interval,
            monitor=monitor,
            live_recall=live_recall,
            read_timeout=read_timeout,
            emulator_controls_url=emulator_controls_url,
        )
        self.read_timeout = read_timeout
        self.public_url = public_url.rstrip("/")
        self._shutdown_timeout = shutdown_timeout
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._runner is not None

    async def start(self) -> None:
        if self._runner is not None:
            raise RuntimeError("web server already started")
        runner = web.AppRunner(
            self.app,
            access_log_class=RedactingAccessLogger,
            handle_signals=False,
            shutdown_timeout=self._shutdown_timeout,
            keepalive_timeout=self.read_timeout,  # also closes a connection whose headers never all arrive
        )
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(self.host, self.port) from exc
            raise
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = int(runner.addresses[0][1])
        log.info("web server listening on %s (public URL %s)", self.url, self.public_url)

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> WebServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()
