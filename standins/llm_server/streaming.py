"""Streamed chat completions: a reply cut into ``chat.completion.chunk`` events ending with ``data: [DONE]``, slowed
or broken off mid-reply on request, or chunks a test scripted sent verbatim."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from aiohttp import web

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


class StreamedReplies:
    """How the fake streams its replies, and how many streams started and finished."""

    def _init_streaming(self, stream_chunk_size: int) -> None:
        self.stream_chunk_size = stream_chunk_size
        self.stream_delay = 0.0
        """Seconds between streamed chunks (a slow model)."""
        self.break_stream_after: int | None = None
        """Drop the connection after this many content chunks of the next streams (a crash mid-reply)."""
        self.first_byte_delay = 0.0
        """Seconds between the stream's headers and its first chunk."""
        self.streams_started = 0
        self.streams_finished = 0

    async def _stream(self, request: web.Request, body: dict[str, Any], text: str) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers=SSE_HEADERS)
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
        response = web.StreamResponse(status=200, headers=SSE_HEADERS)
        await response.prepare(request)
        for item in chunks:
            await response.write(f"data: {json.dumps(item)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response
