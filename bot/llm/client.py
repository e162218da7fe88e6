"""Async client for OpenAI-compatible chat-completions servers (OpenAI, vLLM, llama.cpp, Ollama, ...).

Retry policy: HTTP 429, 5xx and transport errors (connection errors, timeouts, broken connections) are
retried at most ``max_retries`` times after the first attempt, sleeping ``backoff_base * 2**n`` plus up to as
much again of random jitter, or the server's numeric ``Retry-After`` when that is longer (capped at
``MAX_RETRY_AFTER``). Other 4xx answers are never retried. A stream is retried only until its response
headers arrive: once deltas have been handed to the caller, a failure is raised rather than replayed.

``open_stream`` (the voice agent's relay, ``bot.memory.live``) goes through aiohttp instead of httpx: it runs on
every voice turn and reads every chunk of the reply, and aiohttp's C HTTP parser and plain stream reader cost a
fraction of httpx's per-chunk layers (httpcore, anyio, h11) on the bot's event loop. Its connections are kept alive
and reused like httpx's; errors are the same ``LLMError`` s. Both are made by ``bot.llm.connection``, as the
embeddings client's are.

The API key goes only into the Authorization header. It is never logged, is absent from ``repr``, and is
masked out of any server text quoted in an error message (some servers echo the key they rejected).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import AsyncGenerator, Awaitable, Callable
from types import TracebackType
from typing import Any, Self

import aiohttp
import httpx

from bot.llm.connection import LLMConnection
from bot.llm.errors import (
    API_KEY_SETTING,
    BASE_URL_SETTING,
    MODEL_SETTING,
    LLMBadResponse,
    LLMError,
    LLMUnavailable,
)

logger = logging.getLogger(__name__)

USER_AGENT = "memory-call-bot/0.1 (LLM client)"
MAX_RETRY_AFTER = 20.0
MAX_DETAIL_CHARS = 300
CHAT_PATH = "/chat/completions"
MODELS_PATH = "/models"

Message = dict[str, Any]
Sleep = Callable[[float], Awaitable[object]]


class UpstreamStream:
    """A streamed answer whose headers arrived (``LLMClient.open_stream``): its content type, its body's bytes as
    they arrive (decompressed, otherwise unchanged), and ``aclose``, which the caller must call."""

    def __init__(self, response: aiohttp.ClientResponse, base_url: str) -> None:
        self._response = response
        self._base_url = base_url
        self.content_type: str = response.headers.get("Content-Type", "text/event-stream")

    async def chunks(self) -> AsyncGenerator[bytes]:
        """The body as it arrives; a broken or stalled connection is ``LLMUnavailable``."""
        try:
            async for data in self._response.content.iter_any():
                yield data
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise LLMUnavailable(f"stream from LLM at {self._base_url} broke off: {type(exc).__name__}: {exc}") from exc

    async def aclose(self) -> None:
        """Back to the pool when the body was read to its end; otherwise (an interrupted reply) the connection is
        closed, since the upstream may still be writing on it."""
        if self._response.content.is_eof():
            self._response.release()
        else:
            self._response.close()


class LLMClient:
    """One shared HTTP connection pool to one chat-completions server and model."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 2,
        backoff_base: float = 0.3,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self._connection = LLMConnection(
            base_url=base_url, api_key=api_key, timeout=timeout, user_agent=USER_AGENT, transport=transport
        )
        self._base_url = self._connection.base_url
        self._model = model
        self._timeout = timeout
        self._max_retries = max_retries
        self._backoff_base = backoff_base
        self._sleep = sleep
        self._response_format_supported = True
        self._http = self._connection.http

    @property
    def base_url(self) -> str:
        return self._base_url

    @property
    def model(self) -> str:
        return self._model

    def __repr__(self) -> str:
        return f"LLMClient(base_url={self._base_url!r}, model={self._model!r})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._connection.aclose()

    async def complete(
        self,
        messages: list[Message],
        *,
        temperature: float = 0.2,
        max_tokens: int | None = None,
        json_mode: bool = False,
    ) -> str:
        """Return the assistant's reply text.

        With ``json_mode`` the request asks for ``response_format: {"type": "json_object"}``. Servers that
        reject that field with a 400 naming it get the request again without it, and are not asked again by
        this client.
        """
        payload = self._payload(messages, temperature, max_tokens)
        if json_mode and self._response_format_supported:
            payload["response_format"] = {"type": "json_object"}
            try:
                response = await self._send("POST", CHAT_PATH, payload)
            except LLMError as exc:
                if not _rejects_response_format(exc):
                    raise
                logger.warning(
                    "LLM at %s does not support response_format; sending JSON-mode requests without it",
                    self._base_url,
                )
                self._response_format_supported = False
                del payload["response_format"]
                response = await self._send("POST", CHAT_PATH, payload)
        else:
            response = await self._send("POST", CHAT_PATH, payload)
        return self._completion_text(response)

    async def stream(
        self,
        messages: list[Message],
        *,
        temperature: float = 0.7,
        max_tokens: int | None = None,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | None = None,
        on_chunk: Callable[[dict[str, Any]], object] | None = None,
    ) -> AsyncGenerator[str, None]:
        """Yield the reply's content deltas as the server streams them (SSE).

        ``tools`` (and ``tool_choice``) are offered to the model as OpenAI tool definitions; ``on_chunk`` is given
        every streamed chunk object, where the model's tool calls are (``delta.tool_calls``): only content is
        yielded. A consumer that stops early should close the generator (``contextlib.aclosing``) so the
        connection is released at once rather than when the generator is garbage-collected.
        """
        payload = self._payload(messages, temperature, max_tokens)
        payload["stream"] = True
        if tools:
            payload["tools"] = tools
            if tool_choice is not None:
                payload["tool_choice"] = tool_choice
        response = await self._send("POST", CHAT_PATH, payload, stream=True)
        try:
            if response.headers.get("content-type", "").startswith("application/json"):
                # Some servers ignore ``stream: true`` and answer with one ordinary completion.
                await response.aread()
                text = self._completion_text(response)
                if text:
                    yield text
                return
            finished = False
            async for line in response.aiter_lines():
                data = _sse_data(line)
                if data is None:
                    continue
                if data == "[DONE]":
                    return
                chunk = self._load_chunk(data)
                if on_chunk is not None:
                    on_chunk(chunk)
                delta, chunk_finished = self._chunk_delta(chunk)
                finished = finished or chunk_finished
                if delta:
                    yield delta
            if not finished:
                raise LLMUnavailable(f"stream from LLM at {self._base_url} ended before the reply was finished")
        except httpx.TransportError as exc:
            raise LLMUnavailable(f"stream from LLM at {self._base_url} broke off: {type(exc).__name__}: {exc}") from exc
        finally:
            await response.aclose()

    async def open_stream(self, request: dict[str, Any], *, max_retries: int = 0) -> UpstreamStream:
        """Send a chat-completions request body as given (with this client's model) and return the answer as
        soon as its headers arrive, body unread: the caller relays it and must close it. Retried at most
        ``max_retries`` times (on the same terms as every request of this client), and only before the headers
        arrive."""
        payload = {**request, "model": self._model}
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
        url = self._base_url + CHAT_PATH
        session = self._connection.streams()
        attempt = 0
        while True:
            attempt += 1
            try:
                response = await session.post(url, data=body, headers={"Content-Type": "application/json"})
            except (aiohttp.ClientError, TimeoutError) as exc:
                if attempt > max_retries:
                    raise self._transport_error(exc, attempt) from exc
                delay = self._backoff(attempt, None)
                self._log_retry(f": {type(exc).__name__}", delay, attempt, max_retries)
            else:
                if 200 <= response.status < 300:
                    return UpstreamStream(response, self._base_url)
                try:
                    content = await response.read()
                except (aiohttp.ClientError, TimeoutError):
                    content = b""
                finally:
                    response.release()
                # The error's wording is the httpx path's (`_status_error`): the same answer, read the same way.
                answer = httpx.Response(
                    response.status,
                    headers={k: v for k, v in response.headers.items() if k.lower() in ("content-type", "retry-after")},
                    content=content,
                    request=httpx.Request("POST", url),
                )
                if not _retryable(answer.status_code) or attempt > max_retries:
                    raise self._status_error(answer, CHAT_PATH, attempt)
                delay = self._backoff(attempt, _retry_after(answer))
                self._log_retry(f" answered {answer.status_code}", delay, attempt, max_retries)
            await self._sleep(delay)

    async def models(self) -> list[str]:
        """The model ids the server lists at GET ``{base_url}/models``."""
        response = await self._send("GET", MODELS_PATH, None)
        data = self._json_body(response)
        entries = data.get("data") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            raise LLMBadResponse(
                f"LLM at {self._base_url} answered GET {MODELS_PATH} with something that is not a model "
                f"list: check {BASE_URL_SETTING} points at an OpenAI-compatible API (usually ending in /v1)",
                status=response.status_code,
            )
        return [entry["id"] for entry in entries if isinstance(entry, dict) and isinstance(entry.get("id"), str)]

    async def ping(self) -> None:
        """Check that the server is reachable, accepts the key and speaks the API; raise LLMError if not."""
        await self.models()

    def _payload(self, messages: list[Message], temperature: float, max_tokens: int | None) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": self._model, "messages": messages, "temperature": temperature}
        if max_tokens is not None:
            payload["max_tokens"] = max_tokens
        return payload

    async def _send(
        self,
        method: str,
        path: str,
        payload: dict[str, Any] | None,
        *,
        stream: bool = False,
        max_retries: int | None = None,
    ) -> httpx.Response:
        """Send with retries and return a 2xx response; raise the matching LLMError otherwise.

        With ``stream`` the returned response body is unread and the caller must close it.
        """
        url = self._base_url + path
        retries = self._max_retries if max_retries is None else max_retries
        attempt = 0
        while True:
            attempt += 1
            request = self._http.build_request(method, url, json=payload)
            try:
                response = await self._http.send(request, stream=stream)
            except httpx.TransportError as exc:
                if attempt > retries:
                    raise self._transport_error(exc, attempt) from exc
                delay = self._backoff(attempt, None)
                self._log_retry(f": {type(exc).__name__}", delay, attempt, retries)
            else:
                if response.is_success:
                    return response
                await response.aread()
                await response.aclose()
                if not _retryable(response.status_code) or attempt > retries:
                    raise self._status_error(response, path, attempt)
                delay = self._backoff(attempt, _retry_after(response))
                self._log_retry(f" answered {response.status_code}", delay, attempt, retries)
            await self._sleep(delay)

    def _log_retry(self, what: str, delay: float, attempt: int, retries: int) -> None:
        """``what`` follows the server's address: ": ConnectError", " answered 503"."""
        logger.warning(
            "LLM at %s%s; retrying in %.2f s (retry %d of %d)", self._base_url, what, delay, attempt, retries
        )

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        delay = self._backoff_base * 2.0 ** (attempt - 1)
        delay += random.uniform(0, delay)
        if retry_after is not None:
            delay = max(delay, min(retry_after, MAX_RETRY_AFTER))
        return delay

    def _transport_error(
        self, exc: httpx.TransportError | aiohttp.ClientError | TimeoutError, attempts: int
    ) -> LLMUnavailable:
        """What failed on the way to the server, from httpx (requests) or aiohttp (the live route's streams)."""
        tries = _attempts_text(attempts)
        if isinstance(exc, httpx.TimeoutException | TimeoutError):
            return LLMUnavailable(
                f"LLM at {self._base_url} did not answer within {self._timeout:g} s{tries}: "
                f"check {BASE_URL_SETTING} and that the server is not overloaded ({type(exc).__name__})"
            )
        if isinstance(exc, httpx.ConnectError | aiohttp.ClientConnectorError):
            return LLMUnavailable(
                f"could not connect to LLM at {self._base_url}{tries}: check {BASE_URL_SETTING} "
                f"and that the server is running ({exc})"
            )
        return LLMUnavailable(f"connection to LLM at {self._base_url} failed{tries}: {type(exc).__name__}: {exc}")

    def _status_error(self, response: httpx.Response, path: str, attempts: int) -> LLMError:
        status = response.status_code
        detail = self._redact(_error_detail(response))
        where = f"LLM at {self._base_url} answered {status}"
        if status in (401, 403):
            return LLMError(f"{where}: check {API_KEY_SETTING} ({detail})", status=status)
        if status == 404:
            if "model" in detail.lower():
                return LLMError(
                    f"{where}: check {MODEL_SETTING} (is {self._model!r} served?) ({detail})", status=status
                )
            return LLMError(
                f"{where} for {path}: check {BASE_URL_SETTING} (it usually ends in /v1) ({detail})",
                status=status,
            )
        if status == 429:
            return LLMUnavailable(f"{where} (rate limited){_attempts_text(attempts)}: {detail}", status=status)
        if status >= 500:
            return LLMUnavailable(f"{where}{_attempts_text(attempts)}: {detail}", status=status)
        return LLMError(f"{where}, rejecting the request: {detail}", status=status)

    def _json_body(self, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError as exc:
            snippet = self._redact(_truncate(response.text.strip()))
            raise LLMBadResponse(
                f"LLM at {self._base_url} answered {response.status_code} with a body that is not JSON: "
                f"check {BASE_URL_SETTING} points at an OpenAI-compatible API ({snippet!r})",
                status=response.status_code,
            ) from exc

    def _completion_text(self, response: httpx.Response) -> str:
        data = self._json_body(response)
        content = _dig(data, "choices", 0, "message", "content")
        if isinstance(content, str):
            return content
        error = _dig(data, "error")
        reason = f": {self._redact(_truncate(str(error)))}" if error is not None else ""
        raise LLMBadResponse(
            f"LLM at {self._base_url} answered without choices[0].message.content{reason}",
            status=response.status_code,
        )

    def _load_chunk(self, data: str) -> dict[str, Any]:
        """One SSE chunk's object."""
        try:
            chunk = json.loads(data)
        except ValueError as exc:
            snippet = self._redact(_truncate(data))
            raise LLMBadResponse(f"LLM at {self._base_url} streamed a chunk that is not JSON: {snippet!r}") from exc
        if not isinstance(chunk, dict):
            raise LLMBadResponse(f"LLM at {self._base_url} streamed a chunk that is not an object")
        return chunk

    def _chunk_delta(self, chunk: dict[str, Any]) -> tuple[str, bool]:
        """Return the content delta of one SSE chunk and whether it carries a finish_reason."""
        if "error" in chunk:
            detail = self._redact(_truncate(str(chunk["error"])))
            raise LLMUnavailable(f"LLM at {self._base_url} reported an error mid-stream: {detail}")
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices:
            return "", False  # e.g. a trailing usage-only chunk
        choice = choices[0]
        if not isinstance(choice, dict):
            raise LLMBadResponse(f"LLM at {self._base_url} streamed a malformed choice")
        content = _dig(choice, "delta", "content")
        if content is not None and not isinstance(content, str):
            raise LLMBadResponse(f"LLM at {self._base_url} streamed a non-string content delta")
        return content or "", choice.get("finish_reason") is not None

    def _redact(self, text: str) -> str:
        return self._connection.redact(text)


def _retryable(status: int) -> bool:
    return status == 429 or status >= 500


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def _rejects_response_format(exc: LLMError) -> bool:
    """Whether a 400 says the server lacks ``response_format``, as opposed to refusing this use of it.

    OpenAI itself answers 400 naming response_format when no message mentions JSON; that is the caller's
    prompt to fix, and falling back would silently turn JSON mode off for good.
    """
    text = exc.message.lower()
    return exc.status in (400, 422) and "response_format" in text and "must contain the word" not in text


def _sse_data(line: str) -> str | None:
    """The payload of an SSE ``data:`` line, or None for blank lines, comments and other fields."""
    if not line.startswith("data:"):
        return None
    return line[len("data:") :].strip()


def _error_detail(response: httpx.Response) -> str:
    """The server's own explanation: OpenAI's ``error.message``, a few common variants, or the raw text."""
    try:
        body = response.json()
    except ValueError:
        return _truncate(response.text.strip()) or response.reason_phrase
    for path in (("error", "message"), ("error",), ("message",), ("detail",)):
        value = _dig(body, *path)
        if isinstance(value, str) and value:
            return _truncate(value)
    return _truncate(json.dumps(body))


def _dig(value: Any, *path: str | int) -> Any:
    for key in path:
        if isinstance(key, int):
            if not isinstance(value, list) or len(value) <= key:
                return None
        elif not isinstance(value, dict):
            return None
        value = value[key] if isinstance(key, int) else value.get(key)
    return value


def _attempts_text(attempts: int) -> str:
    return f" after {attempts} attempts" if attempts > 1 else ""


def _truncate(text: str) -> str:
    return text if len(text) <= MAX_DETAIL_CHARS else text[:MAX_DETAIL_CHARS] + "…"
