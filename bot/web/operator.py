"""``/healthz`` and ``/metrics``: what the operator sees of the running process, and what the internet may see.

The whole health report (version, active calls, queue depth, Discord latency, counters) and the Prometheus figures
are for the operator's own monitoring: requests that reach the bot directly (the image's HEALTHCHECK on
127.0.0.1, a scraper inside the compose network at ``http://bot:8080``). A request that came through a reverse
proxy (it carries ``X-Forwarded-For``, ``Forwarded`` or ``X-Real-IP``, which Caddy's ``reverse_proxy`` always adds)
gets only ``{"status": "ok" | "degraded" | "unavailable"}`` from ``/healthz`` (503 for "unavailable", as before) and
a 404 from ``/metrics``, which the shipped Caddyfile also answers with a 404 itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from bot.web.backend import OperatorView

log = logging.getLogger(__name__)

HEALTH_TIMEOUT_SECONDS = 5.0
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PROXY_HEADERS = ("X-Forwarded-For", "Forwarded", "X-Real-IP")

HealthReport = Callable[[], Awaitable[dict[str, object]]]
HEALTH_KEY: web.AppKey[HealthReport] = web.AppKey("health_report")
MONITOR_KEY = web.AppKey("operator_view", OperatorView)


def add_operator_routes(app: web.Application, health: HealthReport, monitor: OperatorView | None) -> None:
    """``/healthz`` from the monitor's report (or ``health`` without one); ``/metrics`` only with a monitor."""
    app[HEALTH_KEY] = monitor.report if monitor is not None else health
    app.router.add_get("/healthz", _healthz, name="healthz")
    if monitor is not None:
        app[MONITOR_KEY] = monitor
        app.router.add_get("/metrics", _metrics, name="metrics")


def from_the_internet(request: web.BaseRequest) -> bool:
    """Whether a reverse proxy forwarded the request (so it may come from anyone on the internet)."""
    return any(name in request.headers for name in PROXY_HEADERS)


async def _healthz(request: web.Request) -> web.Response:
    try:
        async with asyncio.timeout(HEALTH_TIMEOUT_SECONDS):
            report = await request.app[HEALTH_KEY]()
    except Exception as exc:  # includes TimeoutError
        log.warning("health check failed: %s", type(exc).__name__)
        return web.json_response({"status": "unavailable"}, status=503)
    status = 503 if report.get("status") == "unavailable" else 200
    if from_the_internet(request):
        return web.json_response({"status": str(report.get("status", "ok"))}, status=status)
    return web.json_response(report, status=status, dumps=lambda obj: json.dumps(obj, default=str))


async def _metrics(request: web.Request) -> web.Response:
    if from_the_internet(request):
        raise web.HTTPNotFound()
    try:
        async with asyncio.timeout(HEALTH_TIMEOUT_SECONDS):
            body = await request.app[MONITOR_KEY].prometheus()
    except Exception as exc:  # includes TimeoutError
        log.warning("metrics failed: %s", type(exc).__name__)
        return web.Response(text="# metrics unavailable\n", status=503)
    return web.Response(body=body, headers={"Content-Type": PROMETHEUS_CONTENT_TYPE})
