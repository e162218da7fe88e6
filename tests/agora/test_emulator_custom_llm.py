"""An agent with a custom LLM behaves like ConvoAI: the documented request per utterance, a strict SSE reader,
the reply recorded in its history, and interruption closing the stream mid-reply."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from aiohttp import web

from standins.agora_emulator import AgoraEmulator
from tests.agora.test_emulator import BASIC, join_body


def chunk(content: str | None = None, finish: str | None = None) -> bytes:
    delta = {} if content is None else {"content": content}
    body = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(body)}\n\n".encode()


class ScriptedLLM:
    """A loopback chat-completions server answering each request with the next scripted list of raw byte pieces."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.scripts: list[list[bytes]] = []
        self.status = 200
        self.delay = 0.0
        self.closed_early = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/v1/chat/completions"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(await request.json())
        self.headers.append(dict(request.headers))
        if self.status != 200:
            return web.json_response({"error": {"message": "nope", "type": "server_error"}}, status=self.status)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            for piece in self.scripts.pop(0):
                await response.write(piece)
                await asyncio.sleep(self.delay)
            await response.write_eof()
        except ConnectionResetError:
            self.closed_early.set()
        return response


@pytest.fixture
async def llm() -> AsyncIterator[ScriptedLLM]:
    server = ScriptedLLM()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def custom_agent(emulator: AgoraEmulator, llm: ScriptedLLM, *, max_history: int = 4) -> str:
    body = join_body(emulator)
    body["properties"]["llm"].update(
        url=llm.url,
        api_key="per-call-key",
        vendor="custom",
        style="openai",
        max_history=max_history,
        params={"max_tokens": 100},
        failure_message="Sorry, say that again?",
    )
    async with httpx.AsyncClient(base_url=emulator.project_url, headers={"Authorization": BASIC}) as http:
        response = await http.post("/join", json=body)
    assert response.status_code == 200, response.text
    agent_id = str(response.json()["agent_id"])
    emulator.user_joined(agent_id)
    return agent_id


async def test_each_utterance_posts_the_documented_request(agora_emulator: AgoraEmulator, llm: ScriptedLLM) -> None:
    agent_id = await custom_agent(agora_emulator, llm, max_history=4)
    for n in range(3):
        llm.scripts.append([chunk(f"Reply {n}."), chunk(finish="stop"), b"data: [DONE]\n\n"])
        turn = await agora_emulator.user_says(agent_id, f"Question {n}?")
        assert turn.outcome == "ok" and turn.reply == f"Reply {n}."
    request = llm.requests[-1]
    uid = agora_emulator.agent(agent_id).remote_rtc_uids[0]
    stamps = [m.get("timestamp") for m in request["messages"]]
    assert all(isinstance(t, int) for t in stamps[1:]) and stamps[1:] == sorted(stamps[1:])
    assert [{k: v for k, v in m.items() if k != "timestamp"} for m in request["messages"]] == [
        {"role": "system", "content": "You are a helpful voice assistant."},
        {"role": "assistant", "content": "Reply 0.", "turn_id": 1, "metadata": {"source": "llm"}},
        {"role": "user", "content": "Question 1?", "turn_id": 2, "metadata": {"source": "asr", "user": uid}},
        {"role": "assistant", "content": "Reply 1.", "turn_id": 2, "metadata": {"source": "llm"}},
        {"role": "user", "content": "Question 2?", "turn_id": 3, "metadata": {"source": "asr", "user": uid}},
    ], "with vendor custom every short-term-memory field is sent (spec 4.11)"
    assert len(request["messages"]) == 1 + 4, "system messages, then the max_history window ending with the new line"
    assert request["stream"] is True and request["max_tokens"] == 100
    assert request["turn_id"] == 3 and isinstance(request["timestamp"], int)
    assert request["interruptable"] is True and "model" in request and "context" not in request
    agora_emulator.llm_context = {"presence": {"user123": "online"}}
    llm.scripts.append([chunk("Reply 3."), chunk(finish="stop"), b"data: [DONE]\n\n"])
    await agora_emulator.user_says(agent_id, "Question 3?")
    assert llm.requests[-1]["context"] == {"presence": {"user123": "online"}}

    async with httpx.AsyncClient(base_url=agora_emulator.project_url, headers={"Authorization": BASIC}) as http:
        history = (await http.get(f"/agents/{agent_id}/history")).json()["contents"]
    reply = {**history[-1], "role": "assistant", "content": "Reply 3.", "metadata": {"source": "llm"}}
    assert history == [*llm.requests[-1]["messages"][2:], reply], "the history holds what the requests sent"
    assert llm.headers[-1]["Authorization"] == "Bearer per-call-key"
    kept = [(m.role, m.content, m.source) for m in agora_emulator.agent(agent_id).conversation]
    assert kept[-4:-2] == [("user", "Question 2?", "asr"), ("assistant", "Reply 2.", "llm")]


async def test_without_vendor_custom_messages_are_role_and_content_only(
    agora_emulator: AgoraEmulator, llm: ScriptedLLM
) -> None:
    agent_id = await custom_agent(agora_emulator, llm)
    agora_emulator.agent(agent_id).properties["llm"].pop("vendor")
    llm.scripts.append([chunk("Hi."), chunk(finish="stop"), b"data: [DONE]\n\n"])
    await agora_emulator.user_says(agent_id, "Hello?")
    request = llm.requests[-1]
    assert all(set(m) == {"role", "content"} for m in request["messages"])
    assert not {"turn_id", "timestamp", "interruptable", "context"} & set(request)


@pytest.mark.parametrize(
    ("pieces", "why"),
    [
        ([b"data: {not json}\n\n", b"data: [DONE]\n\n"], "not JSON"),
        ([b'data: {"choices": "x"}\n\n', b"data: [DONE]\n\n"], "choices"),
        ([b"event: x\nretry: 5\n\n", b"data: [DONE]\n\n"], "unexpected SSE line"),
        ([chunk("Half a reply")], "without data: [DONE]"),
        ([b'data: {"error": {"message": "boom"}}\n\n'], "reported an error"),
    ],
)
async def test_malformed_streams_are_an_llm_failure(
    agora_emulator: AgoraEmulator, llm: ScriptedLLM, pieces: list[bytes], why: str
) -> None:
    agent_id = await custom_agent(agora_emulator, llm)
    llm.scripts.append(pieces)
    turn = await agora_emulator.user_says(agent_id, "Hello?")
    assert turn.outcome == "failed" and why in (turn.error or "")
    last = agora_emulator.agent(agent_id).conversation[-1]
    assert (last.role, last.content, last.source) == ("assistant", "Sorry, say that again?", "llm_failure")


async def test_an_error_status_is_an_llm_failure(agora_emulator: AgoraEmulator, llm: ScriptedLLM) -> None:
    agent_id = await custom_agent(agora_emulator, llm)
    llm.status = 401
    turn = await agora_emulator.user_says(agent_id, "Hello?")
    assert turn.outcome == "failed" and turn.status == 401


async def test_interruption_closes_the_stream_mid_reply(agora_emulator: AgoraEmulator, llm: ScriptedLLM) -> None:
    agent_id = await custom_agent(agora_emulator, llm)
    llm.delay = 0.02
    llm.scripts.append([chunk(w) for w in ["One ", "two ", "three ", "four ", "five ", "six ", "seven "] * 5])
    turn = await agora_emulator.user_says(agent_id, "Count for me.", interrupt_after=2)
    assert turn.outcome == "interrupted" and turn.reply == "One two "
    await asyncio.wait_for(llm.closed_early.wait(), 5)
    last = agora_emulator.agent(agent_id).conversation[-1]
    assert (last.content, last.interrupted, last.original) == ("One ", True, "One two "), "what was spoken is kept"

    llm.scripts.append([chunk("Sure."), chunk(finish="stop"), b"data: [DONE]\n\n"])
    await agora_emulator.user_says(agent_id, "Stop counting.")
    cut = llm.requests[-1]["messages"][-2]
    assert cut["content"] == "One " and cut["metadata"]["source"] == "llm"
    assert cut["metadata"]["interrupted"] is True and cut["metadata"]["original"] == "One two "
    assert isinstance(cut["metadata"]["interrupt_timestamp"], int)


async def test_silence_reminders_and_think_injections_carry_their_source(
    agora_emulator: AgoraEmulator, llm: ScriptedLLM
) -> None:
    agent_id = await custom_agent(agora_emulator, llm, max_history=10)
    agora_emulator.silence_reminder(agent_id, "Are you still there?")
    async with httpx.AsyncClient(base_url=agora_emulator.project_url, headers={"Authorization": BASIC}) as http:
        assert (await http.post(f"/agents/{agent_id}/think", json={"text": "User level: VIP"})).status_code == 200
    llm.scripts.append([chunk("Yes."), chunk(finish="stop"), b"data: [DONE]\n\n"])
    await agora_emulator.user_says(agent_id, "I'm here.", source="message")
    sources = [(m["role"], m["content"], m["metadata"]["source"]) for m in llm.requests[-1]["messages"][1:]]
    assert sources[-3:] == [
        ("assistant", "Are you still there?", "silence"),
        ("user", "[think API injected] User level: VIP", "command"),
        ("user", "I'm here.", "message"),
    ]


async def test_join_rejects_unknown_llm_vendor_and_style(agora_emulator: AgoraEmulator) -> None:
    async with httpx.AsyncClient(base_url=agora_emulator.project_url, headers={"Authorization": BASIC}) as http:
        for field, value in (("vendor", "mystery"), ("style", "yaml")):
            body = join_body(agora_emulator, f"bad-{field}")
            body["properties"]["llm"][field] = value
            response = await http.post("/join", json=body)
            assert response.status_code == 400 and f"properties.llm.{field}" in response.json()["detail"]


async def test_an_agent_without_llm_url_cannot_take_utterances(agora_emulator: AgoraEmulator) -> None:
    body = join_body(agora_emulator)
    del body["properties"]["llm"]["url"]
    body["preset"] = "openai_gpt_4o_mini"
    async with httpx.AsyncClient(base_url=agora_emulator.project_url, headers={"Authorization": BASIC}) as http:
        agent_id = (await http.post("/join", json=body)).json()["agent_id"]
    with pytest.raises(ValueError, match="preset"):
        await agora_emulator.user_says(agent_id, "Hi")
