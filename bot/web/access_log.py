"""The access log without link tokens: a call link's token is the only credential of its page, so no log line
carries one (nor a query string, nor a Referer)."""

from __future__ import annotations

import logging
import re

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

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
