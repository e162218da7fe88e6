"""A local stand-in for an OpenAI-compatible chat-completions server.

It validates requests strictly enough that a test fails when the bot sends something the real API would
reject, and it never makes a reply up: with nothing queued and no responder set it answers 500 "no scripted
reply", so a test cannot pass by accident.

Order of handling for every request: reading the body, ``latency`` wait, bearer-token check (401), JSON
parsing (400), recording in ``requests`` (chat completions only), an injected ``fail_next`` failure,
validation (400), reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import itertools
import json
import math
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

Responder = Callable[[dict[str, Any]], str | Awaitable[str]]

VALID_ROLES = frozenset({"system", "user", "assistant", "tool"})
RESPONSE_FORMAT_TYPES = frozenset({"text", "json_object", "json_schema"})
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
EMBEDDING_DIMENSIONS = 64
MAX_EMBEDDING_INPUTS = 2048
"""OpenAI's limit on the number of inputs of one embeddings request."""
KNOWN_EMBEDDING_FIELDS = frozenset({"model", "input", "encoding_format", "dimensions", "user"})


class FakeLLMRequestError(Exception):
    """A request the real API would reject; becomes an OpenAI-shaped error response."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        error_type: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.error_type = error_type

    def response(self) -> web.Response:
        body = {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }
        return web.json_response(body, status=self.status)


def _no_scripted_reply(request_json: dict[str, Any]) -> str:
    raise FakeLLMRequestError(
        500,
        "FakeLLM: no scripted reply (call queue_reply() or set_responder() in the test)",
        error_type="server_error",
    )


class FakeLLM:
    """aiohttp server on 127.0.0.1 (free port) serving POST /v1/chat/completions and GET /v1/models."""

    def __init__(
        self,
        *,
        model_ids: tuple[str, ...] = ("fake-model",),
        api_key: str | None = None,
        latency: float = 0.0,
        stream_chunk_size: int = 8,
        reject_response_format: bool = False,
        embedding_models: tuple[str, ...] = ("fake-embed",),
        tolerate_message_extras: bool = False,
    ) -> None:
        """``tolerate_message_extras``: a server that ignores unknown message fields instead of refusing them as
        OpenAI's strict schemas do (unknown top-level fields are refused either way)."""
        self.model_ids = model_ids
        self.tolerate_message_extras = tolerate_message_extras
        self.embedding_models = embedding_models
        self.embedding_requests: list[dict[str, Any]] = []
        """Every embeddings request body that passed the bearer-token check and JSON parsing."""
        self.embedding_latency = 0.0
        """Seconds before an embeddings request is answered (a slow embedding server)."""
        self.concepts: dict[str, str] = {}
        """Word -> concept: words mapped to one concept share a dimension of the deterministic vectors, so texts
        that share no word can be near each other (synonyms), as with a real embedding model."""
        self.api_key = api_key
        self.latency = latency
        self.stream_chunk_size = stream_chunk_size
        self.reject_response_format = reject_response_format
        self.stream_delay = 0.0
        """Seconds between streamed chunks (a slow model)."""
        self.break_stream_after: int | None = None
        """Drop the connection after this many content chunks of the next streams (a crash mid-reply)."""
        self.first_byte_delay = 0.0
        """Seconds between the stream's headers and its first chunk."""
        self._raw_streams: deque[list[dict[str, Any]]] = deque()
        self._tool_calls: deque[tuple[list[tuple[str, dict[str, Any]]], str]] = deque()
        self.streams_started = 0
        self.streams_finished = 0
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._replies: deque[str] = deque()
        self._responder: Responder = _no_scripted_reply
        self._failures: deque[int] = deque()
        self._ids = itertools.count(1)
        self._stopping = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    @property
    def base_url(self) -> str:
        if self._port is None:
            raise RuntimeError("FakeLLM is not started")
        return f"http://127.0.0.1:{self._port}/v1"

    @property
    def last_request(self) -> dict[str, Any]:
        if not self.requests:
            raise AssertionError("FakeLLM received no chat-completions request")
        return self.requests[-1]

    def queue_reply(self, text: str) -> None:
        """Script the next completion; queued replies are served first-in, first-out."""
        self._replies.append(text)

    def queue_chunks(self, chunks: list[dict[str, Any]]) -> None:
        """Script the next stream as these chunk objects, sent verbatim (tool calls, unknown fields...)."""
        self._raw_streams.append(chunks)

    def queue_tool_calls(self, calls: list[tuple[str, dict[str, Any]]], say: str = "") -> None:
        """Script the next streamed answer as calls of the request's tools (name, arguments), after ``say``:
        OpenAI's ``delta.tool_calls`` chunks (the id, type and name first, the arguments in pieces) and
        ``finish_reason: "tool_calls"``. The request must offer each tool (else 400, as a model cannot call what
        it was not given)."""
        self._tool_calls.append((calls, say))

    def set_responder(self, fn: Responder | None) -> None:
        """Compute replies from the request body when the queue is empty; None restores the default (500)."""
        self._responder = fn or _no_scripted_reply

    def fail_next(self, n: int, status: int = 503) -> None:
        """Answer the next ``n`` requests (any route, after the auth check) with ``status``."""
        self._failures.extend([status] * n)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/embeddings", self._embeddings)
        self._stopping.clear()
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            await self._preamble(request)
            body = _json_body(raw)
            self.requests.append(body)
            self.headers.append(dict(request.headers))
            self._inject_failure()
            _validate_chat(
                body,
                reject_response_format=self.reject_response_format,
                tolerate_message_extras=self.tolerate_message_extras,
            )
            if body.get("stream") and self._raw_streams:
                return await self._stream_raw(request, self._raw_streams.popleft())
            if body.get("stream") and self._tool_calls:
                calls, say = self._tool_calls.popleft()
                return await self._stream_raw(request, _tool_call_chunks(body, calls, say, next(self._ids)))
            text = await self._reply_for(body)
        except FakeLLMRequestError as exc:
            return exc.response()
        if body.get("stream"):
            return await self._stream(request, body, text)
        return web.json_response(self._completion(body, text))

    async def _models(self, request: web.Request) -> web.Response:
        try:
            await self._preamble(request)
            self._inject_failure()
        except FakeLLMRequestError as exc:
            return exc.response()
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake-llm"} for m in self.model_ids]
        return web.json_response({"object": "list", "data": data})

    async def _embeddings(self, request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            await self._preamble(request)
            body = _json_body(raw)
            self.embedding_requests.append(body)
            if self.embedding_latency > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), self.embedding_latency)
            self._inject_failure()
            texts = _validate_embeddings(body, self.embedding_models)
        except FakeLLMRequestError as exc:
            return exc.response()
        data = [
            {"object": "embedding", "index": i, "embedding": self.embedding_of(text)} for i, text in enumerate(texts)
        ]
        tokens = sum(len(text.split()) for text in texts)
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "model": body["model"],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    def embedding_of(self, text: str) -> list[float]:
        """A deterministic unit vector: a hashed bag of words (with ``concepts`` mapped to one dimension)."""
        vector = [0.0] * EMBEDDING_DIMENSIONS
        for word in re.findall(r"\w+", text.lower()):
            if len(word) > 3 and word.endswith("s"):
                word = word[:-1]
            word = self.concepts.get(word, word)
            digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
            vector[int.from_bytes(digest, "big") % EMBEDDING_DIMENSIONS] += 1.0
        norm = math.sqrt(sum(x * x for x in vector)) or 1.0
        return [x / norm for x in vector]

    async def _preamble(self, request: web.Request) -> None:
        if self.latency > 0:
            # Latency elapsing is the normal outcome; stop() cuts it short so shutdown never waits on it.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.latency)
        if self.api_key is not None and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            raise FakeLLMRequestError(
                401,
                "Incorrect API key provided. You can find your API key at "
                "https://platform.openai.com/account/api-keys.",
                code="invalid_api_key",
            )

    def _inject_failure(self) -> None:
        if self._failures:
            status = self._failures.popleft()
            raise FakeLLMRequestError(
                status, f"FakeLLM: injected failure ({status})", error_type="server_error", code="injected"
            )

    async def _reply_for(self, body: dict[str, Any]) -> str:
        if self._replies:
            return self._replies.popleft()
        try:
            result = self._responder(body)
            if inspect.isawaitable(result):
                result = await result
        except FakeLLMRequestError:
            raise
        except Exception as exc:
            raise FakeLLMRequestError(
                500, f"FakeLLM: responder raised {type(exc).__name__}: {exc}", error_type="server_error"
            ) from exc
        if not isinstance(result, str):
            raise FakeLLMRequestError(
                500,
                f"FakeLLM: responder returned {type(result).__name__}, not str",
                error_type="server_error",
            )
        return result

    def _completion(self, body: dict[str, Any], text: str) -> dict[str, Any]:
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body["messages"])
        completion_tokens = len(text.split())
        return {
            "id": f"chatcmpl-fake-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    async def _stream(self, request: web.Request, body: dict[str, Any], text: str) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers=_SSE_HEADERS)
        await response.prepare(request)
        chunk_id = f"chatcmpl-fake-{next(self._ids)}"
        created = int(time.time())

        def chunk(delta: dict[str, str], finish_reason: str | None) -> bytes:
            payload = {
                "id": chunk_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": body["model"],
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            }
            return f"data: {json.dumps(payload)}\n\n".encode()

        size = max(1, self.stream_chunk_size)
        self.streams_started += 1
        if self.first_byte_delay:
            await asyncio.sleep(self.first_byte_delay)
        await response.write(chunk({"role": "assistant", "content": ""}, None))
        for n, start in enumerate(range(0, len(text), size)):
            if self.break_stream_after is not None and n >= self.break_stream_after:
                assert request.transport is not None
                request.transport.close()  # mid-reply crash: no terminating chunk, no [DONE]
                return response
            if self.stream_delay:
                await asyncio.sleep(self.stream_delay)
            await response.write(chunk({"content": text[start : start + size]}, None))
        await response.write(chunk({}, "stop"))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        self.streams_finished += 1
        return response

    async def _stream_raw(self, request: web.Request, chunks: list[dict[str, Any]]) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers=_SSE_HEADERS)
        await response.prepare(request)
        for item in chunks:
            await response.write(f"data: {json.dumps(item)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _tool_call_chunks(
    body: dict[str, Any], calls: list[tuple[str, dict[str, Any]]], say: str, number: int
) -> list[dict[str, Any]]:
    offered = {t.get("function", {}).get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
    for name, _ in calls:
        if name not in offered or body.get("tool_choice") == "none":
            raise FakeLLMRequestError(500, f"FakeLLM: scripted a call of {name!r}, which this request does not offer")

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-fake-{number}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }

    chunks = [chunk({"role": "assistant", "content": say or None})]
    for index, (name, arguments) in enumerate(calls):
        text = json.dumps(arguments)
        head = {"index": index, "id": f"call_{number}_{index}", "type": "function"}
        chunks.append(chunk({"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]}))
        for start in range(0, len(text), 7):
            piece = {"index": index, "function": {"arguments": text[start : start + 7]}}
            chunks.append(chunk({"tool_calls": [piece]}))
    chunks.append(chunk({}, "tool_calls"))
    return chunks


def _json_body(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise FakeLLMRequestError(
            400,
            "We could not parse the JSON body of your request. "
            "(HINT: This likely means you aren't using your HTTP library correctly.)",
        ) from exc
    if not isinstance(body, dict):
        raise FakeLLMRequestError(400, "The request body must be a JSON object.")
    return body


KNOWN_CHAT_FIELDS = frozenset(
    {
        "model", "messages", "temperature", "top_p", "max_tokens", "max_completion_tokens", "stream",
        "stream_options", "response_format", "tools", "tool_choice", "parallel_tool_calls", "n", "stop",
        "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "seed", "user",
        "metadata", "store", "modalities", "audio", "prediction", "reasoning_effort", "service_tier",
    }
)  # fmt: skip


def _validate_embeddings(body: dict[str, Any], models: tuple[str, ...]) -> list[str]:
    """The texts of a valid embeddings request; what OpenAI refuses is refused the same way."""
    for name in body:
        if name not in KNOWN_EMBEDDING_FIELDS:
            raise FakeLLMRequestError(400, f"Unrecognized request argument supplied: {name}", param=name)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise FakeLLMRequestError(400, "you must provide a model parameter", param="model")
    if model not in models:
        raise FakeLLMRequestError(
            404, f"The model `{model}` does not exist or you do not have access to it.", code="model_not_found"
        )
    if body.get("encoding_format", "float") != "float":
        raise FakeLLMRequestError(400, "FakeLLM: only encoding_format 'float' is served", param="encoding_format")
    value = body.get("input")
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise FakeLLMRequestError(400, "'input' must be a string or a non-empty array of strings", param="input")
    if len(texts) > MAX_EMBEDDING_INPUTS:
        raise FakeLLMRequestError(400, f"'input' must have at most {MAX_EMBEDDING_INPUTS} items", param="input")
    if any(not t for t in texts):
        raise FakeLLMRequestError(400, "'input' cannot contain an empty string", param="input")
    return texts


MESSAGE_FIELDS = {
    "system": frozenset({"role", "content", "name"}),
    "developer": frozenset({"role", "content", "name"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset({"role", "content", "name", "tool_calls", "function_call", "refusal", "audio"}),
    "tool": frozenset({"role", "content", "tool_call_id"}),
}
"""The fields of each message type of OpenAI's Chat Completions request (``ChatCompletionMessageParam``)."""


def _validate_chat(
    body: dict[str, Any], *, reject_response_format: bool, tolerate_message_extras: bool = False
) -> None:
    for name in body:
        if name not in KNOWN_CHAT_FIELDS:
            # What OpenAI answers for a field it does not know (e.g. ConvoAI's turn_id passed on as is).
            raise FakeLLMRequestError(400, f"Unrecognized request argument supplied: {name}", param=name)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise FakeLLMRequestError(400, "you must provide a model parameter", param="model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise FakeLLMRequestError(400, "'messages' must be a non-empty array of message objects", param="messages")
    for index, message in enumerate(messages):
        _validate_message(index, message, tolerate_extras=tolerate_message_extras)
    _validate_tool_answers(messages)
    _validate_number(body, "temperature", 0.0, 2.0)
    _validate_number(body, "top_p", 0.0, 1.0)
    max_tokens = body.get("max_tokens")
    if max_tokens is not None and (type(max_tokens) is not int or max_tokens < 1):
        raise FakeLLMRequestError(
            400, f"Invalid 'max_tokens': expected an integer >= 1, got {max_tokens!r}", param="max_tokens"
        )
    if "stream" in body and not isinstance(body["stream"], bool):
        raise FakeLLMRequestError(400, "Invalid 'stream': expected a boolean", param="stream")
    if "response_format" in body:
        _validate_response_format(body, reject_response_format)


def _validate_message(index: int, message: Any, *, tolerate_extras: bool = False) -> None:
    if not isinstance(message, dict):
        raise FakeLLMRequestError(400, f"Invalid 'messages[{index}]': expected an object", param=f"messages[{index}]")
    role = message.get("role")
    if role not in VALID_ROLES:
        raise FakeLLMRequestError(
            400,
            f"Invalid value for 'messages[{index}].role': {role!r}. Supported values are: "
            "'system', 'user', 'assistant' and 'tool'.",
            param=f"messages[{index}].role",
        )
    extras = sorted(set(message) - MESSAGE_FIELDS[role])
    if extras and not tolerate_extras:
        # What OpenAI's schema validation answers for a field a message type does not have (e.g. ConvoAI's
        # turn_id, timestamp or metadata passed on as is).
        raise FakeLLMRequestError(
            400,
            f"Additional properties are not allowed ({extras[0]!r} was unexpected) - 'messages.{index}'",
            param=f"messages.[{index}]",
        )
    content = message.get("content")
    if isinstance(content, list) and content and all(_is_text_part(part) for part in content):
        return  # OpenAI's content-part array (text parts)
    if content is None and role == "assistant" and message.get("tool_calls"):
        return
    if not isinstance(content, str):
        raise FakeLLMRequestError(
            400,
            f"Invalid type for 'messages[{index}].content': expected a string, "
            f"got {type(message.get('content')).__name__}",
            param=f"messages[{index}].content",
        )


def _validate_tool_answers(messages: list[dict[str, Any]]) -> None:
    """As OpenAI does: a ``tool`` message answers a call of the assistant message just before the run of tool
    messages it is in, and every such call is answered."""
    open_calls: set[str] = set()
    for index, message in enumerate(messages):
        if message["role"] == "tool":
            if message.get("tool_call_id") not in open_calls:
                raise FakeLLMRequestError(
                    400,
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with "
                    "'tool_calls'.",
                    param=f"messages.[{index}].role",
                )
            open_calls.discard(message["tool_call_id"])
            continue
        if open_calls:
            raise FakeLLMRequestError(
                400,
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                f"'tool_call_id'. The following tool_call_ids did not have response messages: {sorted(open_calls)}",
                param="messages",
            )
        calls = message.get("tool_calls") if message["role"] == "assistant" else None
        open_calls = {c.get("id") for c in calls if isinstance(c, dict)} if isinstance(calls, list) else set()
    if open_calls:
        raise FakeLLMRequestError(
            400,
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            f"'tool_call_id'. The following tool_call_ids did not have response messages: {sorted(open_calls)}",
            param="messages",
        )


def _is_text_part(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)


def _validate_number(body: dict[str, Any], name: str, low: float, high: float) -> None:
    if name not in body:
        return
    value = body[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise FakeLLMRequestError(
            400, f"Invalid '{name}': {value!r} is not a number between {low:g} and {high:g}", param=name
        )


def _validate_response_format(body: dict[str, Any], reject: bool) -> None:
    if reject:
        raise FakeLLMRequestError(
            400, "Unrecognized request argument supplied: response_format", param="response_format"
        )
    response_format = body["response_format"]
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind not in RESPONSE_FORMAT_TYPES:
        raise FakeLLMRequestError(400, f"Invalid 'response_format.type': {kind!r}", param="response_format.type")
    # The real API refuses JSON mode unless the prompt itself mentions JSON.
    if kind == "json_object" and not any("json" in m["content"].lower() for m in body["messages"]):
        raise FakeLLMRequestError(
            400,
            "'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'.",
            param="messages",
        )


@contextlib.asynccontextmanager
async def running_fake_llm(**kwargs: Any) -> AsyncIterator[FakeLLM]:
    """``async with running_fake_llm(api_key="k") as llm:`` starts a FakeLLM and always stops it."""
    llm = FakeLLM(**kwargs)
    await llm.start()
    try:
        yield llm
    finally:
        await llm.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m standins.llm_server [--api-key KEY] [--model ID]``: serves the fake on a free port of
    127.0.0.1 until SIGTERM or SIGINT and prints ``fake-llm ready <base URL>`` (what ``llm.base_url`` takes). On its
    own nothing queues replies, so chat completions answer 500 "no scripted reply"; models and embeddings work."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(prog="python -m standins.llm_server", description=main.__doc__)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--model", action="append", default=None, help="a model id to list (repeatable)")
    args = parser.parse_args(argv)

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        async with running_fake_llm(api_key=args.api_key, model_ids=tuple(args.model or ("fake-model",))) as llm:
            print(f"fake-llm ready {llm.base_url}", flush=True)
            await stop.wait()

    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
