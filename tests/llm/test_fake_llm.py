"""The FakeLLM stand-in itself: it must reject what the real API rejects and frame streams like it does."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from standins.llm_server import FakeLLM, running_fake_llm

USER = {"role": "user", "content": "hi"}
_DROP = object()


def _body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "fake-model", "messages": [USER]}
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not _DROP}


async def _post(llm: FakeLLM, body: Any, *, raw: bytes | None = None, **headers: str) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        url = f"{llm.base_url}/chat/completions"
        if raw is not None:
            return await http.post(url, content=raw, headers={"Content-Type": "application/json", **headers})
        return await http.post(url, json=body, headers=headers)


def _assert_openai_error(response: httpx.Response, status: int, param: str | None) -> None:
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert error["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (_body(model=_DROP), "model"),
        (_body(model=""), "model"),
        (_body(messages=_DROP), "messages"),
        (_body(messages=[]), "messages"),
        (_body(messages="hi"), "messages"),
        (_body(messages=[{"content": "hi"}]), "messages[0].role"),
        (_body(messages=[USER, {"role": "robot", "content": "hi"}]), "messages[1].role"),
        (_body(messages=[{"role": "user"}]), "messages[0].content"),
        (_body(messages=[{"role": "user", "content": None}]), "messages[0].content"),
        (
            _body(messages=[{"role": "user", "content": [{"type": "text"}]}]),  # a text part without its text
            "messages[0].content",
        ),
        (_body(temperature=2.5), "temperature"),
        (_body(temperature=-0.1), "temperature"),
        (_body(temperature="0.5"), "temperature"),
        (_body(max_tokens=0), "max_tokens"),
        (_body(response_format={"type": "yaml"}), "response_format.type"),
        (_body(response_format={"type": "json_object"}), "messages"),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
async def test_rejects_bad_requests(fake_llm: FakeLLM, body: dict[str, Any], param: str) -> None:
    fake_llm.queue_reply("never served")
    _assert_openai_error(await _post(fake_llm, body), 400, param)


async def test_rejects_unparseable_json(fake_llm: FakeLLM) -> None:
    _assert_openai_error(await _post(fake_llm, None, raw=b'{"model": '), 400, None)
    _assert_openai_error(await _post(fake_llm, None, raw=b'["not", "an", "object"]'), 400, None)
    assert fake_llm.requests == []


async def test_boundary_temperatures_are_accepted(fake_llm: FakeLLM) -> None:
    for temperature in (0, 2, 1.3):
        fake_llm.queue_reply("ok")
        assert (await _post(fake_llm, _body(temperature=temperature))).status_code == 200


async def test_content_part_arrays_and_tool_call_turns_are_accepted(fake_llm: FakeLLM) -> None:
    """As OpenAI's API accepts them: text parts, and an assistant turn that is only tool calls, answered; as it
    refuses them: a tool call left unanswered, or a tool message that answers no call."""
    fake_llm.queue_reply("fine")
    fake_llm.queue_reply("fine")
    parts = _body(messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    called = {"role": "assistant", "content": None, "tool_calls": [{"id": "t1"}]}
    answer = {"role": "tool", "tool_call_id": "t1", "content": "{}"}
    assert (await _post(fake_llm, parts)).status_code == 200
    assert (await _post(fake_llm, _body(messages=[USER, called, answer]))).status_code == 200
    unanswered = await _post(fake_llm, _body(messages=[USER, called]))
    stray = await _post(fake_llm, _body(messages=[USER, answer]))
    assert unanswered.status_code == 400 and "tool_call_ids did not have response messages" in unanswered.text
    assert stray.status_code == 400 and "must be a response to a preceeding message" in stray.text


async def test_api_key_is_enforced() -> None:
    async with running_fake_llm(api_key="sk-right") as llm:
        llm.set_responder(lambda body: "ok")
        for headers in ({}, {"Authorization": "Bearer sk-wrong"}, {"Authorization": "sk-right"}):
            response = await _post(llm, _body(), **headers)
            assert response.status_code == 401
            assert response.json()["error"]["code"] == "invalid_api_key"
        assert (await _post(llm, _body(), Authorization="Bearer sk-right")).status_code == 200
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"{llm.base_url}/models")).status_code == 401


async def test_default_responder_fails_loudly(fake_llm: FakeLLM) -> None:
    response = await _post(fake_llm, _body())
    assert response.status_code == 500
    assert "no scripted reply" in response.json()["error"]["message"]


async def test_queue_is_fifo_then_responder(fake_llm: FakeLLM) -> None:
    fake_llm.queue_reply("first")
    fake_llm.queue_reply("second")
    fake_llm.set_responder(lambda body: f"echo: {body['messages'][-1]['content']}")
    replies = [(await _post(fake_llm, _body())).json()["choices"][0]["message"]["content"] for _ in range(3)]
    assert replies == ["first", "second", "echo: hi"]
    assert len(fake_llm.requests) == 3
    assert fake_llm.last_request == _body()


async def test_async_responder_and_responder_errors(fake_llm: FakeLLM) -> None:
    async def responder(body: dict[str, Any]) -> str:
        return "async ok"

    fake_llm.set_responder(responder)
    assert (await _post(fake_llm, _body())).json()["choices"][0]["message"]["content"] == "async ok"

    def broken(body: dict[str, Any]) -> str:
        raise KeyError("missing")

    fake_llm.set_responder(broken)
    response = await _post(fake_llm, _body())
    assert response.status_code == 500
    assert "KeyError" in response.json()["error"]["message"]


async def test_completion_shape(fake_llm: FakeLLM) -> None:
    fake_llm.queue_reply("hello there")
    data = (await _post(fake_llm, _body())).json()
    assert data["object"] == "chat.completion"
    assert data["model"] == "fake-model"
    assert data["choices"] == [
        {"index": 0, "message": {"role": "assistant", "content": "hello there"}, "finish_reason": "stop"}
    ]
    assert data["usage"]["completion_tokens"] == 2


async def test_fail_next_then_recovers(fake_llm: FakeLLM) -> None:
    fake_llm.fail_next(2, 503)
    fake_llm.queue_reply("ok")
    statuses = [(await _post(fake_llm, _body())).status_code for _ in range(3)]
    assert statuses == [503, 503, 200]
    assert len(fake_llm.requests) == 3


async def test_reject_response_format_mode() -> None:
    async with running_fake_llm(reject_response_format=True) as llm:
        body = _body(messages=[{"role": "user", "content": "answer in json"}], response_format={"type": "json_object"})
        response = await _post(llm, body)
        assert response.status_code == 400
        assert "response_format" in response.json()["error"]["message"]


async def test_models_route(fake_llm: FakeLLM) -> None:
    async with httpx.AsyncClient() as http:
        data = (await http.get(f"{fake_llm.base_url}/models")).json()
    assert data["object"] == "list"
    assert [m["id"] for m in data["data"]] == ["fake-model"]


async def test_stream_framing() -> None:
    text = "Hello there, friend!"
    async with running_fake_llm(stream_chunk_size=6) as llm:
        llm.queue_reply(text)
        response = await _post(llm, _body(stream=True))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.text.endswith("\n\n")
    events = response.text.split("\n\n")[:-1]
    assert all(event.startswith("data: ") and "\n" not in event for event in events)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(event.removeprefix("data: ")) for event in events[:-1]]
    for chunk in chunks:
        assert chunk["object"] == "chat.completion.chunk"
        assert chunk["model"] == "fake-model"
        assert {"id", "created", "choices"} <= set(chunk)
        assert chunk["id"] == chunks[0]["id"]
        assert chunk["choices"][0]["index"] == 0
    deltas = [chunk["choices"][0]["delta"].get("content", "") for chunk in chunks]
    assert [d for d in deltas if d] == ["Hello ", "there,", " frien", "d!"]
    assert "".join(deltas) == text
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert chunks[-1]["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "stop"}


async def test_latency_and_stop_does_not_wait_for_it() -> None:
    llm = FakeLLM(latency=30.0)
    await llm.start()
    async with httpx.AsyncClient(timeout=0.1) as http:
        with pytest.raises(httpx.ReadTimeout):
            await http.get(f"{llm.base_url}/models")
    await llm.stop()


async def test_scripted_tool_calls_obey_tool_choice_none_unless_told_to_ignore_it(fake_llm: FakeLLM) -> None:
    tool = {"type": "function", "function": {"name": "remember", "parameters": {"type": "object", "properties": {}}}}
    body = _body(stream=True, tools=[tool], tool_choice="none")
    fake_llm.queue_tool_calls([("remember", {"fact": "x"})])
    refused = await _post(fake_llm, body)
    assert refused.status_code == 500 and "does not offer" in refused.json()["error"]["message"]

    fake_llm.queue_tool_calls([("remember", '{"fact": "\\ud800"}')], obey_tool_choice=False)
    streamed = await _post(fake_llm, body)
    events = [json.loads(e[6:]) for e in streamed.text.split("\n\n") if e.startswith("data: {")]
    pieces = "".join(
        p["function"]["arguments"] for e in events for p in e["choices"][0]["delta"].get("tool_calls") or []
    )
    assert streamed.status_code == 200 and pieces == '{"fact": "\\ud800"}', "the arguments' text as scripted"
    assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"
