"""Logging for the whole process: one handler on the root logger, text or JSON lines, ids as fields.

`setup_logging` is called once by `python -m bot` after the settings are read. Every record may carry the
ids of the call, member and server it concerns: pass them as ``extra={"call_id": ...}`` or bind them for a
block of work with ``bind(call_id=...)`` (a context variable, so tasks started inside inherit them). The JSON
format writes them as fields; the text format appends them as ``call_id=...``.

Never log what members said or typed: log ids and counts. Secret values from the settings are replaced by
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
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in THIRD_PARTY_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(third_party_level)
    for name in ("discord", *THIRD_PARTY_LOGGERS):
        logger = logging.getLogger(name)
        for old in list(logger.handlers):  # discord.py's own coloured handler, if something installed it
            logger.removeHandler(old)
        logger.propagate = True
    return handler
