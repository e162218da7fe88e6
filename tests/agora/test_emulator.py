"""The emulator rejects what the spec says the real service rejects, and its test controls behave as documented."""

from __future__ import annotations

import base64
import itertools
import json
import time
from typing import Any

import httpx
import pytest
from agora_token_builder.RtcTokenBuilder import RtcTokenBuilder

from bot.agora import build_rtc_token, parse_notification, verify_signature
from standins.agora_emulator import (
    TEST_APP_ID,
    TEST_CUSTOMER_ID,
    TEST_CUSTOMER_SECRET,
    AgoraEmulator,
    make_join_properties,
    running_emulator,
)
from tests.agora.conftest import BASIC, FROZEN_NOW, WebhookReceiver, authorized_http


def join_body(emulator: AgoraEmulator, name: str = "call-a", **overrides: Any) -> dict[str, Any]:
    return {"name": name, "properties": make_join_properties(emulator, **overrides)}


def join_body_with(emulator: AgoraEmulator, **raw_properties: Any) -> dict[str, Any]:
    """A valid body whose properties are then overwritten verbatim (the token stays minted for the defaults)."""
    body = join_body(emulator)
    body["properties"].update(raw_properties)
    return body


async def join(http: httpx.AsyncClient, body: Any) -> httpx.Response:
    return await http.post("/join", json=body)


async def started_agent(http: httpx.AsyncClient, emulator: AgoraEmulator, name: str = "call-a", **kw: Any) -> str:
    response = await join(http, join_body(emulator, name, **kw))
    assert response.status_code == 200, response.text
    return str(response.json()["agent_id"])


def assert_error(response: httpx.Response, status: int, reason: str, detail_fragment: str = "") -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"detail", "reason"}
    assert body["reason"] == reason
    assert detail_fragment in body["detail"]


# --- auth --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Basic " + base64.b64encode(f"{TEST_CUSTOMER_ID}:wrong".encode()).decode(),
        "Basic " + base64.b64encode(f"someone:{TEST_CUSTOMER_SECRET}".encode()).decode(),
        "Basic !!!not-base64!!!",
        "Bearer " + base64.b64encode(f"{TEST_CUSTOMER_ID}:{TEST_CUSTOMER_SECRET}".encode()).decode(),
        "agora token=007eJxTYBBbsMMnKq7p9Hf",
    ],
)
async def test_bad_or_missing_auth_is_401(agora_emulator: AgoraEmulator, authorization: str | None) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    async with httpx.AsyncClient(base_url=agora_emulator.project_url, headers=headers) as client:
        response = await client.get("/agents")
    assert_error(response, 401, "InvalidPermission")
    assert agora_emulator.agents == {}


async def test_basic_scheme_is_case_insensitive(agora_emulator: AgoraEmulator) -> None:
    headers = {"Authorization": "basic " + BASIC.split(" ", 1)[1]}
    async with httpx.AsyncClient(base_url=agora_emulator.project_url, headers=headers) as client:
        assert (await client.get("/agents")).status_code == 200


async def test_wrong_app_id_in_path_is_401(agora_emulator: AgoraEmulator) -> None:
    url = f"{agora_emulator.base_url}/v2/projects/fedcba9876543210fedcba9876543210/agents"
    async with httpx.AsyncClient(headers={"Authorization": BASIC}) as client:
        response = await client.get(url)
    assert_error(response, 401, "InvalidPermission", "app id")


async def test_unknown_route_is_a_json_404(http: httpx.AsyncClient) -> None:
    response = await http.get("/nope")
    assert response.status_code == 404
    assert response.json()["reason"] == "NotFound"


# --- join validation ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", [b"{not json", b"", b"[1, 2]", b'"text"'])
async def test_join_body_that_is_not_a_json_object(http: httpx.AsyncClient, raw: bytes) -> None:
    response = await http.post("/join", content=raw, headers={"Content-Type": "application/json"})
    assert_error(response, 400, "InvalidRequestBody")


@pytest.mark.parametrize(
    ("path", "field"),
    [
        (("name",), "name"),
        (("properties",), "properties"),
        (("properties", "channel"), "properties.channel"),
        (("properties", "token"), "properties.token"),
        (("properties", "agent_rtc_uid"), "properties.agent_rtc_uid"),
        (("properties", "remote_rtc_uids"), "properties.remote_rtc_uids"),
        (("properties", "llm"), "properties.llm"),
        (("properties", "llm", "url"), "properties.llm.url"),
        (("properties", "tts"), "properties.tts"),
        (("properties", "tts", "vendor"), "properties.tts.vendor"),
    ],
)
async def test_each_missing_required_field(
    http: httpx.AsyncClient, agora_emulator: AgoraEmulator, path: tuple[str, ...], field: str
) -> None:
    body = join_body(agora_emulator)
    container = body
    for key in path[:-1]:
        container = container[key]
    del container[path[-1]]

    response = await join(http, body)

    assert_error(response, 400, "MissingRequiredField", field)


async def test_explicit_null_required_field_counts_as_missing(
    http: httpx.AsyncClient, agora_emulator: AgoraEmulator
) -> None:
    response = await join(http, join_body_with(agora_emulator, channel=None))
    assert_error(response, 400, "MissingRequiredField", "properties.channel")


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"agent_rtc_uid": 1001}, "agent_rtc_uid"),
        ({"remote_rtc_uids": [2002]}, "remote_rtc_uids"),
        ({"remote_rtc_uids": "2002"}, "remote_rtc_uids"),
        ({"remote_rtc_uids": ["2002", "2003"]}, "remote_rtc_uids"),
        ({"remote_rtc_uids": []}, "remote_rtc_uids"),
        ({"remote_rtc_uids": ["*"]}, "remote_rtc_uids"),
        ({"remote_rtc_uids": ["alice"]}, "remote_rtc_uids"),
        ({"remote_rtc_uids": ["4294967296"]}, "remote_rtc_uids"),
        ({"remote_rtc_uids": ["1001"]}, "agent_rtc_uid must differ"),
        ({"enable_string_uid": "yes"}, "enable_string_uid"),
        ({"idle_timeout": -1}, "idle_timeout"),
        ({"idle_timeout": 259_201}, "idle_timeout"),
        ({"idle_timeout": "30"}, "idle_timeout"),
        ({"idle_timeout": True}, "idle_timeout"),
        ({"idle_timeout": 1.5}, "idle_timeout"),
        ({"labels": {"call_id": 42}}, "labels"),
        ({"labels": ["call_id"]}, "labels"),
        ({"channel": "c" * 65}, "channel"),
        ({"channel": ""}, "channel"),
        ({"channel": 7}, "channel"),
        ({"tts": {"vendor": "bogus"}}, "tts.vendor"),
        ({"llm": {"url": "not a url"}}, "llm.url"),
        ({"llm": {"url": "https://llm.test/v1", "max_history": 0}}, "max_history"),
        ({"llm": {"url": "https://llm.test/v1", "max_history": 1025}}, "max_history"),
        ({"llm": {"url": "https://llm.test/v1", "system_messages": "be nice"}}, "system_messages"),
        ({"llm": {"url": "https://llm.test/v1", "params": [1]}}, "llm.params"),
        ({"llm": "gpt"}, "properties.llm"),
        ({"asr": "en-US"}, "properties.asr"),
    ],
)
async def test_invalid_field_values(
    http: httpx.AsyncClient, agora_emulator: AgoraEmulator, overrides: dict[str, Any], field: str
) -> None:
    response = await join(http, join_body_with(agora_emulator, **overrides))
    assert_error(response, 400, "InvalidFieldValue", field)


@pytest.mark.parametrize(
    ("top_level", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": 12}, "name"),
        ({"preset": "gpt_9_ultra"}, "preset"),
        ({"preset": ["openai_gpt_4o_mini"]}, "preset"),
        ({"pipeline_id": 5}, "pipeline_id"),
        ({"properties": "x"}, "properties"),
    ],
)
async def test_invalid_top_level_values(
    http: httpx.AsyncClient, agora_emulator: AgoraEmulator, top_level: dict[str, Any], field: str
) -> None:
    body = join_body(agora_emulator) | top_level
    response = await join(http, body)
    assert_error(response, 400, "InvalidFieldValue", field)


async def test_boundary_values_and_nulls_are_accepted(http: httpx.AsyncClient, agora_emulator: AgoraEmulator) -> None:
    body = join_body(
        agora_emulator,
        idle_timeout=259_200,
        enable_string_uid=None,
        labels=None,
        asr=None,
        geofence=None,
        llm={"url": "https://llm.test/v1", "max_history": 1024, "system_messages": None, "params": None},
    )
    body["pipeline_id"] = None
    body["preset"] = None

    response = await join(http, body)

    assert response.status_code == 200, response.text
    assert agora_emulator.only_agent().request["pipeline_id"] is None


MINIMAX_VOICE = {"vendor": "minimax", "params": {"voice_setting": {"voice_id": "English_captivating_female1"}}}


async def test_presets_make_llm_url_and_tts_optional(http: httpx.AsyncClient, agora_emulator: AgoraEmulator) -> None:
    body = join_body(agora_emulator, tts=None, llm={"system_messages": [{"role": "system", "content": "hi"}]})
    body["preset"] = "deepgram_nova_3,openai_gpt_4o_mini,openai_tts_1"
    assert (await join(http, body)).status_code == 200


async def test_a_minimax_preset_needs_a_voice(http: httpx.AsyncClient, agora_emulator: AgoraEmulator) -> None:
    llm = {"system_messages": [{"role": "system", "content": "hi"}]}
    without_voice = join_body(agora_emulator, tts=None, llm=llm)
    without_voice["preset"] = "deepgram_nova_3,openai_gpt_4o_mini,minimax_speech_2_6_turbo"
    empty_voice = join_body(agora_emulator, tts={"vendor": "minimax", "params": {"voice_setting": {}}}, llm=llm)
    empty_voice["preset"] = without_voice["preset"]
    with_voice = join_body(agora_emulator, tts=MINIMAX_VOICE, llm=llm)
    with_voice["preset"] = without_voice["preset"]

    assert_error(await join(http, without_voice), 400, "MissingRequiredField", "voice_setting.voice_id")
    assert_error(await join(http, empty_voice), 400, "MissingRequiredField", "voice_setting.voice_id")
    assert (await join(http, with_voice)).status_code == 200


async def test_gpt_5_presets_refuse_max_tokens_and_temperature(
    http: httpx.AsyncClient, agora_emulator: AgoraEmulator
) -> None:
    system = [{"role": "system", "content": "hi"}]
    refused = join_body(agora_emulator, tts=MINIMAX_VOICE, llm={"system_messages": system, "params": {"max_tokens": 9}})
    refused["preset"] = "openai_gpt_5_mini,minimax_speech_2_8_turbo"
    accepted = join_body(agora_emulator, tts=MINIMAX_VOICE, llm={"system_messages": system})
    accepted["preset"] = refused["preset"]

    assert_error(await join(http, refused), 400, "InvalidFieldValue", "max_tokens")
    assert (await join(http, accepted)).status_code == 200


async def test_llm_preset_alone_still_requires_tts(http: httpx.AsyncClient, agora_emulator: AgoraEmulator) -> None:
    body = join_body(agora_emulator, tts=None, llm=None)
    body["preset"] = "openai_gpt_4o_mini"
    assert_error(await join(http, body), 400, "MissingRequiredField", "properties.tts")


async def test_pipeline_id_makes_llm_and_tts_optional(http: httpx.AsyncClient, agora_emulator: AgoraEmulator) -> None:
    body = join_body(agora_emulator, tts=None, llm=None)
    body["pipeline_id"] = "studio-pipeline-1"
    assert (await join(http, body)).status_code == 200


async def test_string_uids_need_enable_string_uid(http: httpx.AsyncClient, agora_emulator: AgoraEmulator) -> None:
    token = RtcTokenBuilder.buildTokenWithAccount(
        agora_emulator.app_id, agora_emulator.app_certificate, "call-channel-1", "agent-a", 1, int(FROZEN_NOW) + 600
    )
    base = {"agent_rtc_uid": "agent-a", "remote_rtc_uids": ["user-b"], "token": token}

    rejected = await join(http, join_body_with(agora_emulator, **base))
    accepted = await join(http, join_body_with(agora_emulator, enable_string_uid=True, **base))

    assert_error(rejected, 400, "InvalidFieldValue", "agent_rtc_uid")
    assert accepted.status_code == 200, accepted.text


# --- agent token -------------------------------------------------------------------------------------------


def _token(emulator: AgoraEmulator, **kw: Any) -> str:
    settings: dict[str, Any] = {
        "app_id": emulator.app_id,
        "app_certificate": emulator.app_certificate,
        "channel": "call-channel-1",
        "uid": 1001,
        "expires_in": 3600,
        "now": int(emulator.now()),
    }
    settings.update(kw)
    return build_rtc_token(**settings)


@pytest.mark.parametrize(
    ("token_kw", "reason_fragment"),
    [
        ({"channel": "another-channel"}, "another channel"),
        ({"uid": 1002}, "another uid"),
        ({"app_certificate": "0123456789abcdef0123456789abcdef"}, "signature"),
        ({"app_id": "fedcba9876543210fedcba9876543210"}, "another app id"),
        ({"now": int(FROZEN_NOW) - 7200}, "expired"),
        ({"now": int(FROZEN_NOW) - 3600}, "expired"),
    ],
)
async def test_bad_agent_tokens_are_rejected(
    http: httpx.AsyncClient, agora_emulator: AgoraEmulator, token_kw: dict[str, Any], reason_fragment: str
) -> None:
    response = await join(http, join_body(agora_emulator, token=_token(agora_emulator, **token_kw)))
    assert_error(response, 400, "InvalidFieldValue", reason_fragment)
    assert agora_emulator.agents == {}


@pytest.mark.parametrize("token", ["", "garbage", "007eJxTYBBbsMMnKq7p9Hf", 12345])
async def test_malformed_agent_tokens_are_rejected(
    http: httpx.AsyncClient, agora_emulator: AgoraEmulator, token: Any
) -> None:
    response = await join(http, join_body(agora_emulator, token=token))
    assert_error(response, 400, "InvalidFieldValue", "token")


async def test_random_agent_uid_needs_a_uid_zero_token(http: httpx.AsyncClient, agora_emulator: AgoraEmulator) -> None:
    specific = await join(http, join_body_with(agora_emulator, agent_rtc_uid="0"))
    wildcard = await join(http, join_body_with(agora_emulator, agent_rtc_uid="0", token=_token(agora_emulator, uid=0)))

    assert_error(specific, 400, "InvalidFieldValue", "another uid")
    assert wildcard.status_code == 200


async def test_enable_rtm_needs_rtm_privileges_that_006_tokens_lack(
    http: httpx.AsyncClient, agora_emulator: AgoraEmulator
) -> None:
    token_006 = _token(agora_emulator, uid=1001, channel="call-channel-1", token_format="006")
    response = await join(http, join_body(agora_emulator, advanced_features={"enable_rtm": True}, token=token_006))
    assert_error(response, 400, "InvalidFieldValue", "RTM")


async def test_a_007_token_with_rtm_serves_an_rtm_agent(http: httpx.AsyncClient, agora_emulator: AgoraEmulator) -> None:
    response = await join(http, join_body(agora_emulator, advanced_features={"enable_rtm": True}))
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("token_format", ["007", "006"])
async def test_both_token_formats_are_verified(
    http: httpx.AsyncClient, agora_emulator: AgoraEmulator, token_format: str
) -> None:
    good = _token(agora_emulator, token_format=token_format)
    other_channel = _token(agora_emulator, channel="another-channel", token_format=token_format)
    other_uid = _token(agora_emulator, uid=1002, token_format=token_format)

    assert (await join(http, join_body(agora_emulator, token=good))).status_code == 200
    rejected_channel = await join(http, join_body(agora_emulator, token=other_channel, name="call-b"))
    rejected_uid = await join(http, join_body(agora_emulator, token=other_uid, name="call-c"))
    assert_error(rejected_channel, 400, "InvalidFieldValue", "another channel")
    assert_error(rejected_uid, 400, "InvalidFieldValue", "another uid")


# --- conflicts and limits ----------------------------------------------------------------------------------


async def test_duplicate_active_name_is_409_until_the_first_stops(
    http: httpx.AsyncClient, agora_emulator: AgoraEmulator
) -> None:
    first = await started_agent(http, agora_emulator)

    duplicate = await join(http, join_body(agora_emulator, channel="another"))
    await http.post(f"/agents/{first}/leave")
    reused = await join(http, join_body(agora_emulator, channel="another"))

    assert_error(duplicate, 409, "TaskConflict", "call-a")
    assert reused.status_code == 200


async def test_21st_concurrent_agent_is_422(http: httpx.AsyncClient, agora_emulator: AgoraEmulator) -> None:
    for index in range(20):
        await started_agent(http, agora_emulator, f"call-{index}", channel=f"ch-{index}")

    response = await join(http, join_body(agora_emulator, "call-20", channel="ch-20"))

    assert_error(response, 422, "ConcurrencyLimitExceeded")
    assert len(agora_emulator.agents) == 20


async def test_stopped_agents_free_a_concurrency_slot() -> None:
    async with running_emulator(max_concurrent=1) as emulator, authorized_http(emulator) as http:
        first = await started_agent(http, emulator, "one")
        emulator.fail_agent(first)
        await started_agent(http, emulator, "two")


# --- lifecycle ---------------------------------------------------------------------------------------------


async def test_join_response_and_stored_request(http: httpx.AsyncClient, agora_emulator: AgoraEmulator) -> None:
    body = join_body(agora_emulator, labels={"call_id": "c-9"})

    response = await join(http, body)

    agent = agora_emulator.only_agent()
    assert response.json() == {"agent_id": agent.agent_id, "create_ts": int(FROZEN_NOW), "status": "RUNNING"}
    assert 25 <= len(agent.agent_id) <= 32 and agent.agent_id.isalnum() and agent.agent_id.upper() == agent.agent_id
    assert agent.request == body
    assert agent.system_messages == body["properties"]["llm"]["system_messages"]
    assert (agent.name, agent.channel, agent.labels, agent.status) == (
        "call-a",
        "call-channel-1",
        {"call_id": "c-9"},
        "RUNNING",
    )


async def test_leave_twice_and_history_after_stop(http: httpx.AsyncClient, agora_emulator: AgoraEmulator) -> None:
    agent_id = await started_agent(http, agora_emulator)

    first = await http.post(f"/agents/{agent_id}/leave")
    second = await http.post(f"/agents/{agent_id}/leave")
    history = await http.get(f"/agents/{agent_id}/history")
    query = await http.get(f"/agents/{agent_id}")

    assert (first.status_code, first.json()) == (200, {})
    assert_error(second, 404, "TaskNotFound")
    assert_error(history, 404, "TaskNotFound")
    assert query.json() == {
        "message": "agent exits with reason: OK",
        "start_ts": int(FROZEN_NOW),
        "stop_ts": int(FROZEN_NOW),
        "status": "STOPPED",
        "name": "call-a",
        "agent_id": agent_id,
    }


async def test_unknown_agent_is_404_everywhere(http: httpx.AsyncClient) -> None:
    for method, path in [
        ("GET", "/agents/NOPE"),
        ("GET", "/agents/NOPE/history"),
        ("POST", "/agents/NOPE/leave"),
        ("POST", "/agents/NOPE/update"),
        ("POST", "/agents/NOPE/speak"),
        ("POST", "/agents/NOPE/interrupt"),
        ("POST", "/agents/NOPE/think"),
    ]:
        assert_error(await http.request(method, path, json={}), 404, "TaskNotFound")


async def test_query_of_a_running_agent(http: httpx.AsyncClient, agora_emulator: AgoraEmulator) -> None:
    agent_id = await started_agent(http, agora_emulator)
    body = (await http.get(f"/agents/{agent_id}")).json()
    assert body == {
        "message": "",
        "start_ts": int(FROZEN_NOW),
        "stop_ts": 0,
        "status": "RUNNING",
        "name": "call-a",
        "agent_id": agent_id,
    }


async def test_history_window_is_capped_at_max_history(http: httpx.AsyncClient, agora_emulator: AgoraEmulator) -> None:
    llm = {"url": "https://llm.test/v1", "max_history": 4, "greeting_message": "Hi!"}
    agent_id = await started_agent(http, agora_emulator, llm=llm)
    agora_emulator.user_joined(agent_id)
    agora_emulator.script(agent_id, [("user", f"u{i}") if i % 2 == 0 else ("assistant", f"a{i}") for i in range(9)])

    body = (await http.get(f"/agents/{agent_id}/history")).json()

    assert body["agent_id"] == agent_id and body["status"] == "RUNNING" and body["start_ts"] == int(FROZEN_NOW)
    assert [(item["role"], item["content"]) for item in body["contents"]] == [
        ("assistant", "a5"),
        ("user", "u6"),
        ("assistant", "a7"),
        ("user", "u8"),
    ]
    assert {"turn_id", "timestamp"} <= set(body["contents"][0])


async def test_default_history_window_is_32(http: httpx.AsyncClient, agora_emulator: AgoraEmulator) -> None:
    agent_id = await started_agent(http, agora_emulator, llm={"url": "https://llm.test/v1"})
    agora_emulator.script(agent_id, [("user", str(i)) for i in range(40)])
    contents = (await http.get(f"/agents/{agent_id}/history")).json()["contents"]
    assert [item["content"] for item in contents] == [str(i) for i in range(8, 40)]


async def test_greeting_is_spoken_when_the_user_joins(http: httpx.AsyncClient, agora_emulator: AgoraEmulator) -> None:
    llm = {
        "url": "https://llm.test/v1",
        "greeting_message": "Welcome back, {{name}}!",
        "template_variables": {"name": "Ana"},
    }
    agent_id = await started_agent(http, agora_emulator, llm=llm)
    before = (await http.get(f"/agents/{agent_id}/history")).json()["contents"]

    agora_emulator.user_joined(agent_id)
    agora_emulator.user_left(agent_id)
    agora_emulator.user_joined(agent_id)
    after = (await http.get(f"/agents/{agent_id}/history")).json()["contents"]

    assert before == []
    assert [(item["role"], item["content"]) for item in after] == [("assistant", "Welcome back, Ana!")] * 2


async def test_auto_user_join_greets_immediately() -> None:
    async with running_emulator(auto_user_join=True) as emulator, authorized_http(emulator) as http:
        agent_id = await started_agent(http, emulator)
        contents = (await http.get(f"/agents/{agent_id}/history")).json()["contents"]
    assert [item["content"] for item in contents] == ["Hello, how can I help?"]


async def test_interrupted_and_growing_assistant_messages(
    http: httpx.AsyncClient, agora_emulator: AgoraEmulator
) -> None:
    agent_id = await started_agent(http, agora_emulator)
    agora_emulator.script(agent_id, [("user", "tell me a story"), ("assistant", "Once upon")])

    first = (await http.get(f"/agents/{agent_id}/history")).json()["contents"]
    agora_emulator.grow_last(agent_id, " a time there was")
    second = (await http.get(f"/agents/{agent_id}/history")).json()["contents"]
    agora_emulator.interrupt_last(agent_id, "Once upon a time")
    agora_emulator.say(agent_id, "user", "stop")
    third = (await http.get(f"/agents/{agent_id}/history")).json()["contents"]

    assert first[-1]["content"] == "Once upon"
    assert second[-1]["content"] == "Once upon a time there was"
    assert [item["content"] for item in third] == ["tell me a story", "Once upon a time", "stop"]
    assert agora_emulator.agent(agent_id).conversation[1].original == "Once upon a time there was"


async def test_idle_timeout_after_the_user_leaves(http: httpx.AsyncClient, agora_emulator: AgoraEmulator) -> None:
    agent_id = await started_agent(http, agora_emulator, idle_timeout=30)
    agora_emulator.user_joined(agent_id)

    agora_emulator.user_left(agent_id)
    agora_emulator.advance(29)
    still_running = (await http.get(f"/agents/{agent_id}")).json()["status"]
    agora_emulator.advance(1)

    agent = agora_emulator.agent(agent_id)
    assert still_running == "RUNNING"
    assert (agent.status, agent.message, agent.stop_ts) == ("STOPPED", "Idle for too long", int(FROZEN_NOW) + 30)
    assert_error(await http.get(f"/agents/{agent_id}/history"), 404, "TaskNotFound")
    assert [envelope["eventType"] for envelope in agora_emulator.emitted] == [101, 102, 103]


async def test_rejoining_cancels_the_idle_timer(http: httpx.AsyncClient, agora_emulator: AgoraEmulator) -> None:
    agent_id = await started_agent(http, agora_emulator, idle_timeout=30)
    agora_emulator.user_left(agent_id)
    agora_emulator.advance(20)
    agora_emulator.user_joined(agent_id)
    agora_emulator.advance(3600)
    assert agora_emulator.agent(agent_id).status == "RUNNING"


async def test_idle_timeout_zero_never_idles_but_the_72h_cap_applies(
    http: httpx.AsyncClient, agora_emulator: AgoraEmulator
) -> None:
    agent_id = await started_agent(http, agora_emulator, idle_timeout=0, token_expires_in=86_400)
    agora_emulator.user_left(agent_id)
    agora_emulator.advance(71 * 3600)
    assert agora_emulator.agent(agent_id).status == "RUNNING"

    agora_emulator.advance(3600)

    agent = agora_emulator.agent(agent_id)
    assert (agent.status, agent.message) == ("STOPPED", "Task lifetime limit exceeded")


async def test_fail_agent_and_expire_lifetime(http: httpx.AsyncClient, agora_emulator: AgoraEmulator) -> None:
    failed = await started_agent(http, agora_emulator, "one", channel="c1")
    expired = await started_agent(http, agora_emulator, "two", channel="c2")

    agora_emulator.fail_agent(failed)
    agora_emulator.expire_lifetime(expired)

    assert (await http.get(f"/agents/{failed}")).json()["status"] == "FAILED"
    assert agora_emulator.agent(failed).message == "RTC connection error"
    assert agora_emulator.agent(expired).message == "Task lifetime limit exceeded"
    stops = [envelope["payload"].get("message") for envelope in agora_emulator.emitted if envelope["eventType"] == 102]
    assert stops == ["RTC connection error", "Task lifetime limit exceeded"]
    with pytest.raises(ValueError, match="not running"):
        agora_emulator.say(failed, "user", "hello?")


async def test_starting_status_until_a_second_passes() -> None:
    async with (
        running_emulator(clock=lambda: FROZEN_NOW, start_status="STARTING") as emulator,
        authorized_http(emulator) as http,
    ):
        response = await join(http, join_body(emulator))
        agent_id = response.json()["agent_id"]
        starting = (await http.get(f"/agents/{agent_id}")).json()["status"]
        emulator.advance(1)
        running = (await http.get(f"/agents/{agent_id}")).json()["status"]
    assert (response.json()["status"], starting, running) == ("STARTING", "STARTING", "RUNNING")


# --- list --------------------------------------------------------------------------------------------------


async def test_list_filters_and_pages(http: httpx.AsyncClient, agora_emulator: AgoraEmulator) -> None:
    ids = [await started_agent(http, agora_emulator, f"n{i}", channel="shared") for i in range(3)]
    other = await started_agent(http, agora_emulator, "other", channel="elsewhere")
    await http.post(f"/agents/{ids[0]}/leave")

    default = (await http.get("/agents")).json()
    shared_all = (await http.get("/agents", params={"channel": "shared", "state": "0,1,2,3,4,5,6"})).json()
    page_one = (await http.get("/agents", params={"limit": 2})).json()
    page_two = (await http.get("/agents", params={"limit": 2, "cursor": page_one["meta"]["cursor"]})).json()
    stopped = (await http.get("/agents", params={"state": "4"})).json()
    future = (await http.get("/agents", params={"from_time": int(FROZEN_NOW) + 1})).json()

    def agent_ids(body: dict[str, Any]) -> list[str]:
        return [item["agent_id"] for item in body["data"]["list"]]

    assert default["status"] == "ok"
    assert agent_ids(default) == [ids[1], ids[2], other]
    assert default["data"]["count"] == 3 and default["meta"] == {"cursor": "", "total": 3}
    assert default["data"]["list"][0] == {"start_ts": int(FROZEN_NOW), "status": "RUNNING", "agent_id": ids[1]}
    assert agent_ids(shared_all) == ids
    assert agent_ids(page_one) == [ids[1], ids[2]] and page_one["meta"] == {"cursor": other, "total": 3}
    assert agent_ids(page_two) == [other] and page_two["meta"]["cursor"] == ""
    assert agent_ids(stopped) == [ids[0]]
    assert agent_ids(future) == []


async def test_list_time_window_defaults_to_two_hours(http: httpx.AsyncClient, agora_emulator: AgoraEmulator) -> None:
    await started_agent(http, agora_emulator, idle_timeout=0, token_expires_in=86_400)
    agora_emulator.advance(2 * 3600 + 1)
    assert (await http.get("/agents")).json()["data"]["list"] == []


@pytest.mark.parametrize(
    "params", [{"state": "x"}, {"state": "9"}, {"limit": "0"}, {"limit": "ten"}, {"cursor": "NOPE"}]
)
async def test_list_rejects_bad_parameters(http: httpx.AsyncClient, params: dict[str, str]) -> None:
    assert_error(await http.get("/agents", params=params), 400, "InvalidFieldValue")


# --- update, speak, interrupt, think -----------------------------------------------------------------------


async def test_update_replaces_messages_params_and_token(
    http: httpx.AsyncClient, agora_emulator: AgoraEmulator
) -> None:
    agent_id = await started_agent(http, agora_emulator)
    new_token = _token(agora_emulator, expires_in=7200)
    messages = [{"role": "system", "content": "new base"}, {"role": "system", "content": "memory"}]

    response = await http.post(
        f"/agents/{agent_id}/update",
        json={"properties": {"token": new_token, "llm": {"system_messages": messages, "params": {"max_tokens": 9}}}},
    )

    agent = agora_emulator.agent(agent_id)
    assert response.json() == {"agent_id": agent_id, "create_ts": int(FROZEN_NOW), "status": "RUNNING"}
    assert agent.system_messages == messages
    assert agent.llm_params == {"max_tokens": 9}
    assert agent.token == new_token
    assert agent.llm["url"] == "https://llm.example.test/v1/chat/completions"
    assert agent.request["properties"]["llm"]["params"] == {"model": "gpt-4o-mini"}


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        ({}, 400, "MissingRequiredField"),
        ({"properties": []}, 400, "InvalidFieldValue"),
        ({"properties": {"token": "garbage"}}, 400, "InvalidFieldValue"),
        ({"properties": {"llm": {"system_messages": [{"role": "system"}]}}}, 400, "InvalidFieldValue"),
        ({"properties": {"llm": {"params": "hot"}}}, 400, "InvalidFieldValue"),
    ],
)
async def test_update_rejects_bad_bodies(
    http: httpx.AsyncClient, agora_emulator: AgoraEmulator, body: dict[str, Any], status: int, reason: str
) -> None:
    agent_id = await started_agent(http, agora_emulator)
    assert_error(await http.post(f"/agents/{agent_id}/update", json=body), status, reason)


async def test_update_with_a_token_for_another_channel_is_rejected(
    http: httpx.AsyncClient, agora_emulator: AgoraEmulator
) -> None:
    agent_id = await started_agent(http, agora_emulator)
    token = _token(agora_emulator, channel="elsewhere")
    response = await http.post(f"/agents/{agent_id}/update", json={"properties": {"token": token}})
    assert_error(response, 400, "InvalidFieldValue", "another channel")


async def test_speak_interrupt_think(http: httpx.AsyncClient, agora_emulator: AgoraEmulator) -> None:
    agent_id = await started_agent(http, agora_emulator)
    brief = {"agent_id": agent_id, "channel": "call-channel-1", "start_ts": int(FROZEN_NOW)}

    speak = await http.post(f"/agents/{agent_id}/speak", json={"text": "Hi", "priority": "APPEND"})
    interrupt = await http.post(f"/agents/{agent_id}/interrupt", json={})
    bare_interrupt = await http.post(f"/agents/{agent_id}/interrupt")
    think = await http.post(f"/agents/{agent_id}/think", json={"text": "User is VIP"})

    assert [r.json() for r in (speak, interrupt, bare_interrupt, think)] == [brief] * 4
    agent = agora_emulator.agent(agent_id)
    assert agent.spoken == [{"text": "Hi", "priority": "APPEND"}] and agent.interrupts == 2
    assert [(m.role, m.content) for m in agent.conversation] == [("user", "[think API injected] User is VIP")]


@pytest.mark.parametrize(
    ("operation", "body"),
    [
        ("speak", {}),
        ("speak", {"text": "x" * 513}),
        ("speak", {"text": "hi", "priority": "LOUD"}),
        ("speak", {"text": "hi", "interruptable": "no"}),
        ("think", {}),
        ("think", {"text": "hi", "on_listening_action": "shout"}),
    ],
)
async def test_speak_and_think_validate_bodies(
    http: httpx.AsyncClient, agora_emulator: AgoraEmulator, operation: str, body: dict[str, Any]
) -> None:
    agent_id = await started_agent(http, agora_emulator)
    response = await http.post(f"/agents/{agent_id}/{operation}", json=body)
    assert response.status_code == 400
    assert response.json()["reason"] in {"MissingRequiredField", "InvalidFieldValue"}


# --- failure injection, latency, request log ---------------------------------------------------------------


async def test_fail_next_targets_an_operation_and_counts_down(
    http: httpx.AsyncClient, agora_emulator: AgoraEmulator
) -> None:
    agora_emulator.fail_next(2, 503, operation="list", retry_after=3)

    first = await http.get("/agents")
    joined = await join(http, join_body(agora_emulator))
    second = await http.get("/agents")
    third = await http.get("/agents")

    assert_error(first, 503, "ServiceUnavailable")
    assert first.headers["Retry-After"] == "3"
    assert joined.status_code == 200
    assert second.status_code == 503 and third.status_code == 200


async def test_fail_next_can_answer_with_the_legacy_body(
    http: httpx.AsyncClient, agora_emulator: AgoraEmulator
) -> None:
    agora_emulator.fail_next(1, 409, reason="TaskConflict", detail="old style", legacy_body=True)
    body = (await http.get("/agents")).json()
    assert body == {"message": "old style", "requestResponse": {}, "statusCode": "TaskConflict", "taskId": ""}


async def test_fail_after_processing_performs_the_operation(
    http: httpx.AsyncClient, agora_emulator: AgoraEmulator
) -> None:
    agora_emulator.fail_after_processing_next(1, 503, "join")

    response = await join(http, join_body(agora_emulator))

    assert_error(response, 503, "ServiceUnavailable")
    assert agora_emulator.only_agent().status == "RUNNING"


async def test_injected_failures_do_not_bypass_auth(agora_emulator: AgoraEmulator) -> None:
    agora_emulator.fail_next(1, 503)
    async with httpx.AsyncClient(base_url=agora_emulator.project_url) as anonymous:
        assert (await anonymous.get("/agents")).status_code == 401
    async with httpx.AsyncClient(base_url=agora_emulator.project_url, headers={"Authorization": BASIC}) as http:
        assert (await http.get("/agents")).status_code == 503


async def test_latency_and_request_log(http: httpx.AsyncClient, agora_emulator: AgoraEmulator) -> None:
    agora_emulator.latency = 0.05
    started = time.perf_counter()
    await http.get("/agents")
    elapsed = time.perf_counter() - started

    assert elapsed >= 0.05
    assert agora_emulator.requests == [("GET", f"/api/conversational-ai-agent/v2/projects/{TEST_APP_ID}/agents", 200)]


def test_test_controls_explain_unknown_agents() -> None:
    emulator = AgoraEmulator()
    with pytest.raises(LookupError, match="NOPE"):
        emulator.agent("NOPE")
    with pytest.raises(LookupError):
        emulator.agent_by_label("call_id", "1")
    with pytest.raises(AssertionError, match="exactly one"):
        emulator.only_agent()


async def test_agent_by_label_returns_the_newest(http: httpx.AsyncClient, agora_emulator: AgoraEmulator) -> None:
    old = await started_agent(http, agora_emulator, "a", channel="c1", labels={"user": "u1"})
    await http.post(f"/agents/{old}/leave")
    new = await started_agent(http, agora_emulator, "b", channel="c2", labels={"user": "u1"})
    assert agora_emulator.agent_by_label("user", "u1").agent_id == new
    assert [agent.agent_id for agent in agora_emulator.agents_by_label("user", "u1")] == [old, new]


# --- webhooks ----------------------------------------------------------------------------------------------


async def test_webhooks_are_signed_and_carry_the_documented_payloads(
    emulator_with_webhooks: AgoraEmulator, webhook_receiver: WebhookReceiver
) -> None:
    emulator = emulator_with_webhooks
    async with authorized_http(emulator) as http:
        agent_id = await started_agent(http, emulator, labels={"call_id": "c-1"})
        emulator.user_joined(agent_id)
        emulator.say(agent_id, "user", "remember I like tea")
        await http.post(f"/agents/{agent_id}/leave")
    await emulator.wait_webhooks_idle()

    assert webhook_receiver.signature_failures == 0
    assert webhook_receiver.event_types == [101, 102, 103]
    joined, left, history = webhook_receiver.received
    base = {"agent_id": agent_id, "name": "call-a", "channel": "call-channel-1", "labels": {"call_id": "c-1"}}
    assert joined["productId"] == 17 and {"sid", "noticeId", "notifyMs"} <= set(joined)
    assert joined["payload"] == base | {"start_ts": int(FROZEN_NOW)}
    assert left["payload"] == base | {
        "start_ts": int(FROZEN_NOW),
        "stop_ts": int(FROZEN_NOW),
        "status": "STOPPED",
        "message": "OK",
    }
    assert [(i["role"], i["content"]) for i in history["payload"]["contents"]] == [
        ("assistant", "Hello, how can I help?"),
        ("user", "remember I like tea"),
    ]
    assert parse_notification(json.dumps(history).encode()).contents[1].content == "remember I like tea"
    assert emulator.delivered == webhook_receiver.received


async def test_history_webhook_carries_the_full_last_window(
    emulator_with_webhooks: AgoraEmulator, webhook_receiver: WebhookReceiver
) -> None:
    emulator = emulator_with_webhooks
    async with authorized_http(emulator) as http:
        agent_id = await started_agent(http, emulator, llm={"url": "https://llm.test/v1", "max_history": 3})
    emulator.script(agent_id, [("user", str(i)) for i in range(5)])
    emulator.fail_agent(agent_id)
    await emulator.wait_webhooks_idle()

    history = webhook_receiver.received[-1]
    assert history["eventType"] == 103
    assert [item["content"] for item in history["payload"]["contents"]] == ["2", "3", "4"]
    assert "labels" not in history["payload"]


async def test_duplicate_mode_sends_each_notification_twice(
    emulator_with_webhooks: AgoraEmulator, webhook_receiver: WebhookReceiver
) -> None:
    emulator = emulator_with_webhooks
    emulator.webhook_mode = "duplicate"
    async with authorized_http(emulator) as http:
        await started_agent(http, emulator)
    await emulator.wait_webhooks_idle()

    first, second = webhook_receiver.received
    assert first == second


async def test_reverse_mode_sends_history_before_left(
    emulator_with_webhooks: AgoraEmulator, webhook_receiver: WebhookReceiver
) -> None:
    emulator = emulator_with_webhooks
    emulator.webhook_mode = "reverse"
    async with authorized_http(emulator) as http:
        agent_id = await started_agent(http, emulator)
        await http.post(f"/agents/{agent_id}/leave")
    await emulator.wait_webhooks_idle()
    assert webhook_receiver.event_types == [101, 103, 102]


async def test_off_mode_delivers_nothing_but_records_emissions(
    emulator_with_webhooks: AgoraEmulator, webhook_receiver: WebhookReceiver
) -> None:
    emulator = emulator_with_webhooks
    emulator.webhook_mode = "off"
    async with authorized_http(emulator) as http:
        await started_agent(http, emulator)
    await emulator.wait_webhooks_idle()
    assert webhook_receiver.received == [] and [e["eventType"] for e in emulator.emitted] == [101]


async def test_held_webhooks_are_released_in_any_order(
    emulator_with_webhooks: AgoraEmulator, webhook_receiver: WebhookReceiver
) -> None:
    emulator = emulator_with_webhooks
    emulator.hold_webhooks()
    async with authorized_http(emulator) as http:
        agent_id = await started_agent(http, emulator)
        await http.post(f"/agents/{agent_id}/leave")
    await emulator.wait_webhooks_idle()
    assert webhook_receiver.received == []
    assert [envelope["eventType"] for envelope in emulator.held_webhooks] == [101, 102, 103]

    await emulator.release_webhooks(order=[2, 0, 2])

    assert webhook_receiver.event_types == [103, 101, 103]


async def test_failed_deliveries_are_retried_three_times(
    emulator_with_webhooks: AgoraEmulator, webhook_receiver: WebhookReceiver
) -> None:
    emulator = emulator_with_webhooks
    webhook_receiver.fail_next = 3
    async with authorized_http(emulator) as http:
        await started_agent(http, emulator)
    await emulator.wait_webhooks_idle()

    assert webhook_receiver.event_types == [101]
    assert [attempt.status for attempt in emulator.webhook_attempts] == [500, 500, 500, 200]
    assert len(emulator.delivered) == 1


async def test_a_receiver_that_never_answers_json_is_given_up_after_three_retries(
    emulator_with_webhooks: AgoraEmulator, webhook_receiver: WebhookReceiver
) -> None:
    emulator = emulator_with_webhooks
    webhook_receiver.answer_non_json = True
    async with authorized_http(emulator) as http:
        await started_agent(http, emulator)
    await emulator.wait_webhooks_idle()

    assert len(webhook_receiver.received) == 4
    assert emulator.delivered == [] and len(emulator.undelivered) == 1


async def test_signature_headers_match_the_raw_body(webhook_receiver: WebhookReceiver) -> None:
    async with running_emulator(webhook_url=webhook_receiver.url, webhook_secret="s3cret") as emulator:
        webhook_receiver.secret = "wrong"
        async with authorized_http(emulator) as http:
            await started_agent(http, emulator)
        await emulator.wait_webhooks_idle()
    assert webhook_receiver.signature_failures == 4
    assert verify_signature("s3cret", b"x", {"Agora-Signature-V2": "0"}) is False


async def test_token_expiry_warning_is_emitted_once(
    emulator_with_webhooks: AgoraEmulator, webhook_receiver: WebhookReceiver
) -> None:
    emulator = emulator_with_webhooks
    async with authorized_http(emulator) as http:
        agent_id = await started_agent(http, emulator, token_expires_in=60)
        emulator.advance(29)
        emulator.advance(1)
        emulator.advance(5)
        renewed = _token(emulator, expires_in=600)
        await http.post(f"/agents/{agent_id}/update", json={"properties": {"token": renewed}})
        emulator.advance(10)
    await emulator.wait_webhooks_idle()

    assert webhook_receiver.event_types == [101, 104]
    assert webhook_receiver.received[1]["payload"]["message"] == "Task exceeded maximum lifetime"


async def test_retries_come_at_once_then_at_increasing_intervals(webhook_receiver: WebhookReceiver) -> None:
    async with running_emulator(
        clock=lambda: FROZEN_NOW, webhook_url=webhook_receiver.url, webhook_retry_delays=(0.0, 0.1, 0.25)
    ) as emulator:
        webhook_receiver.fail_next = 3
        async with authorized_http(emulator) as http:
            await started_agent(http, emulator)
        await emulator.wait_webhooks_idle()
    times = [attempt.sent_at for attempt in emulator.webhook_attempts]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert len(gaps) == 3
    assert gaps[0] < gaps[1] < gaps[2] and gaps[1] >= 0.1 and gaps[2] >= 0.25
