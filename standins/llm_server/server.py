"""The fake LLM server itself: its routes, the scripted replies and injected failures, and a chat completion answered
whole or handed to streaming."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from standins.llm_server.chat_validation import validate_chat
from standins.llm_server.embeddings import EmbeddingsRoute
from standins.llm_server.errors import FakeLLMRequestError, json_body, no_scripted_reply
from standins.llm_server.streaming import StreamedReplies
from standins.llm_server.tool_calls import tool_call_chunks

Responder = Callable[[dict[str, Any]], str | Awaitable[str]]


class FakeLLM(EmbeddingsRoute, StreamedReplies):
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
        self.api_key = api_key
        self.latency = latency
        self.reject_response_format = reject_response_format
        self._raw_streams: deque[list[dict[str, Any]]] = deque()
        self._tool_calls: deque[tuple[list[tuple[str, dict[str, Any] | str]], str, bool]] = deque()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._replies: deque[str] = deque()
        self._responder: Responder = no_scripted_reply
        self._failures: deque[int] = deque()
        self._ids = itertools.count(1)
        self._stopping = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._init_embeddings(embedding_models)
        self._init_streaming(stream_chunk_size)

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

    def queue_tool_calls(
        self, calls: list[tuple[str, dict[str, Any] | str]], say: str = "", *, obey_tool_choice: bool = True
    ) -> None:
        """Script the next streamed answer as calls of the request's tools (name, arguments: an object, or the
        arguments' text as the model wrote it), after ``say``: OpenAI's ``delta.tool_calls`` chunks (the id, type
        and name first, the arguments in pieces) and ``finish_reason: "tool_calls"``. The request must offer each
        tool and allow calls (else 500, as a model cannot call what it was not given);
        ``obey_tool_choice=False`` scripts a model that calls them though the request says
        ``tool_choice: "none"``."""
        self._tool_calls.append((calls, say, obey_tool_choice))

    def set_responder(self, fn: Responder | None) -> None:
        """Compute replies from the request body when the queue is empty; None restores the default (500)."""
        self._responder = fn or no_scripted_reply

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
            body = json_body(raw)
            self.requests.append(body)
            self.headers.append(dict(request.headers))
            self._inject_failure()
            validate_chat(
                body,
                reject_response_format=self.reject_response_format,
                tolerate_message_extras=self.tolerate_message_extras,
            )
            if body.get("stream") and self._raw_streams:
                return await self._stream_raw(request, self._raw_streams.popleft())
            if body.get("stream") and self._tool_calls:
                calls, say, obey = self._tool_calls.popleft()
                chunks = tool_call_chunks(body, calls, say, next(self._ids), obey_tool_choice=obey)
                return await self._stream_raw(request, chunks)
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
