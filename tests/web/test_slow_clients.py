"""Slowloris on loopback: clients that send their headers and then dribble or stall the body, or never finish their
headers, are cut off within the read timeout (issue 33 item 12). The timeout is injected short to keep this fast;
the bot runs with ``bot.web.limits.READ_TIMEOUT_SECONDS``."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator

import pytest

from bot.web.llm_backend import LLMSession, RelayStream, unauthorized
from bot.web.llm_route import LIVE_RECALL_KEY
from bot.web.server import WebServer
from tests.web.conftest import PRODUCTION_SDK_URL, PUBLIC_URL
from tests.web.fake_backend import FakeCallPageBackend, sign_webhook

READ_TIMEOUT = 0.5
CUT_OFF_WITHIN = 3.0  # the deadline, plus room for a loaded machine
LLM_KEY = "call-key"


class SlowReply:
    content_type = "text/event-stream"

    def __init__(self, pieces: int, pause: float) -> None:
        self.pieces, self.pause = pieces, pause

    async def events(self) -> AsyncGenerator[bytes]:
        for n in range(self.pieces):
            await asyncio.sleep(self.pause)
            yield f"data: {json.dumps({'n': n})}\n\n".encode()
        yield b"data: [DONE]\n\n"

    async def close(self) -> None:
        return None


class Session:
    def __init__(self) -> None:
        self.turns: list[object] = []

    async def start_turn(self, request: object) -> RelayStream:
        self.turns.append(request)
        return SlowReply(pieces=4, pause=READ_TIMEOUT / 2)  # streams for twice the read timeout


class LiveRecall:
    """The LLM route's backend: one call's key, whose turns are recorded and answered slowly."""

    def __init__(self) -> None:
        self.session = Session()

    async def authorize(self, api_key: str | None) -> LLMSession:
        if api_key != LLM_KEY:
            raise unauthorized()
        return self.session


@pytest.fixture
async def server(fake_backend: FakeCallPageBackend) -> AsyncIterator[WebServer]:
    web = WebServer(
        fake_backend,
        host="127.0.0.1",
        port=0,
        sdk_url=PRODUCTION_SDK_URL,
        public_url=PUBLIC_URL,
        live_recall=LiveRecall(),
        read_timeout=READ_TIMEOUT,
        shutdown_timeout=0.5,
    )
    async with web:
        yield web


async def stall(server: WebServer, head: bytes, body_start: bytes = b"") -> tuple[bytes, float]:
    """Send ``head`` and the first bytes of the body, then nothing: what the server answered before it closed the
    connection, and how long after the headers that was."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(head + body_start)
    await writer.drain()
    began = time.monotonic()
    try:
        answer = await asyncio.wait_for(reader.read(), timeout=30)
    finally:
        writer.close()
    return answer, time.monotonic() - began


def post(path: str, length: int, **headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {length}", *map(": ".join, headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def status_and_body(answer: bytes) -> tuple[int, dict[str, object]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


async def test_a_webhook_whose_body_stalls_is_answered_408_and_cut_off(
    server: WebServer, fake_backend: FakeCallPageBackend
) -> None:
    answer, took = await stall(server, post("/agora/webhook", 1000, **{"Content-Type": "application/json"}), b'{"no')
    assert took < CUT_OFF_WITHIN
    assert status_and_body(answer) == (408, {"error": "The request body did not arrive in time."})
    assert b"Connection: close" in answer
    assert "receive_webhook" not in fake_backend.methods()


async def test_the_llm_route_cuts_off_a_stalled_body_with_an_openai_error(server: WebServer) -> None:
    head = post("/llm/v1/chat/completions", 5000, Authorization=f"Bearer {LLM_KEY}")
    answer, took = await stall(server, head, b'{"messages": [')
    status, body = status_and_body(answer)
    assert took < CUT_OFF_WITHIN and status == 408
    assert body["error"] == {
        "message": "The request body did not arrive in time.",
        "type": "invalid_request_error",
        "param": None,
        "code": "timeout",
    }
    live = server.app[LIVE_RECALL_KEY]
    assert isinstance(live, LiveRecall) and live.session.turns == []


async def test_a_hangup_whose_body_stalls_is_cut_off(server: WebServer, fake_backend: FakeCallPageBackend) -> None:
    token = fake_backend.add_call()
    answer, took = await stall(server, post(f"/api/calls/{token}/hangup", 100), b"bea")
    assert took < CUT_OFF_WITHIN and status_and_body(answer)[0] == 408
    assert fake_backend.calls[token].state == "active" and fake_backend.hangups == []


async def test_headers_that_never_finish_are_cut_off(server: WebServer) -> None:
    answer, took = await stall(server, b"POST /agora/webhook HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le")
    assert took < CUT_OFF_WITHIN and answer == b""


async def test_two_hundred_stalled_connections_are_all_cut_off(server: WebServer) -> None:
    head = post("/agora/webhook", 1000, **{"Content-Type": "application/json"})
    results = await asyncio.gather(
        *(stall(server, head, b"{") for _ in range(100)), *(stall(server, head[:20]) for _ in range(100))
    )
    assert max(took for _answer, took in results) < CUT_OFF_WITHIN + 2


async def test_a_body_sent_slowly_but_in_time_and_a_reply_streamed_for_longer_go_through(
    server: WebServer, fake_backend: FakeCallPageBackend
) -> None:
    body = b'{"eventType": 101, "payload": {}}'
    head = post("/agora/webhook", len(body), **{"Content-Type": "application/json", **sign_webhook(body)})
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(head + body[:10])
    await asyncio.sleep(READ_TIMEOUT / 3)
    writer.write(body[10:])
    response = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
    writer.close()
    assert response.startswith(b"HTTP/1.1 200") and fake_backend.webhooks[0][0] == body

    turn = json.dumps({"messages": [{"role": "user", "content": "hi"}], "stream": True}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(
        post("/llm/v1/chat/completions", len(turn), Authorization=f"Bearer {LLM_KEY}", Connection="close") + turn
    )
    began = time.monotonic()
    streamed = await asyncio.wait_for(reader.read(), timeout=10)  # the chunked reply, then the close it asked for
    writer.close()
    assert time.monotonic() - began >= READ_TIMEOUT and streamed.startswith(b"HTTP/1.1 200")
    assert b'data: {"n": 3}' in streamed and b"data: [DONE]" in streamed
