"""Async client for the Agora Conversational AI REST API (spec §4), with safe retries.

Retry policy: exponential backoff with full jitter, ``Retry-After`` honoured (capped by ``backoff_max``),
at most ``max_retries`` retries after the first attempt, every sleep through the injectable ``sleep``.

* Retried: HTTP 429, 502, 503, 504 and transport errors (connection errors, timeouts, broken connections).
  Other 4xx and 500 are never retried.
* ``query``, ``list_agents``, ``history``, ``turns``, ``ping``: GETs, always safe.
* ``leave``: idempotent. A 404 on the first attempt returns False (already gone). A 404 on a retry after an
  attempt that may have reached the service (a 5xx or a timeout/broken connection after sending) returns True:
  most likely our earlier attempt stopped the agent, and either way it is gone. After attempts that provably
  did not reach it (connect error, 429) a 404 still returns False.
* ``join``: retried with the SAME name, so a retry can never start a second agent. If a retry meets 409
  after an attempt that may have been processed, the client proves the existing agent is its own (lists the
  channel's agents in states 0, 1, 2, queries each, compares ``name``) and returns it; otherwise
  AgoraConflict. A 409 on the first attempt is always AgoraConflict.
* ``update``: retried like a GET. ``/update`` replaces ``system_messages``, ``params`` and ``token``
  wholesale, so applying the same body twice leaves the same state; repeating it after a lost response
  is harmless.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Self
from urllib.parse import quote

import httpx

from bot.agora.custom_llm import is_injected
from bot.agora.errors import (
    AgoraError,
    AgoraNotFound,
    AgoraUnavailable,
    error_from_response,
)
from bot.agora.pools import PooledTransport

logger = logging.getLogger(__name__)

USER_AGENT = "memory-call-bot/0.1 (Discord /call bot; ConvoAI client)"
RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})
ACTIVE_STATES = (0, 1, 2)
MAX_LIST_PAGES = 1000
TURNS_PAGE_SIZE = 200
"""The largest page ``/turns`` serves (spec §4.10: 10 to 200): one request covers most calls."""
MAX_TURN_PAGES = 100

# Errors raised before the request left this process: the service cannot have acted on it.
_NOT_SENT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
_RETRYABLE_TRANSPORT_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


@dataclass(frozen=True)
class AgentStarted:
    agent_id: str
    create_ts: int
    status: str


@dataclass(frozen=True)
class AgentInfo:
    """An agent as ``query`` or ``list`` report it; timestamps of 0 or null become None."""

    agent_id: str
    status: str
    name: str | None
    start_ts: int | None
    stop_ts: int | None
    message: str | None


@dataclass(frozen=True)
class HistoryItem:
    role: Literal["user", "assistant"]
    content: str


@dataclass(frozen=True)
class History:
    agent_id: str
    status: str
    start_ts: int | None
    contents: tuple[HistoryItem, ...]


def parse_history_items(raw_contents: Any) -> tuple[HistoryItem, ...]:
    """Keep only role and content of each user or assistant line of the transcript (`is_injected` items are
    none); unknown fields are ignored, nulls become an empty text."""
    if not isinstance(raw_contents, list):
        return ()
    items = []
    for raw in raw_contents:
        if not isinstance(raw, Mapping):
            continue
        role = raw.get("role")
        if role not in ("user", "assistant"):
            # Only user and assistant lines can be stored (the turns table refuses any other role).
            continue
        if is_injected(raw):
            continue  # an instruction injected through Agora's API: nobody said it
        items.append(HistoryItem(role=role, content=_text(raw.get("content"))))
    return tuple(items)


@dataclass(frozen=True)
class TurnCounts:
    """What Agora's post-session turn analytics (``/turns``, spec §4.10) say about a session: counts only, since
    turns carry timing and type but no text."""

    agent_id: str
    total: int
    """Every turn Agora counted (``total_turn_count``): greetings, the member's, silence reminders, ``speak``."""
    voice_inputs: int
    """Turns the member started by speaking (``start.type`` ``voice_input``) that were not ``ignored``: an
    ignored turn (semantic end-of-speech, a missing start keyword) got no reply and no line of its own."""
    complete: bool = True
    """False when not every page could be read (more than ``MAX_TURN_PAGES``)."""


@dataclass
class _Outcome:
    """The last response of a retried request and whether any earlier attempt may have reached the service."""

    response: httpx.Response
    earlier_attempt_may_have_landed: bool


class ConvoAIClient:
    """One client per process: it owns a pooled ``httpx.AsyncClient`` with Basic auth and timeouts."""

    def __init__(
        self,
        *,
        base_url: str,
        app_id: str,
        customer_id: str,
        customer_secret: str,
        timeout: float = 10.0,
        max_retries: int = 3,
        backoff_base: float = 0.2,
        backoff_max: float = 2.0,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        if not base_url:
            raise ValueError("agora.base_url must not be empty")
        if not app_id:
            raise ValueError("agora.app_id must not be empty")
        if not customer_id:
            raise ValueError("agora.customer_id must not be empty")
        if not customer_secret:
            raise ValueError("AGORA_CUSTOMER_SECRET must not be empty")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self._app_id = app_id
        self._max_retries = max_retries
        self._backoff_base = backoff_base
        self._backoff_max = backoff_max
        self._sleep = sleep
        self._jitter = jitter
        self._project_path = f"/v2/projects/{quote(app_id, safe='')}"
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/") + "/",
            auth=httpx.BasicAuth(customer_id, customer_secret),
            timeout=httpx.Timeout(timeout),
            headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
            transport=transport if transport is not None else PooledTransport(),
        )

    def __repr__(self) -> str:
        return f"ConvoAIClient(base_url={str(self._http.base_url)!r}, app_id={self._app_id!r})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def join(self, name: str, properties: dict[str, Any], *, preset: str | None = None) -> AgentStarted:
        body: dict[str, Any] = {"name": name, "properties": properties}
        if preset is not None:
            body["preset"] = preset
        outcome = await self._send("join", "POST", "/join", json_body=body)
        response = outcome.response
        if response.status_code == 409 and outcome.earlier_attempt_may_have_landed:
            conflict = self._error("join", response)
            return await self._claim_own_agent(name, properties, conflict)
        return _agent_started("join", self._json_object("join", response))

    async def leave(self, agent_id: str) -> bool:
        outcome = await self._send("leave", "POST", f"/agents/{_segment(agent_id)}/leave")
        if outcome.response.status_code == 404:
            return outcome.earlier_attempt_may_have_landed
        self._json_object("leave", outcome.response, allow_empty=True)
        return True

    async def query(self, agent_id: str) -> AgentInfo:
        outcome = await self._send("query", "GET", f"/agents/{_segment(agent_id)}")
        return _agent_info(self._json_object("query", outcome.response))

    async def list_agents(
        self,
        *,
        channel: str | None = None,
        states: Sequence[int] = (2,),
        limit: int = 20,
    ) -> list[AgentInfo]:
        """All agents matching the filters, following ``meta.cursor``; ``limit`` is the page size."""
        agents: list[AgentInfo] = []
        cursor: str | None = None
        seen_cursors: set[str] = set()
        for _ in range(MAX_LIST_PAGES):
            page, cursor = await self._list_page(channel=channel, states=states, limit=limit, cursor=cursor)
            agents.extend(page)
            if not cursor or cursor in seen_cursors:
                break
            seen_cursors.add(cursor)
        return agents

    async def update(self, agent_id: str, properties: dict[str, Any]) -> AgentStarted:
        outcome = await self._send(
            "update", "POST", f"/agents/{_segment(agent_id)}/update", json_body={"properties": properties}
        )
        return _agent_started("update", self._json_object("update", outcome.response))

    async def history(self, agent_id: str) -> History:
        outcome = await self._send("history", "GET", f"/agents/{_segment(agent_id)}/history")
        data = self._json_object("history", outcome.response)
        return History(
            agent_id=_text(data.get("agent_id")) or agent_id,
            status=_text(data.get("status")),
            start_ts=_timestamp(data.get("start_ts")),
            contents=parse_history_items(data.get("contents")),
        )

    async def turns(self, agent_id: str) -> TurnCounts:
        """Count a session's turns (served for sessions of the last 7 days, also once the agent stopped). Asks
        for the largest page and follows further pages only when Agora says there are more."""
        total = voice_inputs = 0
        counted = 0
        complete = False
        for page_index in range(1, MAX_TURN_PAGES + 1):
            params = {"page_index": str(page_index), "page_size": str(TURNS_PAGE_SIZE)}
            outcome = await self._send("turns", "GET", f"/agents/{_segment(agent_id)}/turns", params=params)
            data = self._json_object("turns", outcome.response)
            total = _count(data.get("total_turn_count"))
            raw_turns = data.get("turns")
            page = [turn for turn in raw_turns if isinstance(turn, Mapping)] if isinstance(raw_turns, list) else []
            counted += len(page)
            voice_inputs += sum(1 for turn in page if _is_member_voice_turn(turn))
            pagination = data.get("pagination")
            if not isinstance(pagination, Mapping):
                pagination = {}
            last = pagination.get("is_last_page")
            total_pages = _count(pagination.get("total_pages"))
            if not page or last is True or (last is None and (page_index >= total_pages or counted >= total)):
                complete = True
                break
        return TurnCounts(
            agent_id=_text(data.get("agent_id")) or agent_id,
            total=max(total, counted),
            voice_inputs=voice_inputs,
            complete=complete,
        )

    async def ping(self) -> None:
        """One cheap authenticated request; raises AgoraError when credentials or connectivity are wrong."""
        await self._list_page(channel=None, states=(2,), limit=1, cursor=None, operation="ping")

    async def _list_page(
        self,
        *,
        channel: str | None,
        states: Sequence[int],
        limit: int,
        cursor: str | None,
        operation: str = "list",
    ) -> tuple[list[AgentInfo], str | None]:
        params: dict[str, str] = {"limit": str(limit)}
        if states:
            params["state"] = ",".join(str(state) for state in states)
        if channel is not None:
            params["channel"] = channel
        if cursor:
            params["cursor"] = cursor
        outcome = await self._send(operation, "GET", "/agents", params=params)
        data = self._json_object(operation, outcome.response)
        page = data.get("data")
        if not isinstance(page, Mapping):
            page = {}
        raw_list = page.get("list")
        if not isinstance(raw_list, list):
            raw_list = []
        agents = [_agent_info(item) for item in raw_list if isinstance(item, Mapping) and item.get("agent_id")]
        meta = data.get("meta")
        if not isinstance(meta, Mapping):
            meta = {}
        return agents, _text(meta.get("cursor")) or None

    async def _claim_own_agent(self, name: str, properties: Mapping[str, Any], conflict: AgoraError) -> AgentStarted:
        """After a retried join met 409: return the agent our earlier attempt created, or raise the conflict.

        Errors while looking (other than an agent vanishing) propagate: ownership is then unknown either way.
        """
        channel = properties.get("channel")
        candidate_ids: list[str] = [conflict.task_id] if conflict.task_id else []
        if isinstance(channel, str):
            listed = await self.list_agents(channel=channel, states=ACTIVE_STATES)
            candidate_ids.extend(agent.agent_id for agent in listed if agent.agent_id not in candidate_ids)
        for agent_id in candidate_ids:
            try:
                info = await self.query(agent_id)
            except AgoraNotFound:
                continue
            if info.name == name:
                logger.info("agora join: retry met 409, agent %s with our name is ours", agent_id)
                return AgentStarted(agent_id=info.agent_id, create_ts=info.start_ts or 0, status=info.status)
        raise conflict

    async def _send(
        self,
        operation: str,
        method: str,
        path: str,
        *,
        json_body: Mapping[str, Any] | None = None,
        params: Mapping[str, str] | None = None,
    ) -> _Outcome:
        """Send with retries. Returns a 2xx, a non-retryable error response (for the caller to interpret),
        or raises the error of the last attempt once the retry budget is spent."""
        url = self._project_path + path
        content = json.dumps(json_body).encode() if json_body is not None else None
        headers = {"Content-Type": "application/json"} if content is not None else None
        may_have_landed = False
        attempts = self._max_retries + 1
        for attempt in range(attempts):
            is_last = attempt == attempts - 1
            try:
                response = await self._http.request(method, url, content=content, params=params, headers=headers)
            except _RETRYABLE_TRANSPORT_ERRORS as exc:
                failure = _transport_error(operation, exc)
                if is_last:
                    raise failure from exc
                delay = self._backoff_delay(attempt, None)
                logger.warning(
                    "agora %s attempt %d/%d: %s; retrying in %.2fs",
                    operation,
                    attempt + 1,
                    attempts,
                    type(exc).__name__,
                    delay,
                )
                may_have_landed = may_have_landed or not isinstance(exc, _NOT_SENT_ERRORS)
                await self._sleep(delay)
                continue
            except httpx.HTTPError as exc:
                raise _transport_error(operation, exc) from exc
            status = response.status_code
            if 200 <= status < 300 or status not in RETRYABLE_STATUSES:
                return _Outcome(response, may_have_landed)
            if is_last:
                raise self._error(operation, response)
            delay = self._backoff_delay(attempt, _retry_after_seconds(response))
            logger.warning(
                "agora %s attempt %d/%d: HTTP %d; retrying in %.2fs",
                operation,
                attempt + 1,
                attempts,
                status,
                delay,
            )
            may_have_landed = may_have_landed or status != 429
            await self._sleep(delay)
        raise AssertionError("unreachable: the retry loop always returns or raises")

    def _backoff_delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self._backoff_max)
        ceiling = min(self._backoff_max, self._backoff_base * (2.0**attempt))
        return self._jitter() * ceiling

    def _json_object(self, operation: str, response: httpx.Response, *, allow_empty: bool = False) -> dict[str, Any]:
        """The JSON object of a 2xx response; a non-2xx becomes its typed AgoraError."""
        if not 200 <= response.status_code < 300:
            raise self._error(operation, response)
        if allow_empty and not response.content.strip():
            return {}
        try:
            decoded = response.json()
        except ValueError as exc:
            raise AgoraError(operation, response.status_code, "InvalidResponse", "response body is not JSON") from exc
        if not isinstance(decoded, dict):
            raise AgoraError(operation, response.status_code, "InvalidResponse", "response body is not an object")
        return decoded

    @staticmethod
    def _error(operation: str, response: httpx.Response) -> AgoraError:
        return error_from_response(
            operation, response.status_code, response.content, retry_after=_retry_after_seconds(response)
        )


def _transport_error(operation: str, exc: httpx.HTTPError) -> AgoraUnavailable:
    reason = "Timeout" if isinstance(exc, httpx.TimeoutException) else "TransportError"
    detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return AgoraUnavailable(operation, None, reason, detail)


def _retry_after_seconds(response: httpx.Response) -> float | None:
    """``Retry-After`` as seconds (delta-seconds or HTTP date); None when absent or unreadable."""
    value = response.headers.get("Retry-After", "").strip()
    if not value:
        return None
    if re.fullmatch(r"\d+(\.\d+)?", value):
        return float(value)
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(moment.timestamp() - time.time(), 0.0)


def _segment(value: str) -> str:
    return quote(value, safe="")


def _agent_started(operation: str, data: Mapping[str, Any]) -> AgentStarted:
    agent_id = _text(data.get("agent_id"))
    if not agent_id:
        raise AgoraError(operation, None, "InvalidResponse", "response carries no agent_id")
    return AgentStarted(
        agent_id=agent_id, create_ts=_timestamp(data.get("create_ts")) or 0, status=_text(data.get("status"))
    )


def _agent_info(data: Mapping[str, Any]) -> AgentInfo:
    return AgentInfo(
        agent_id=_text(data.get("agent_id")),
        status=_text(data.get("status")),
        name=_optional_text(data.get("name")),
        start_ts=_timestamp(data.get("start_ts")),
        stop_ts=_timestamp(data.get("stop_ts")),
        message=_optional_text(data.get("message")),
    )


def _is_member_voice_turn(turn: Mapping[str, Any]) -> bool:
    start, end = turn.get("start"), turn.get("end")
    if not isinstance(start, Mapping) or start.get("type") != "voice_input":
        return False
    return not (isinstance(end, Mapping) and end.get("type") == "ignored")


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return max(int(value), 0)


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def _optional_text(value: Any) -> str | None:
    return None if value is None else _text(value)


def _timestamp(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        seconds = int(float(value))
    except (ValueError, OverflowError):
        return None
    return seconds or None
