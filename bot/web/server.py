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
``GET  /static/...``                        call.js, call.css, notice.html (link invalid, call ended, open elsewhere)
``POST /llm/v1/chat/completions``           the voice agent's LLM with live recall (``bot.web.llm_route``)

Link tokens are secrets (they are the only credential of a call page): they are validated before they reach
the backend, never logged (see ``RedactingAccessLogger``) and kept out of Referer headers.

This module builds the application (routes, security headers, the error answer) and runs it; the page is
``bot.web.call_page``, its JSON API and the webhook ``bot.web.call_api``, the access log ``bot.web.access_log``.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import traceback
from collections.abc import Awaitable, Callable, MutableMapping

from aiohttp import web

from bot.web.access_log import RedactingAccessLogger, redact_path
from bot.web.backend import CallPageBackend, OperatorView
from bot.web.call_api import MAX_WEBHOOK_BYTES, add_call_api_routes
from bot.web.call_page import (
    BACKEND_KEY,
    DEFAULT_STATUS_POLL_INTERVAL,
    SETTINGS_KEY,
    STATIC_DIR,
    call_page,
    load_page_settings,
)
from bot.web.limits import READ_TIMEOUT_KEY, READ_TIMEOUT_SECONDS, read_deadline
from bot.web.llm_backend import LLMBackend
from bot.web.llm_route import add_llm_route
from bot.web.operator import add_operator_routes

log = logging.getLogger(__name__)


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
    settings = load_page_settings(sdk_url, public_url, status_poll_interval, emulator_controls_url)
    app = web.Application(middlewares=[_security_middleware, read_deadline], client_max_size=MAX_WEBHOOK_BYTES)
    app[READ_TIMEOUT_KEY] = read_timeout
    app[BACKEND_KEY] = backend
    app[SETTINGS_KEY] = settings
    app.router.add_get("/call/{link_token}", call_page, name="call_page")
    add_call_api_routes(app)
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
