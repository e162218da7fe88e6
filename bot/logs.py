"""Logging for the whole process: one handler on the root logger, text or JSON lines, ids as fields.

`setup_logging` is called once by `python -m bot` after the settings are read. Every record may carry the
ids of the call, member and server it concerns: pass them as ``extra={"call_id": ...}`` or bind them for a
block of work with ``bind(call_id=...)`` (a context variable, so tasks started inside inherit them). The JSON
format writes them as fields; the text format appends them as ``call_id=...``.

Never log what members said or typed: log ids and counts. The libraries that would (``PAYLOAD_LOGGERS``) never
log below INFO, at any setting. Secret values from the settings are replaced by
``[secret]`` in every line, as a safety net.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, TextIO

ID_FIELDS = ("call_id", "user_id", "guild_id", "agent_id", "chat_id", "job_id")
THIRD_PARTY_LOGGERS = ("httpx", "httpcore", "aiohttp.access", "discord.http", "discord.gateway", "aiosqlite")
"""Libraries whose INFO lines are request-by-request noise (httpx logs every Agora and LLM request)."""
PAYLOAD_LOGGERS = (
    "aiosqlite",
    "asyncpg",
    "discord.gateway",
    "discord.http",
    "discord.webhook",
    "httpx",
    "httpcore",
    "hpack",
    "h2",
    "aiohttp.client",
    "aiohttp.server",
    "aiohttp.web",
    "websockets",
)
"""Libraries whose DEBUG lines carry what was sent or received: aiosqlite's SQL parameters, discord.py's gateway
events (an interaction's options) and request bodies, HTTP headers and bodies. What members said would be in them,
so they never log below INFO, whatever ``log.third_party_level`` says."""
HANDLER_NAME = "memory-call-bot"

_bound: contextvars.ContextVar[dict[str, object] | None] = contextvars.ContextVar("log_ids", default=None)


@contextlib.contextmanager
def bind(**ids: object) -> Iterator[None]:
    """Attach ids (call_id, user_id, ...) to every record logged inside the block, including in tasks it starts."""
    token = _bound.set({**(_bound.get() or {}), **ids})
    try:
        yield
    finally:
        _bound.reset(token)


def bind_forever(**ids: object) -> None:
    """Attach ids for the rest of the current task (use at the top of a task that serves one call)."""
    _bound.set({**(_bound.get() or {}), **ids})


def record_ids(record: logging.LogRecord) -> dict[str, object]:
    ids = dict(_bound.get() or {})
    for name in ID_FIELDS:
        value = getattr(record, name, None)
        if value is not None:
            ids[name] = value
    return {name: ids[name] for name in ID_FIELDS if ids.get(name) is not None}


class _Redactor:
    def __init__(self, secrets: Iterable[str]) -> None:
        # Longest first, so a secret that contains another is replaced whole; very short values would
        # replace ordinary words, so they are left alone.
        self.secrets = sorted({s for s in secrets if len(s) >= 6}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, "[secret]")
        return text


class TextFormatter(logging.Formatter):
    def __init__(self, redact: _Redactor) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.redact = redact

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ids = record_ids(record)
        if ids:
            first, newline, rest = line.partition("\n")
            line = first + " " + " ".join(f"{k}={v}" for k, v in ids.items()) + newline + rest
        return self.redact(line)


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, the ids as fields, and the traceback if any."""

    def __init__(self, redact: _Redactor) -> None:
        super().__init__()
        self.redact = redact

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": self.redact(record.getMessage()),
            **record_ids(record),
        }
        if record.exc_info:
            entry["exception"] = self.redact(self.formatException(record.exc_info))
        return json.dumps(entry, ensure_ascii=False, default=str)


def _payload_floor(record: logging.LogRecord) -> bool:
    """Drops a DEBUG record of a ``PAYLOAD_LOGGERS`` library, should something lower its level after start-up
    (discord.py's own logging set-up, a library's debug switch)."""
    if record.levelno >= logging.INFO:
        return True
    name = record.name
    return not any(name == payload or name.startswith(payload + ".") for payload in PAYLOAD_LOGGERS)


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever sys.stderr is at the time of each record (as logging's last-resort handler does)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


def setup_logging(
    *,
    level: str = "INFO",
    fmt: str = "text",
    third_party_level: str = "WARNING",
    secrets: Iterable[str] = (),
    stream: TextIO | None = None,
) -> logging.Handler:
    """Install the one handler on the root logger (replacing any earlier one, ours or basicConfig's)."""
    redact = _Redactor(secrets)
    handler: logging.StreamHandler[TextIO] = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    handler.set_name(HANDLER_NAME)
    handler.setFormatter(JsonFormatter(redact) if fmt == "json" else TextFormatter(redact))
    handler.addFilter(_payload_floor)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in THIRD_PARTY_LOGGERS:
        logging.getLogger(name).setLevel(third_party_level)
    floor = max(logging.INFO, logging.getLevelNamesMapping()[third_party_level.upper()])
    for name in PAYLOAD_LOGGERS:
        logging.getLogger(name).setLevel(floor)
    for name in ("discord", *THIRD_PARTY_LOGGERS, *PAYLOAD_LOGGERS):
        logger = logging.getLogger(name)
        for old in list(logger.handlers):  # discord.py's own coloured handler, if something installed it
            logger.removeHandler(old)
        logger.propagate = True
    return handler
