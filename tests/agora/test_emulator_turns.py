"""The emulator's ``/turns`` (spec §4.10): the shape of Agora's SDK model, turns derived from the conversation,
pagination as documented, and served after the agent stopped."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from standins.agora_emulator import (
    TEST_APP_CERTIFICATE,
    TEST_CUSTOMER_ID,
    TEST_CUSTOMER_SECRET,
    AgoraEmulator,
    running_emulator,
)
from tests.agora.test_emulator import assert_error, started_agent
from tests.agora.test_emulator_fidelity import sdk_client


def field_names(model: type[BaseModel]) -> set[str]:
    """The JSON names of a model's fields (``e2e_latency_ms``, not ``e_2_e_latency_ms``)."""
    return {info.alias or name for name, info in model.model_fields.items()}


async def turns_page(http: httpx.AsyncClient, agent_id: str, **params: Any) -> httpx.Response:
    return await http.get(f"/agents/{agent_id}/turns", params=params)


async def a_conversation(http: httpx.AsyncClient, emulator: AgoraEmulator) -> str:
    """Greeting; two answered voice inputs; one the member spoke over; a silence reminder; a failed LLM turn;
    a typed message (no listed turn); then the member leaves and the agent stops on its idle timeout."""
    agent_id = await started_agent(http, emulator)
    emulator.user_joined(agent_id)
    emulator.advance(1)
    emulator.script(agent_id, [("user", "hello there"), ("assistant", "Hi! How are you?")])
    emulator.advance(1)
    emulator.script(agent_id, [("user", "tell me a story"), ("assistant", "Once upon a time, long ago")])
    emulator.interrupt_last(agent_id, "Once upon")
    emulator.advance(1)
    emulator.say(agent_id, "user", "actually, never mind")
    emulator.say(agent_id, "assistant", "Sure.")
    emulator.advance(1)
    emulator.silence_reminder(agent_id, "Are you still there?")
    emulator.say(agent_id, "user", "yes, sorry")
    emulator.say(agent_id, "assistant", "Sorry, I could not answer.", source="llm_failure")
    emulator.say(agent_id, "user", "typed hello", source="message")
    emulator.say(agent_id, "assistant", "Hello in text.")
    emulator.user_left(agent_id)
    emulator.advance(31)
    assert emulator.agent(agent_id).status == "STOPPED"
    return agent_id


async def test_turns_of_a_stopped_agent_follow_its_conversation(
    http: httpx.AsyncClient, agora_emulator: AgoraEmulator
) -> None:
    agent_id = await a_conversation(http, agora_emulator)
    response = await turns_page(http, agent_id)
    assert response.status_code == 200, response.text
    body = response.json()
    agent = agora_emulator.agent(agent_id)
    assert (body["agent_id"], body["name"], body["channel"]) == (agent_id, agent.name, agent.channel)
    assert body["total_turn_count"] == 6
    assert body["pagination"] == {"page_index": 1, "total_pages": 1, "is_last_page": True}
    turns = body["turns"]
    assert [turn["turn_id"] for turn in turns] == [1, 2, 3, 4, 5, 6]
    assert [(turn["start"]["type"], turn["end"]["type"]) for turn in turns] == [
        ("greeting", "ok"),
        ("voice_input", "ok"),
        ("voice_input", "interrupted"),
        ("voice_input", "ok"),
        ("silence_timeout", "ok"),
        ("voice_input", "error"),
    ]
    assert turns[0]["start"]["metadata"] == {"greeting_nth": 1}
    assert turns[2]["end"]["metadata"] == {"caused_by": "start_of_speech"}
    assert turns[4]["start"]["metadata"] == {"action": "speak"}
    assert turns[5]["end"]["metadata"]["reason"] == "LLM_REQUEST_ERR"
    assert set(turns[1]["start"]["metadata"]) == {"speech_duration_ms", "interrupt_duration_ms"}
    assert turns[1]["end"]["metadata"]["playback_duration_ms"] > 0
    for turn in turns:
        assert turn["agent_id"] == agent_id and turn["channel"] == agent.channel
        assert turn["start"]["start_at"] <= turn["end"]["end_at"]
        assert turn["metrics"]["e2e_latency_ms"] == sum(s["latency"] for s in turn["metrics"]["segmented_latency_ms"])
    starts = [turn["start"]["start_at"] for turn in turns]
    assert starts == sorted(starts) and len(set(starts)) == 5  # the silence reminder and "yes, sorry": same second


async def test_a_voice_input_the_agent_never_answered_ends_when_the_agent_leaves(
    http: httpx.AsyncClient, agora_emulator: AgoraEmulator
) -> None:
    agent_id = await started_agent(http, agora_emulator)
    agora_emulator.user_joined(agent_id)
    agora_emulator.say(agent_id, "user", "first")
    agora_emulator.say(agent_id, "user", "second, before any reply")
    running = (await turns_page(http, agent_id)).json()
    assert [t["start"]["type"] for t in running["turns"]] == ["greeting", "voice_input"], "the open turn waits"
    assert running["turns"][1]["end"]["metadata"] == {"caused_by": "start_of_speech"}
    assert (await http.post(f"/agents/{agent_id}/leave")).status_code == 200
    stopped = (await turns_page(http, agent_id)).json()
    assert stopped["total_turn_count"] == 3
    last = stopped["turns"][-1]
    assert last["end"] == {
        "end_at": agora_emulator.agent(agent_id).stop_ts * 1000,
        "type": "interrupted",
        "metadata": {"caused_by": "api_leave"},
    }


async def test_every_field_of_agoras_sdk_model_is_served(
    http: httpx.AsyncClient, agora_emulator: AgoraEmulator
) -> None:
    from agora_agent.agents.types.get_turns_agents_response import GetTurnsAgentsResponse
    from agora_agent.agents.types.get_turns_agents_response_pagination import GetTurnsAgentsResponsePagination
    from agora_agent.agents.types.get_turns_agents_response_turns_item import GetTurnsAgentsResponseTurnsItem
    from agora_agent.agents.types.get_turns_agents_response_turns_item_end import GetTurnsAgentsResponseTurnsItemEnd
    from agora_agent.agents.types.get_turns_agents_response_turns_item_metrics import (
        GetTurnsAgentsResponseTurnsItemMetrics,
    )
    from agora_agent.agents.types.get_turns_agents_response_turns_item_metrics_segmented_latency_ms_item import (
        GetTurnsAgentsResponseTurnsItemMetricsSegmentedLatencyMsItem as Segment,
    )
    from agora_agent.agents.types.get_turns_agents_response_turns_item_start import (
        GetTurnsAgentsResponseTurnsItemStart,
    )

    agent_id = await a_conversation(http, agora_emulator)
    body = (await turns_page(http, agent_id)).json()
    assert set(body) == field_names(GetTurnsAgentsResponse)
    assert set(body["pagination"]) == field_names(GetTurnsAgentsResponsePagination)
    for turn in body["turns"]:
        assert set(turn) == field_names(GetTurnsAgentsResponseTurnsItem)
        assert set(turn["start"]) == field_names(GetTurnsAgentsResponseTurnsItemStart)
        assert set(turn["end"]) == field_names(GetTurnsAgentsResponseTurnsItemEnd)
        assert set(turn["metrics"]) == field_names(GetTurnsAgentsResponseTurnsItemMetrics)
        assert all(set(segment) == field_names(Segment) for segment in turn["metrics"]["segmented_latency_ms"])
    parsed = GetTurnsAgentsResponse.model_validate(body)
    assert parsed.turns is not None and parsed.turns[1].metrics is not None
    assert parsed.turns[1].metrics.e_2_e_latency_ms == body["turns"][1]["metrics"]["e2e_latency_ms"]


async def test_agoras_sdk_reads_the_turns_of_a_stopped_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    async with running_emulator() as emulator:
        async with httpx.AsyncClient(
            base_url=emulator.project_url, auth=(TEST_CUSTOMER_ID, TEST_CUSTOMER_SECRET)
        ) as http:
            agent_id = await a_conversation(http, emulator)
        basic = {"customer_id": TEST_CUSTOMER_ID, "customer_secret": TEST_CUSTOMER_SECRET}
        client = sdk_client(emulator, monkeypatch, app_certificate=TEST_APP_CERTIFICATE, **basic)
        turns = await client.agents.get_turns(emulator.app_id, agent_id, page_index=2, page_size=10)
    assert turns.total_turn_count == 6 and turns.turns == []
    assert turns.pagination is not None and turns.pagination.is_last_page and turns.pagination.total_pages == 1


async def test_pages_follow_page_index_and_page_size(http: httpx.AsyncClient, agora_emulator: AgoraEmulator) -> None:
    agent_id = await started_agent(http, agora_emulator)
    agora_emulator.user_joined(agent_id)
    agora_emulator.script(agent_id, [(role, f"{role} {i}") for i in range(25) for role in ("user", "assistant")])
    pages = [(await turns_page(http, agent_id, page_index=i, page_size=10)).json() for i in (1, 2, 3, 4)]
    assert [page["pagination"] for page in pages] == [
        {"page_index": 1, "total_pages": 3, "is_last_page": False},
        {"page_index": 2, "total_pages": 3, "is_last_page": False},
        {"page_index": 3, "total_pages": 3, "is_last_page": True},
        {"page_index": 4, "total_pages": 3, "is_last_page": True},
    ]
    assert [len(page["turns"]) for page in pages] == [10, 10, 6, 0]
    assert [t["turn_id"] for page in pages for t in page["turns"]] == list(range(1, 27))
    default = (await turns_page(http, agent_id)).json()
    assert len(default["turns"]) == 26 and default["pagination"]["total_pages"] == 1  # page_size 50


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"page_size": 9}, "page_size"),
        ({"page_size": 201}, "page_size"),
        ({"page_index": 0}, "page_index"),
        ({"page_index": "one"}, "page_index"),
        ({"page_size": "1.5"}, "page_size"),
    ],
)
async def test_out_of_range_paging_is_refused(
    http: httpx.AsyncClient, agora_emulator: AgoraEmulator, params: dict[str, Any], fragment: str
) -> None:
    agent_id = await started_agent(http, agora_emulator)
    assert_error(await turns_page(http, agent_id, **params), 400, "InvalidFieldValue", fragment)


async def test_unknown_agents_and_sessions_older_than_seven_days_are_404(
    http: httpx.AsyncClient, agora_emulator: AgoraEmulator
) -> None:
    assert_error(await turns_page(http, "NOSUCHAGENT"), 404, "TaskNotFound")
    agent_id = await started_agent(http, agora_emulator)
    agora_emulator.user_joined(agent_id)
    assert (await http.post(f"/agents/{agent_id}/leave")).status_code == 200
    agora_emulator.advance(7 * 86400)
    assert (await turns_page(http, agent_id)).status_code == 200
    agora_emulator.advance(1)
    assert_error(await turns_page(http, agent_id), 404, "TaskNotFound", "7 days")
