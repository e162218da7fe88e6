"""LLMClient against the FakeLLM server (and httpx.MockTransport for replies no honest server sends)."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from aiohttp import web

from bot.llm import LLMBadResponse, LLMClient, LLMError, LLMUnavailable
from bot.llm import connection as llm_connection
from standins.llm_server import FakeLLM, running_fake_llm

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello?"}]
JSON_MESSAGES = [{"role": "user", "content": "Reply with a JSON object."}]
SECRET = "sk-test-very-secret-key"


class RecordingSleep:
    """Stands in for asyncio.sleep so retry tests take no wall time and can inspect the backoff."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


@pytest.fixture
def sleep() -> RecordingSleep:
    return RecordingSleep()


@pytest.fixture
async def client(fake_llm: FakeLLM, sleep: RecordingSleep) -> AsyncIterator[LLMClient]:
    async with LLMClient(base_url=fake_llm.base_url, model="fake-model", sleep=sleep) as llm:
        yield llm


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_complete_sends_the_request_and_returns_the_reply(fake_llm: FakeLLM, client: LLMClient) -> None:
    fake_llm.queue_reply("Hi!")
    assert await client.complete(MESSAGES) == "Hi!"
    assert fake_llm.requests == [{"model": "fake-model", "messages": MESSAGES, "temperature": 0.2}]
    assert "authorization" not in {k.lower() for k in fake_llm.headers[0]}


async def test_complete_passes_options(fake_llm: FakeLLM, client: LLMClient) -> None:
    fake_llm.queue_reply("{}")
    await client.complete(JSON_MESSAGES, temperature=0.0, max_tokens=64, json_mode=True)
    assert fake_llm.last_request == {
        "model": "fake-model",
        "messages": JSON_MESSAGES,
        "temperature": 0.0,
        "max_tokens": 64,
        "response_format": {"type": "json_object"},
    }


async def test_json_mode_falls_back_when_response_format_is_unsupported(sleep: RecordingSleep) -> None:
    async with running_fake_llm(reject_response_format=True) as fake:
        fake.set_responder(lambda body: '{"ok": true}')
        async with LLMClient(base_url=fake.base_url, model="fake-model", sleep=sleep) as client:
            assert await client.complete(JSON_MESSAGES, json_mode=True) == '{"ok": true}'
            assert [("response_format" in r) for r in fake.requests] == [True, False]
            assert await client.complete(JSON_MESSAGES, json_mode=True) == '{"ok": true}'
            assert len(fake.requests) == 3
            assert "response_format" not in fake.requests[2]
    assert sleep.delays == []


async def test_json_mode_without_json_in_the_prompt_is_the_callers_error(fake_llm: FakeLLM, client: LLMClient) -> None:
    fake_llm.set_responder(lambda body: "{}")
    with pytest.raises(LLMError, match="must contain the word 'json'") as info:
        await client.complete(MESSAGES, json_mode=True)
    assert info.value.status == 400
    assert len(fake_llm.requests) == 1
    await client.complete(JSON_MESSAGES, json_mode=True)
    assert fake_llm.last_request["response_format"] == {"type": "json_object"}


async def test_other_400s_are_not_retried_or_retried_without_response_format(
    fake_llm: FakeLLM, client: LLMClient, sleep: RecordingSleep
) -> None:
    with pytest.raises(LLMError) as info:
        await client.complete(MESSAGES, temperature=3.0, json_mode=True)
    assert type(info.value) is LLMError
    assert info.value.status == 400
    assert fake_llm.base_url in str(info.value)
    assert "temperature" in str(info.value)
    assert len(fake_llm.requests) == 1
    assert sleep.delays == []


async def test_stream_yields_content_deltas(fake_llm: FakeLLM, client: LLMClient) -> None:
    fake_llm.stream_chunk_size = 5
    fake_llm.queue_reply("Streaming works fine.")
    deltas = [delta async for delta in client.stream(MESSAGES, max_tokens=50)]
    assert deltas == ["Strea", "ming ", "works", " fine", "."]
    assert fake_llm.last_request == {
        "model": "fake-model",
        "messages": MESSAGES,
        "temperature": 0.7,
        "max_tokens": 50,
        "stream": True,
    }


async def test_stream_offers_tools_and_hands_every_chunk_over_yielding_only_content(
    fake_llm: FakeLLM, client: LLMClient
) -> None:
    tool = {"type": "function", "function": {"name": "remember", "parameters": {"type": "object"}}}
    fake_llm.queue_tool_calls([("remember", {"fact": "I like tea"})], say="One moment.")
    chunks: list[dict[str, Any]] = []
    deltas = [d async for d in client.stream(MESSAGES, tools=[tool], tool_choice="auto", on_chunk=chunks.append)]
    assert deltas == ["One moment."]
    assert fake_llm.last_request["tools"] == [tool] and fake_llm.last_request["tool_choice"] == "auto"
    arguments = "".join(
        call["function"].get("arguments") or ""
        for c in chunks
        for call in c["choices"][0]["delta"].get("tool_calls") or []
    )
    assert json.loads(arguments) == {"fact": "I like tea"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


async def test_stream_retries_before_the_first_byte(
    fake_llm: FakeLLM, client: LLMClient, sleep: RecordingSleep
) -> None:
    fake_llm.fail_next(1, 502)
    fake_llm.queue_reply("ok")
    assert [d async for d in client.stream(MESSAGES)] == ["ok"]
    assert len(sleep.delays) == 1


async def test_stream_maps_errors(fake_llm: FakeLLM, client: LLMClient) -> None:
    with pytest.raises(LLMUnavailable, match="no scripted reply") as info:
        async for _ in client.stream(MESSAGES):
            pass
    assert info.value.status == 500


async def test_stream_can_be_abandoned_early(fake_llm: FakeLLM, client: LLMClient) -> None:
    fake_llm.stream_chunk_size = 1
    fake_llm.queue_reply("abcdef")
    fake_llm.queue_reply("next")
    async with contextlib.aclosing(client.stream(MESSAGES)) as deltas:
        async for delta in deltas:
            assert delta == "a"
            break
    assert await client.complete(MESSAGES) == "next"


async def test_retries_on_503_then_succeeds(fake_llm: FakeLLM, client: LLMClient, sleep: RecordingSleep) -> None:
    fake_llm.fail_next(2, 503)
    fake_llm.queue_reply("finally")
    assert await client.complete(MESSAGES) == "finally"
    assert len(fake_llm.requests) == 3
    assert len(sleep.delays) == 2
    assert 0.3 <= sleep.delays[0] <= 0.6
    assert 0.6 <= sleep.delays[1] <= 1.2


async def test_retries_on_429(fake_llm: FakeLLM, client: LLMClient, sleep: RecordingSleep) -> None:
    fake_llm.fail_next(1, 429)
    fake_llm.queue_reply("ok")
    assert await client.complete(MESSAGES) == "ok"
    assert len(sleep.delays) == 1


async def test_retries_are_bounded(fake_llm: FakeLLM, sleep: RecordingSleep) -> None:
    fake_llm.fail_next(10, 503)
    async with LLMClient(base_url=fake_llm.base_url, model="fake-model", max_retries=3, sleep=sleep) as client:
        with pytest.raises(LLMUnavailable) as info:
            await client.complete(MESSAGES)
    assert info.value.status == 503
    assert "after 4 attempts" in str(info.value)
    assert len(fake_llm.requests) == 4
    assert len(sleep.delays) == 3


async def test_max_retries_zero_means_one_attempt(fake_llm: FakeLLM, sleep: RecordingSleep) -> None:
    fake_llm.fail_next(1, 500)
    async with LLMClient(base_url=fake_llm.base_url, model="fake-model", max_retries=0, sleep=sleep) as client:
        with pytest.raises(LLMUnavailable):
            await client.complete(MESSAGES)
    assert len(fake_llm.requests) == 1
    assert sleep.delays == []


async def test_401_names_the_api_key_setting_and_never_the_key(
    sleep: RecordingSleep, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with (
        running_fake_llm(api_key="sk-the-right-one") as fake,
        LLMClient(base_url=fake.base_url, model="fake-model", api_key=SECRET, sleep=sleep) as client,
    ):
        with pytest.raises(LLMError) as info:
            await client.complete(MESSAGES)
        assert SECRET not in repr(client)
    assert not isinstance(info.value, LLMUnavailable)
    assert info.value.status == 401
    assert "LLM_API_KEY" in str(info.value)
    assert f"LLM at {fake.base_url} answered 401" in str(info.value)
    assert sleep.delays == []
    assert SECRET not in caplog.text


async def test_bearer_key_is_sent(sleep: RecordingSleep) -> None:
    async with running_fake_llm(api_key=SECRET) as fake:
        fake.queue_reply("authorised")
        async with LLMClient(base_url=fake.base_url, model="fake-model", api_key=SECRET, sleep=sleep) as client:
            assert await client.complete(MESSAGES) == "authorised"
            await client.ping()
        assert fake.headers[0]["Authorization"] == f"Bearer {SECRET}"


async def test_echoed_key_is_masked_in_errors(sleep: RecordingSleep) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"error": {"message": f"bad key {SECRET}"}})

    transport = httpx.MockTransport(handler)
    async with LLMClient(
        base_url="http://llm.test/v1", model="m", api_key=SECRET, transport=transport, sleep=sleep
    ) as client:
        with pytest.raises(LLMError) as info:
            await client.complete(MESSAGES)
    assert SECRET not in str(info.value)
    assert "***" in str(info.value)


async def test_timeout_is_unavailable() -> None:
    async with running_fake_llm(latency=5.0) as fake:
        fake.queue_reply("too late")
        async with LLMClient(base_url=fake.base_url, model="fake-model", timeout=0.1, max_retries=0) as client:
            with pytest.raises(LLMUnavailable, match=r"did not answer within 0\.1 s") as info:
                await client.complete(MESSAGES)
    assert info.value.status is None


async def test_timeouts_are_retried(sleep: RecordingSleep) -> None:
    async with (
        running_fake_llm(latency=5.0) as fake,
        LLMClient(base_url=fake.base_url, model="fake-model", timeout=0.05, max_retries=1, sleep=sleep) as client,
    ):
        with pytest.raises(LLMUnavailable, match="after 2 attempts"):
            await client.complete(MESSAGES)
    assert len(sleep.delays) == 1


async def test_connection_refused_names_the_base_url_setting(sleep: RecordingSleep) -> None:
    base_url = f"http://127.0.0.1:{_closed_port()}/v1"
    async with LLMClient(base_url=base_url, model="m", max_retries=1, sleep=sleep) as client:
        with pytest.raises(LLMUnavailable, match="LLM_BASE_URL") as info:
            await client.complete(MESSAGES)
    assert base_url in str(info.value)
    assert len(sleep.delays) == 1


async def test_ping(fake_llm: FakeLLM, client: LLMClient) -> None:
    await client.ping()
    assert await client.models() == ["fake-model"]
    assert fake_llm.requests == []


async def test_ping_with_wrong_path_names_the_base_url_setting(fake_llm: FakeLLM, sleep: RecordingSleep) -> None:
    base_url = fake_llm.base_url.removesuffix("/v1")
    async with LLMClient(base_url=base_url, model="m", sleep=sleep) as client:
        with pytest.raises(LLMError, match="LLM_BASE_URL") as info:
            await client.ping()
    assert info.value.status == 404


async def test_ping_with_wrong_key_names_the_api_key_setting(sleep: RecordingSleep) -> None:
    async with (
        running_fake_llm(api_key="sk-right") as fake,
        LLMClient(base_url=fake.base_url, model="m", api_key="sk-wrong", sleep=sleep) as client,
    ):
        with pytest.raises(LLMError, match="LLM_API_KEY"):
            await client.ping()


async def test_ping_unreachable_is_unavailable(sleep: RecordingSleep) -> None:
    async with LLMClient(
        base_url=f"http://127.0.0.1:{_closed_port()}/v1", model="m", max_retries=0, sleep=sleep
    ) as client:
        with pytest.raises(LLMUnavailable, match="could not connect"):
            await client.ping()


def _mock_client(handler: Any, sleep: RecordingSleep) -> LLMClient:
    return LLMClient(base_url="http://llm.test/v1", model="m", transport=httpx.MockTransport(handler), sleep=sleep)


@pytest.mark.parametrize(
    "body",
    [
        b"<html>not json</html>",
        json.dumps({"choices": []}).encode(),
        json.dumps({"choices": [{"message": {"content": None}}]}).encode(),
        json.dumps({"error": {"message": "proxy failed"}}).encode(),
    ],
)
async def test_unparseable_replies_are_bad_responses(body: bytes, sleep: RecordingSleep) -> None:
    async with _mock_client(lambda request: httpx.Response(200, content=body), sleep) as client:
        with pytest.raises(LLMBadResponse):
            await client.complete(MESSAGES)


async def test_models_that_are_not_a_list_are_bad_responses(sleep: RecordingSleep) -> None:
    async with _mock_client(lambda request: httpx.Response(200, json={"models": "x"}), sleep) as client:
        with pytest.raises(LLMBadResponse, match="LLM_BASE_URL"):
            await client.ping()


async def test_stream_accepts_a_plain_completion(sleep: RecordingSleep) -> None:
    reply = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "whole"}}]}
    async with _mock_client(lambda request: httpx.Response(200, json=reply), sleep) as client:
        assert [d async for d in client.stream(MESSAGES)] == ["whole"]


async def test_stream_tolerates_sse_noise_and_rejects_truncation(sleep: RecordingSleep) -> None:
    def chunk(content: str | None, finish: str | None = None) -> str:
        delta = {} if content is None else {"content": content}
        return "data: " + json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    complete_stream = "\n\n".join([": keep-alive", chunk("a"), "event: ping", chunk("b"), chunk(None, "stop")])
    truncated_stream = "\n\n".join([chunk("a"), chunk("b")])
    sse = {"content-type": "text/event-stream"}
    async with _mock_client(lambda r: httpx.Response(200, text=complete_stream, headers=sse), sleep) as client:
        assert [d async for d in client.stream(MESSAGES)] == ["a", "b"]
    async with _mock_client(lambda r: httpx.Response(200, text=truncated_stream, headers=sse), sleep) as client:
        with pytest.raises(LLMUnavailable, match="ended before"):
            async for _ in client.stream(MESSAGES):
                pass


async def test_404_naming_the_model_points_at_the_model_setting(sleep: RecordingSleep) -> None:
    body = {"error": {"message": "The model `m` does not exist", "code": "model_not_found"}}
    async with _mock_client(lambda request: httpx.Response(404, json=body), sleep) as client:
        with pytest.raises(LLMError, match="LLM_MODEL"):
            await client.complete(MESSAGES)


async def test_retry_after_is_honoured(sleep: RecordingSleep) -> None:
    answers = iter([httpx.Response(429, headers={"Retry-After": "7"}), httpx.Response(200, json=_reply("ok"))])
    async with _mock_client(lambda request: next(answers), sleep) as client:
        assert await client.complete(MESSAGES) == "ok"
    assert sleep.delays == [7.0]


def _reply(text: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}


def test_rejects_base_url_without_scheme() -> None:
    with pytest.raises(ValueError, match="LLM_BASE_URL"):
        LLMClient(base_url="localhost:8000/v1", model="m")


async def _relayed(client: LLMClient, body: dict[str, Any]) -> tuple[str, bytes]:
    stream = await client.open_stream(body)
    try:
        return stream.content_type, b"".join([chunk async for chunk in stream.chunks()])
    finally:
        await stream.aclose()


async def test_open_stream_relays_the_raw_stream_and_reuses_its_connection(
    fake_llm: FakeLLM, sleep: RecordingSleep
) -> None:
    """The voice relay's path (aiohttp): the body as given plus the model, the key, the bytes unchanged, and one
    kept-alive connection for consecutive turns."""
    fake_llm.queue_reply("first")
    fake_llm.queue_reply("second")
    body = {"messages": MESSAGES, "stream": True, "temperature": 0.5, "max_tokens": 40}
    async with LLMClient(base_url=fake_llm.base_url, model="fake-model", api_key=SECRET, sleep=sleep) as client:
        content_type, raw = await _relayed(client, body)
        await _relayed(client, body)
        session = client._connection.streams()
        assert session.connector is not None and len(session.connector._conns) == 1, "one connection, reused"
    assert content_type.startswith("text/event-stream")
    assert raw.endswith(b"data: [DONE]\n\n") and b'"content":"first"' in raw.replace(b" ", b"")
    assert fake_llm.requests[0] == {**body, "model": "fake-model"}
    assert fake_llm.headers[0]["Authorization"] == f"Bearer {SECRET}"


async def test_open_stream_retries_only_as_asked_and_maps_errors_like_every_request(
    fake_llm: FakeLLM, sleep: RecordingSleep, caplog: pytest.LogCaptureFixture
) -> None:
    body = {"messages": MESSAGES, "stream": True}
    async with LLMClient(base_url=fake_llm.base_url, model="fake-model", sleep=sleep) as client:
        fake_llm.fail_next(1, 503)
        fake_llm.queue_reply("after one retry")
        stream = await client.open_stream(body, max_retries=1)
        await stream.aclose()
        assert len(sleep.delays) == 1
        fake_llm.fail_next(1, 503)
        with pytest.raises(LLMUnavailable) as unavailable:
            await client.open_stream(body)  # max_retries=0: one attempt
    assert unavailable.value.status == 503 and len(sleep.delays) == 1
    sleep.delays.clear()

    caplog.set_level(logging.DEBUG)
    async with (
        running_fake_llm(api_key="sk-the-right-one") as fake,
        LLMClient(base_url=fake.base_url, model="fake-model", api_key=SECRET, sleep=sleep) as client,
    ):
        with pytest.raises(LLMError) as refused:
            await client.open_stream(body, max_retries=2)
    assert not isinstance(refused.value, LLMUnavailable) and refused.value.status == 401
    assert "LLM_API_KEY" in str(refused.value) and SECRET not in caplog.text
    assert sleep.delays == [], "a 401 is not retried"

    base_url = f"http://127.0.0.1:{_closed_port()}/v1"
    async with LLMClient(base_url=base_url, model="m", sleep=sleep) as client:
        with pytest.raises(LLMUnavailable, match="LLM_BASE_URL") as down:
            await client.open_stream(body, max_retries=1)
    assert base_url in str(down.value) and "after 2 attempts" in str(down.value)
    assert len(sleep.delays) == 1


@contextlib.asynccontextmanager
async def forward_proxy() -> AsyncIterator[list[str]]:
    """An HTTP forward proxy on 127.0.0.1 that answers every request itself with a short SSE reply; yields the
    request targets it was sent (absolute URLs, as a client sends them to a proxy), its URL set in HTTP_PROXY."""
    targets: list[str] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        targets.append(str(request.url))
        await request.read()
        body = b'data: {"choices":[{"index":0,"delta":{"content":"via proxy"}}]}\n\ndata: [DONE]\n\n'
        return web.Response(body=body, content_type="text/event-stream")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
            env.delenv("NO_PROXY", raising=False)
            env.delenv("no_proxy", raising=False)
            yield targets
    finally:
        await runner.cleanup()


async def test_open_stream_goes_through_the_environments_proxy_read_once_per_client(
    fake_llm: FakeLLM, sleep: RecordingSleep, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator's HTTP(S)_PROXY applies to the voice relay's requests as to every other request of the client,
    and NO_PROXY exempts a host; the environment is read once per client, not before every voice turn."""
    lookups: list[str] = []
    real_lookup = llm_connection.get_env_proxy_for_url

    def counted(url: Any) -> Any:
        lookups.append(str(url))
        return real_lookup(url)

    monkeypatch.setattr(llm_connection, "get_env_proxy_for_url", counted)
    body = {"messages": MESSAGES, "stream": True}
    async with forward_proxy() as targets:
        async with LLMClient(base_url="http://llm.example.invalid/v1", model="m", sleep=sleep) as client:
            for _ in range(3):
                _, raw = await _relayed(client, body)
                assert b"via proxy" in raw
        assert targets == ["http://llm.example.invalid/v1/chat/completions"] * 3
        assert len(lookups) == 1

        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        fake_llm.queue_reply("straight")
        async with LLMClient(base_url=fake_llm.base_url, model="m", sleep=sleep) as client:
            _, raw = await _relayed(client, body)
        assert b"straight" in raw and len(targets) == 3
