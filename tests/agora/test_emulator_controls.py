"""The emulator's HTTP test controls (``/_emulator/``) and its standalone process, as the call benchmark uses them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from standins.agora_emulator import (
    API_PREFIX,
    ControlledAgoraEmulator,
    make_join_properties,
)
from standins.harness import free_port
from tests.agora.conftest import BASIC, FROZEN_NOW

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def emu() -> AsyncIterator[ControlledAgoraEmulator]:
    async with ControlledAgoraEmulator(clock=lambda: FROZEN_NOW) as emulator:
        yield emulator


@pytest.fixture
async def api(emu: ControlledAgoraEmulator) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=emu.project_url, headers={"Authorization": BASIC}) as client:
        yield client


@pytest.fixture
async def controls(emu: ControlledAgoraEmulator) -> AsyncIterator[httpx.AsyncClient]:
    """No credentials: the controls take none."""
    async with httpx.AsyncClient(base_url=emu.control_url) as client:
        yield client


async def start_agent(api: httpx.AsyncClient, emu: ControlledAgoraEmulator, name: str, **labels: str) -> str:
    properties = make_join_properties(emu, channel=f"ch-{name}", labels=labels or None)
    response = await api.post("/join", json={"name": name, "properties": properties})
    assert response.status_code == 200, response.text
    return str(response.json()["agent_id"])


def assert_control_error(response: httpx.Response, status: int, reason: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["reason"] == reason and response.json()["detail"]


async def test_join_script_and_read_back_through_the_controls(
    emu: ControlledAgoraEmulator, api: httpx.AsyncClient, controls: httpx.AsyncClient
) -> None:
    older = await start_agent(api, emu, "a", call_id="c1")
    await start_agent(api, emu, "b", call_id="c2")
    newer = await start_agent(api, emu, "c", call_id="c1", kind="x")

    listed = (await controls.get("/agents", params={"label": "call_id=c1"})).json()
    assert listed == {
        "agents": [
            {"agent_id": older, "status": "RUNNING", "labels": {"call_id": "c1"}},
            {"agent_id": newer, "status": "RUNNING", "labels": {"call_id": "c1", "kind": "x"}},
        ]
    }
    both = await controls.get("/agents", params=[("label", "call_id=c1"), ("label", "kind=x")])
    assert [a["agent_id"] for a in both.json()["agents"]] == [newer]
    assert len((await controls.get("/agents")).json()["agents"]) == 3
    assert (await controls.get("/agents", params={"label": "call_id=nope"})).json() == {"agents": []}

    joined = await controls.post(f"/agents/{newer}/user_joined")
    assert joined.json() == {"agent_id": newer, "status": "RUNNING", "messages": 1}
    scripted = await controls.post(
        f"/agents/{newer}/script", json={"messages": [["user", "I got a dog"], ["assistant", "What's its name?"]]}
    )
    assert scripted.json() == {"agent_id": newer, "appended": 2, "messages": 3}

    history = (await api.get(f"/agents/{newer}/history")).json()["contents"]
    assert [(m["role"], m["content"]) for m in history] == [
        ("assistant", "Hello, how can I help?"),
        ("user", "I got a dog"),
        ("assistant", "What's its name?"),
    ]
    assert emu.agent(newer).user_present and not emu.agent(older).user_present


async def test_controls_are_not_convoai_operations(
    emu: ControlledAgoraEmulator, api: httpx.AsyncClient, controls: httpx.AsyncClient
) -> None:
    agent_id = await start_agent(api, emu, "a", call_id="c1")
    emu.fail_next(1, 503)  # any operation: the controls must neither consume nor suffer it
    assert (await controls.post(f"/agents/{agent_id}/user_joined")).status_code == 200
    assert (await controls.get("/agents", params={"label": "call_id=c1"})).status_code == 200
    assert (await api.get(f"/agents/{agent_id}/history")).status_code == 503
    assert (await api.get(f"/agents/{agent_id}/history")).status_code == 200
    await api.post(f"/agents/{agent_id}/leave")

    stats = (await controls.get("/stats")).json()
    assert stats == {
        "requests": 4,
        "operations": {"join": 1, "history": 2, "leave": 1},
        "statuses": {"join": {"200": 1}, "history": {"503": 1, "200": 1}, "leave": {"200": 1}},
        "agents": {"total": 1, "active": 0},
    }
    assert [call.operation for call in emu.calls] == ["join", "history", "history", "leave"]
    assert not any(record.path.startswith("/_emulator") for record in emu.requests)


async def test_control_errors(
    emu: ControlledAgoraEmulator, api: httpx.AsyncClient, controls: httpx.AsyncClient
) -> None:
    agent_id = await start_agent(api, emu, "a")
    assert_control_error(await controls.post("/agents/NOPE/user_joined"), 404, "AgentNotFound")
    assert_control_error(await controls.post("/agents/NOPE/script", json={"messages": []}), 404, "AgentNotFound")
    assert_control_error(await controls.get("/agents", params={"label": "no-equals"}), 400, "InvalidControl")

    bad_bodies: list[Any] = [
        {},
        {"messages": "hi"},
        {"messages": [["user"]]},
        {"messages": [["system", "be nice"]]},
        {"messages": [["user", 5]]},
        {"messages": [["user", "fine"], ["robot", "not fine"]]},
    ]
    for body in bad_bodies:
        assert_control_error(await controls.post(f"/agents/{agent_id}/script", json=body), 400, "InvalidControl")
    raw = await controls.post(f"/agents/{agent_id}/script", content=b"{nope")
    assert_control_error(raw, 400, "InvalidControl")
    assert emu.agent(agent_id).conversation == [], "a rejected script appends nothing, not even its valid part"

    await api.post(f"/agents/{agent_id}/leave")
    assert_control_error(await controls.post(f"/agents/{agent_id}/user_joined"), 409, "AgentNotRunning")
    assert_control_error(
        await controls.post(f"/agents/{agent_id}/script", json={"messages": [["user", "hi"]]}), 409, "AgentNotRunning"
    )
    listed = (await controls.get("/agents")).json()["agents"]
    assert listed == [{"agent_id": agent_id, "status": "STOPPED", "labels": {}}]


async def test_a_fixed_port_serves_both_the_api_and_the_controls() -> None:
    port = free_port()
    async with ControlledAgoraEmulator(port=port, clock=lambda: FROZEN_NOW) as emulator:
        assert emulator.base_url == f"http://127.0.0.1:{port}{API_PREFIX}"
        async with httpx.AsyncClient(headers={"Authorization": BASIC}) as client:
            assert (await client.get(f"{emulator.project_url}/agents")).status_code == 200
            assert (await client.get(f"{emulator.control_url}/stats")).json()["requests"] == 1


def test_standalone_process_reports_ready_serves_and_stops_on_sigterm() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "standins.agora_emulator", "--port", "0", "--max-concurrent", "3"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        words = proc.stdout.readline().split()
        assert words[:2] == ["agora-emulator", "ready"] and words[2].endswith(API_PREFIX), words
        root = words[2].removesuffix(API_PREFIX)
        with httpx.Client(base_url=root) as client:
            assert client.get("/_emulator/stats").json()["requests"] == 0
            agents = client.get(f"{API_PREFIX}/v2/projects/x/agents", headers={"Authorization": BASIC})
            assert agents.status_code == 401  # the real API, with its auth, next to the controls
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
