"""The emulator's controls for a member's browser (``python3 tasks.py demo``): the Web SDK stand-in it serves, and
joining, speaking and leaving by channel, as the call page's "type instead of speaking" box and the SDK use them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from standins.agora_emulator import (
    ControlledAgoraEmulator,
    make_join_properties,
)
from standins.llm_server import FakeLLM
from tests.agora.conftest import BASIC

PAGE = {"Origin": "http://127.0.0.1:8080"}
"""What a call page's fetch carries: another loopback origin than the emulator's."""


@pytest.fixture
async def emu() -> AsyncIterator[ControlledAgoraEmulator]:
    async with ControlledAgoraEmulator() as emulator:
        yield emulator


async def start_agent(emu: ControlledAgoraEmulator, llm: FakeLLM, channel: str) -> str:
    properties = make_join_properties(emu, channel=channel)
    properties["llm"] = {**properties["llm"], "url": f"{llm.base_url}/chat/completions", "api_key": None}
    async with httpx.AsyncClient(base_url=emu.project_url, headers={"Authorization": BASIC}) as api:
        response = await api.post("/join", json={"name": channel, "properties": properties})
    assert response.status_code == 200, response.text
    return str(response.json()["agent_id"])


async def test_a_browser_joins_speaks_and_leaves_by_channel(emu: ControlledAgoraEmulator, fake_llm: FakeLLM) -> None:
    agent_id = await start_agent(emu, fake_llm, "room-1")
    fake_llm.queue_reply("Nice to meet you, Mirela.")
    async with httpx.AsyncClient(base_url=f"{emu.control_url}/channels/room-1", headers=PAGE) as page:
        joined = await page.post("/user_joined", content="{}")
        assert joined.json() == {"agent_id": agent_id, "agent_uid": "1001", "said": ["Hello, how can I help?"]}
        assert joined.headers["Access-Control-Allow-Origin"] == "*"

        said = await page.post("/user_says", content='{"text": " My name is Mirela. "}')
        assert said.json() == {
            "agent_id": agent_id,
            "outcome": "ok",
            "error": None,
            "said": ["Nice to meet you, Mirela."],
        }
        assert said.headers["Access-Control-Allow-Origin"] == "*"
        assert fake_llm.last_request["messages"][-1]["content"] == "My name is Mirela.", (
            "the agent's LLM heard the line"
        )

        assert (await page.post("/user_left")).json() == {"agent_id": agent_id}
    agent = emu.agent(agent_id)
    assert [(m.role, m.content, m.source) for m in agent.conversation] == [
        ("assistant", "Hello, how can I help?", "greeting"),
        ("user", "My name is Mirela.", "asr"),
        ("assistant", "Nice to meet you, Mirela.", "llm"),
    ]
    assert not agent.user_present and agent.user_left_at is not None, "the idle timer runs"


async def test_a_line_the_llm_fails_on_gets_the_agents_failure_message(
    emu: ControlledAgoraEmulator, fake_llm: FakeLLM
) -> None:
    agent_id = await start_agent(emu, fake_llm, "room-2")
    emu.agent(agent_id).properties["llm"]["failure_message"] = "Sorry, say that again?"
    fake_llm.fail_next(1, 503)
    async with httpx.AsyncClient(base_url=emu.control_url) as controls:
        said = (await controls.post(f"/agents/{agent_id}/user_says", json={"text": "Hello?"})).json()
    assert (said["outcome"], said["said"]) == ("failed", ["Sorry, say that again?"])
    assert said["error"].startswith("HTTP 503")


async def test_errors_are_readable_from_another_origin(emu: ControlledAgoraEmulator, fake_llm: FakeLLM) -> None:
    agent_id = await start_agent(emu, fake_llm, "room-3")
    async with httpx.AsyncClient(base_url=emu.control_url, headers=PAGE) as controls:
        nobody = await controls.post("/channels/elsewhere/user_says", content='{"text": "hi"}')
        assert (nobody.status_code, nobody.json()["reason"]) == (404, "AgentNotFound")
        assert nobody.headers["Access-Control-Allow-Origin"] == "*"
        for body in ("not json", '{"text": "  "}', '{"text": 3}'):
            refused = await controls.post(f"/agents/{agent_id}/user_says", content=body)
            assert (refused.status_code, refused.json()["reason"]) == (400, "InvalidControl"), body
        async with httpx.AsyncClient(base_url=emu.project_url, headers={"Authorization": BASIC}) as api:
            await api.post(f"/agents/{agent_id}/leave")
        gone = await controls.post("/channels/room-3/user_joined")
        assert (gone.status_code, gone.json()["reason"]) == (404, "AgentNotFound"), "a stopped agent is no one"
    assert emu.count_calls("join") == 1, "controls are not ConvoAI operations"


async def test_the_web_sdk_is_the_stub_linked_to_the_emulator(emu: ControlledAgoraEmulator) -> None:
    async with httpx.AsyncClient() as client:
        sdk = await client.get(f"{emu.control_url}/sdk.js")
    assert sdk.status_code == 200 and sdk.headers["Content-Type"].startswith("text/javascript")
    assert "window.AgoraRTC = {" in sdk.text and "window.__agoraStub" in sdk.text
    assert sdk.text.index("window.AgoraRTC = {") < sdk.text.index("window.AgoraRTC.createClient = function")
    assert 'post(name, "user_joined")' in sdk.text and 'post(left, "user_left", true)' in sdk.text
