from __future__ import annotations

import base64
import json
import logging
import socket
from collections.abc import Callable

import httpx
import pytest

from bot.agora import (
    AgentInfo,
    AgentStarted,
    AgoraAuthError,
    AgoraBadRequest,
    AgoraConflict,
    AgoraError,
    AgoraLimitExceeded,
    AgoraNotFound,
    AgoraRateLimited,
    AgoraUnavailable,
    ConvoAIClient,
    History,
    HistoryItem,
    error_from_response,
)
from standins.agora_emulator import AgoraEmulator, make_join_properties, running_emulator
from tests.agora.conftest import RecordedSleeps, make_client

FAKE_BASE_URL = "https://agora.example.test/api/conversational-ai-agent"


def mock_client(handler: Callable[[httpx.Request], httpx.Response], **overrides: object) -> ConvoAIClient:
    settings: dict[str, object] = {
        "base_url": FAKE_BASE_URL,
        "app_id": "app123",
        "customer_id": "customer",
        "customer_secret": "top-secret-value",
        "transport": httpx.MockTransport(handler),
        "sleep": RecordedSleeps(),
        "jitter": lambda: 1.0,
    }
    settings.update(overrides)
    return ConvoAIClient(**settings)  # type: ignore[arg-type]


async def start_agent(client: ConvoAIClient, emulator: AgoraEmulator, name: str = "call-a", **kw: object) -> str:
    started = await client.join(name, make_join_properties(emulator, **kw))  # type: ignore[arg-type]
    return started.agent_id


# --- happy paths against the emulator ---------------------------------------------------------------------


async def test_join_starts_an_agent_with_the_exact_body(
    convoai_client: ConvoAIClient, agora_emulator: AgoraEmulator
) -> None:
    properties = make_join_properties(agora_emulator, labels={"call_id": "c-1"})

    started = await convoai_client.join("call-a", properties)

    agent = agora_emulator.only_agent()
    assert started == AgentStarted(agent.agent_id, int(agora_emulator.now()), "RUNNING")
    assert agent.request == {"name": "call-a", "properties": properties}
    assert (agent.name, agent.channel, agent.labels) == ("call-a", "call-channel-1", {"call_id": "c-1"})


async def test_join_with_preset_sends_it(convoai_client: ConvoAIClient, agora_emulator: AgoraEmulator) -> None:
    properties = make_join_properties(agora_emulator)
    del properties["llm"]["url"]
    properties["tts"] = {"vendor": "minimax", "params": {"voice_setting": {"voice_id": "English_captivating_female1"}}}

    await convoai_client.join("call-a", properties, preset="openai_gpt_4o_mini,minimax_speech_2_6_turbo")

    assert agora_emulator.only_agent().request["preset"] == "openai_gpt_4o_mini,minimax_speech_2_6_turbo"


async def test_query_reports_running_then_stopped(convoai_client: ConvoAIClient, agora_emulator: AgoraEmulator) -> None:
    agent_id = await start_agent(convoai_client, agora_emulator)
    now = int(agora_emulator.now())

    running = await convoai_client.query(agent_id)
    await convoai_client.leave(agent_id)
    stopped = await convoai_client.query(agent_id)

    assert running == AgentInfo(agent_id, "RUNNING", "call-a", now, None, "")
    assert stopped == AgentInfo(agent_id, "STOPPED", "call-a", now, now, "agent exits with reason: OK")


async def test_leave_returns_true_then_false_when_already_gone(
    convoai_client: ConvoAIClient, agora_emulator: AgoraEmulator
) -> None:
    agent_id = await start_agent(convoai_client, agora_emulator)

    assert await convoai_client.leave(agent_id) is True
    assert await convoai_client.leave(agent_id) is False
    assert await convoai_client.leave("NEVER-EXISTED") is False
    assert agora_emulator.agent(agent_id).status == "STOPPED"


async def test_history_returns_role_and_content_and_ignores_extras(
    convoai_client: ConvoAIClient, agora_emulator: AgoraEmulator
) -> None:
    agent_id = await start_agent(convoai_client, agora_emulator)
    agora_emulator.user_joined(agent_id)
    agora_emulator.script(agent_id, [("user", "I like tea"), ("assistant", "Noted!")])

    history = await convoai_client.history(agent_id)

    assert history == History(
        agent_id=agent_id,
        status="RUNNING",
        start_ts=int(agora_emulator.now()),
        contents=(
            HistoryItem("assistant", "Hello, how can I help?"),
            HistoryItem("user", "I like tea"),
            HistoryItem("assistant", "Noted!"),
        ),
    )


async def test_history_of_a_stopped_agent_is_not_found(
    convoai_client: ConvoAIClient, agora_emulator: AgoraEmulator
) -> None:
    agent_id = await start_agent(convoai_client, agora_emulator)
    await convoai_client.leave(agent_id)

    with pytest.raises(AgoraNotFound) as caught:
        await convoai_client.history(agent_id)
    assert caught.value.reason == "TaskNotFound"


async def test_update_replaces_system_messages_and_params(
    convoai_client: ConvoAIClient, agora_emulator: AgoraEmulator
) -> None:
    agent_id = await start_agent(convoai_client, agora_emulator)
    memory = [{"role": "system", "content": "base"}, {"role": "system", "content": "memory"}]

    result = await convoai_client.update(agent_id, {"llm": {"system_messages": memory, "params": {"temperature": 0.2}}})

    agent = agora_emulator.agent(agent_id)
    assert result.agent_id == agent_id
    assert agent.system_messages == memory
    assert agent.llm_params == {"temperature": 0.2}


async def test_list_agents_follows_cursor_pages(agora_emulator: AgoraEmulator, recorded_sleeps: RecordedSleeps) -> None:
    async with make_client(agora_emulator, recorded_sleeps) as client:
        started = [
            await start_agent(client, agora_emulator, f"call-{index}", channel="shared", agent_uid=str(1000 + index))
            for index in range(5)
        ]
        await start_agent(client, agora_emulator, "elsewhere", channel="other")
        await client.leave(started[0])

        listed = await client.list_agents(channel="shared", limit=2)
        everything = await client.list_agents(channel="shared", states=(2, 4), limit=2)

    assert [agent.agent_id for agent in listed] == started[1:]
    assert [agent.agent_id for agent in everything] == started
    assert all(agent.name is None and agent.start_ts for agent in listed)
    assert agora_emulator.count_calls("list") == 2 + 3


async def test_ping_makes_one_request(convoai_client: ConvoAIClient, agora_emulator: AgoraEmulator) -> None:
    await convoai_client.ping()
    assert agora_emulator.count_calls("list", 200) == 1


async def test_ping_with_wrong_secret_names_the_settings_to_check(
    agora_emulator: AgoraEmulator, recorded_sleeps: RecordedSleeps
) -> None:
    async with make_client(agora_emulator, recorded_sleeps, customer_secret="wrong-secret") as client:
        with pytest.raises(AgoraAuthError) as caught:
            await client.ping()
    assert caught.value.status == 401
    assert "agora.customer_id" in str(caught.value)
    assert "AGORA_CUSTOMER_SECRET" in str(caught.value)
    assert recorded_sleeps.delays == []


async def test_client_is_an_async_context_manager_that_closes_its_pool(agora_emulator: AgoraEmulator) -> None:
    client = make_client(agora_emulator, RecordedSleeps())
    async with client as entered:
        assert entered is client
        await client.ping()
    with pytest.raises(RuntimeError, match="closed"):
        await client.ping()


# --- request shape (MockTransport) -------------------------------------------------------------------------


async def test_requests_carry_basic_auth_user_agent_json_and_timeout() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"agent_id": "A1", "create_ts": 5, "status": "RUNNING"})

    async with mock_client(handler, timeout=4.5) as client:
        await client.join("n", {"channel": "c"})

    request = seen[0]
    expected_auth = "Basic " + base64.b64encode(b"customer:top-secret-value").decode()
    assert str(request.url) == FAKE_BASE_URL + "/v2/projects/app123/join"
    assert request.headers["Authorization"] == expected_auth
    assert "memory-call-bot" in request.headers["User-Agent"]
    assert request.headers["Content-Type"] == "application/json"
    assert json.loads(request.content) == {"name": "n", "properties": {"channel": "c"}}
    assert request.extensions["timeout"] == {"connect": 4.5, "read": 4.5, "write": 4.5, "pool": 4.5}


async def test_agent_ids_are_path_escaped() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.raw_path.decode())
        return httpx.Response(200, json={})

    async with mock_client(handler, base_url=FAKE_BASE_URL + "/") as client:
        await client.leave("a/b c")

    assert seen == ["/api/conversational-ai-agent/v2/projects/app123/agents/a%2Fb%20c/leave"]


async def test_leave_accepts_an_empty_200_body() -> None:
    async with mock_client(lambda request: httpx.Response(200, content=b"")) as client:
        assert await client.leave("A1") is True


async def test_null_fields_are_tolerated() -> None:
    body = {"agent_id": "A1", "status": None, "start_ts": None, "contents": [{"role": "user", "content": None}]}
    async with mock_client(lambda request: httpx.Response(200, json=body)) as client:
        history = await client.history("A1")
    assert history == History("A1", "", None, (HistoryItem("user", ""),))


async def test_history_items_with_a_role_that_cannot_be_stored_are_dropped() -> None:
    contents = [
        {"role": "user", "content": "hello"},
        {"role": "system", "content": "injected"},
        {"role": None, "content": "no role"},
        {"role": "assistant", "content": "hi"},
    ]
    body = {"agent_id": "A1", "status": "RUNNING", "start_ts": 1, "contents": contents}
    async with mock_client(lambda request: httpx.Response(200, json=body)) as client:
        history = await client.history("A1")
    assert history.contents == (HistoryItem("user", "hello"), HistoryItem("assistant", "hi"))


@pytest.mark.parametrize("content", [b"<html>oops</html>", b"[1, 2]"])
async def test_a_2xx_that_is_not_a_json_object_is_an_agora_error(content: bytes) -> None:
    async with mock_client(lambda request: httpx.Response(200, content=content)) as client:
        with pytest.raises(AgoraError) as caught:
            await client.query("A1")
    assert caught.value.reason == "InvalidResponse"


def test_repr_does_not_reveal_the_secret() -> None:
    client = mock_client(lambda request: httpx.Response(200))
    assert "top-secret-value" not in repr(client)


@pytest.mark.parametrize(
    ("setting", "value", "named"),
    [
        ("customer_id", "", "agora.customer_id"),
        ("customer_secret", "", "AGORA_CUSTOMER_SECRET"),
        ("app_id", "", "agora.app_id"),
    ],
)
def test_missing_credentials_are_rejected_at_construction(setting: str, value: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        mock_client(lambda request: httpx.Response(200), **{setting: value})


# --- error mapping -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error_class"),
    [
        (400, AgoraBadRequest),
        (401, AgoraAuthError),
        (403, AgoraAuthError),
        (404, AgoraNotFound),
        (409, AgoraConflict),
        (422, AgoraLimitExceeded),
        (429, AgoraRateLimited),
        (500, AgoraUnavailable),
        (502, AgoraUnavailable),
        (503, AgoraUnavailable),
        (504, AgoraUnavailable),
        (418, AgoraError),
    ],
)
def test_status_maps_to_error_class(status: int, error_class: type[AgoraError]) -> None:
    error = error_from_response("join", status, b'{"detail": "d", "reason": "SomethingNew"}')
    assert type(error) is error_class
    assert (error.operation, error.status, error.reason, error.detail) == ("join", status, "SomethingNew", "d")
    assert "join" in str(error) and str(status) in str(error) and "SomethingNew" in str(error)


def test_old_error_shape_is_parsed() -> None:
    body = {
        "message": "create agent failed, code: 409, msg: task conflict",
        "requestResponse": {},
        "statusCode": "TaskConflict",
        "taskId": "EXISTING123",
    }
    error = error_from_response("join", 409, json.dumps(body))
    assert isinstance(error, AgoraConflict)
    assert error.reason == "TaskConflict"
    assert error.detail == "create agent failed, code: 409, msg: task conflict"
    assert error.task_id == "EXISTING123"


@pytest.mark.parametrize("body", [b"", b"Bad Gateway", b"\xff\xfe", b"null", b'"text"', b"{}"])
def test_odd_error_bodies_still_give_an_error(body: bytes) -> None:
    error = error_from_response("query", 502, body)
    assert isinstance(error, AgoraUnavailable)
    assert error.status == 502


def test_huge_error_details_are_truncated() -> None:
    error = error_from_response("query", 500, "x" * 10_000)
    assert len(error.detail) < 600


async def test_current_error_shape_from_the_emulator(
    convoai_client: ConvoAIClient, agora_emulator: AgoraEmulator
) -> None:
    properties = make_join_properties(agora_emulator)
    del properties["channel"]

    with pytest.raises(AgoraBadRequest) as caught:
        await convoai_client.join("call-a", properties)

    assert caught.value.reason == "MissingRequiredField"
    assert "properties.channel" in caught.value.detail


async def test_old_error_shape_over_http() -> None:
    body = {"message": "bad things", "requestResponse": {}, "statusCode": "InvalidRequest", "taskId": ""}
    async with mock_client(lambda request: httpx.Response(400, json=body)) as client:
        with pytest.raises(AgoraBadRequest) as caught:
            await client.join("n", {})
    assert (caught.value.reason, caught.value.detail, caught.value.task_id) == ("InvalidRequest", "bad things", None)


# --- retries -----------------------------------------------------------------------------------------------


async def test_history_retries_503_twice_then_succeeds(
    convoai_client: ConvoAIClient, agora_emulator: AgoraEmulator, recorded_sleeps: RecordedSleeps
) -> None:
    agent_id = await start_agent(convoai_client, agora_emulator)
    agora_emulator.fail_next(2, 503, operation="history")

    history = await convoai_client.history(agent_id)

    assert history.agent_id == agent_id
    assert agora_emulator.count_calls("history") == 3
    assert recorded_sleeps.delays == [0.2, 0.4]


async def test_backoff_is_exponential_full_jitter_capped_and_the_budget_is_bounded(
    agora_emulator: AgoraEmulator,
) -> None:
    sleeps = RecordedSleeps()
    jitters = iter([1.0, 1.0, 1.0, 1.0, 0.5])
    async with make_client(agora_emulator, sleeps, max_retries=5, jitter=lambda: next(jitters)) as client:
        agent_id = await start_agent(client, agora_emulator)
        agora_emulator.fail_next(100, 503, operation="history")
        with pytest.raises(AgoraUnavailable) as caught:
            await client.history(agent_id)

    assert caught.value.status == 503
    assert agora_emulator.count_calls("history") == 6
    assert sleeps.delays == [0.2, 0.4, 0.8, 1.6, 1.0]


async def test_retry_after_is_respected_and_capped(
    convoai_client: ConvoAIClient, agora_emulator: AgoraEmulator, recorded_sleeps: RecordedSleeps
) -> None:
    agent_id = await start_agent(convoai_client, agora_emulator)
    agora_emulator.fail_next(1, 429, operation="query", retry_after=1.5)
    agora_emulator.fail_next(1, 429, operation="query", retry_after=30)

    await convoai_client.query(agent_id)

    assert recorded_sleeps.delays == [1.5, 2.0]


async def test_rate_limit_exhaustion_raises_rate_limited(
    convoai_client: ConvoAIClient, agora_emulator: AgoraEmulator
) -> None:
    agora_emulator.fail_next(4, 429, operation="list")
    with pytest.raises(AgoraRateLimited):
        await convoai_client.ping()
    assert agora_emulator.count_calls("list") == 4


async def test_join_retry_after_unprocessed_503_reuses_the_name(
    convoai_client: ConvoAIClient, agora_emulator: AgoraEmulator
) -> None:
    agora_emulator.fail_next(1, 503, operation="join")

    started = await convoai_client.join("call-a", make_join_properties(agora_emulator))

    assert agora_emulator.count_calls("join") == 2
    assert agora_emulator.only_agent().agent_id == started.agent_id
    assert agora_emulator.only_agent().name == "call-a"


async def test_join_whose_response_was_lost_proves_ownership_on_409(
    convoai_client: ConvoAIClient, agora_emulator: AgoraEmulator
) -> None:
    agora_emulator.fail_after_processing_next(1, 503, "join")

    started = await convoai_client.join("call-a", make_join_properties(agora_emulator))

    agent = agora_emulator.only_agent()
    assert started == AgentStarted(agent.agent_id, agent.start_ts, "RUNNING")
    assert [call.status for call in agora_emulator.calls if call.operation == "join"] == [503, 409]


async def test_join_409_after_a_lost_response_with_a_foreign_agent_is_a_conflict(
    convoai_client: ConvoAIClient, agora_emulator: AgoraEmulator
) -> None:
    await convoai_client.join("call-a", make_join_properties(agora_emulator, channel="someone-elses"))
    agora_emulator.fail_next(1, 504, operation="join")

    with pytest.raises(AgoraConflict):
        await convoai_client.join("call-a", make_join_properties(agora_emulator, channel="mine"))

    assert len(agora_emulator.agents) == 1


async def test_first_attempt_409_is_a_conflict_without_ownership_checks(
    convoai_client: ConvoAIClient, agora_emulator: AgoraEmulator
) -> None:
    await start_agent(convoai_client, agora_emulator)

    with pytest.raises(AgoraConflict) as caught:
        await start_agent(convoai_client, agora_emulator)

    assert caught.value.reason == "TaskConflict"
    assert agora_emulator.count_calls("list") == 0
    assert agora_emulator.count_calls("query") == 0


async def test_409_after_only_a_rate_limited_attempt_is_a_conflict(
    convoai_client: ConvoAIClient, agora_emulator: AgoraEmulator
) -> None:
    await start_agent(convoai_client, agora_emulator)
    agora_emulator.fail_next(1, 429, operation="join")

    with pytest.raises(AgoraConflict):
        await start_agent(convoai_client, agora_emulator)
    assert agora_emulator.count_calls("list") == 0


async def test_concurrency_limit_is_not_retried(recorded_sleeps: RecordedSleeps) -> None:
    async with running_emulator(max_concurrent=1) as emulator, make_client(emulator, recorded_sleeps) as client:
        await start_agent(client, emulator, "first")
        with pytest.raises(AgoraLimitExceeded) as caught:
            await start_agent(client, emulator, "second", channel="other")
    assert caught.value.reason == "ConcurrencyLimitExceeded"
    assert emulator.count_calls("join") == 2
    assert recorded_sleeps.delays == []


@pytest.mark.parametrize(("status", "error_class"), [(400, AgoraBadRequest), (500, AgoraUnavailable)])
async def test_400_and_500_are_not_retried(
    convoai_client: ConvoAIClient,
    agora_emulator: AgoraEmulator,
    recorded_sleeps: RecordedSleeps,
    status: int,
    error_class: type[AgoraError],
) -> None:
    agora_emulator.fail_next(1, status, operation="join")

    with pytest.raises(error_class):
        await start_agent(convoai_client, agora_emulator)

    assert agora_emulator.count_calls("join") == 1
    assert recorded_sleeps.delays == []


async def test_leave_that_landed_before_a_504_returns_true(
    convoai_client: ConvoAIClient, agora_emulator: AgoraEmulator
) -> None:
    agent_id = await start_agent(convoai_client, agora_emulator)
    agora_emulator.fail_after_processing_next(1, 504, "leave")

    assert await convoai_client.leave(agent_id) is True
    assert [call.status for call in agora_emulator.calls if call.operation == "leave"] == [504, 404]


async def test_leave_404_after_only_a_rate_limit_means_it_was_already_gone(
    convoai_client: ConvoAIClient, agora_emulator: AgoraEmulator
) -> None:
    agent_id = await start_agent(convoai_client, agora_emulator)
    agora_emulator.fail_agent(agent_id)
    agora_emulator.fail_next(1, 429, operation="leave")

    assert await convoai_client.leave(agent_id) is False


async def test_update_is_retried_on_503(convoai_client: ConvoAIClient, agora_emulator: AgoraEmulator) -> None:
    agent_id = await start_agent(convoai_client, agora_emulator)
    agora_emulator.fail_after_processing_next(1, 503, "update")

    await convoai_client.update(agent_id, {"llm": {"params": {"temperature": 0.1}}})

    assert agora_emulator.count_calls("update") == 2
    assert agora_emulator.agent(agent_id).llm_params == {"temperature": 0.1}


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_connection_refused_is_unavailable_without_status_after_bounded_retries() -> None:
    sleeps = RecordedSleeps()
    client = ConvoAIClient(
        base_url=f"http://127.0.0.1:{_closed_port()}/api/conversational-ai-agent",
        app_id="app",
        customer_id="customer",
        customer_secret="secret",
        max_retries=2,
        sleep=sleeps,
    )
    async with client:
        with pytest.raises(AgoraUnavailable) as caught:
            await client.query("A1")

    assert caught.value.status is None
    assert caught.value.reason == "TransportError"
    assert len(sleeps.delays) == 2


async def test_read_timeout_is_retried_then_unavailable(
    agora_emulator: AgoraEmulator, recorded_sleeps: RecordedSleeps
) -> None:
    agora_emulator.latency = 0.2
    async with make_client(agora_emulator, recorded_sleeps, timeout=0.05, max_retries=1) as client:
        with pytest.raises(AgoraUnavailable) as caught:
            await client.ping()

    assert (caught.value.status, caught.value.reason) == (None, "Timeout")
    assert len(recorded_sleeps.delays) == 1


async def test_leave_after_a_timed_out_attempt_that_landed_returns_true(
    agora_emulator: AgoraEmulator, recorded_sleeps: RecordedSleeps
) -> None:
    async with make_client(agora_emulator, recorded_sleeps) as setup_client:
        agent_id = await start_agent(setup_client, agora_emulator)

    async def sleep_then_drop_latency(seconds: float) -> None:
        agora_emulator.latency = 0.0
        await recorded_sleeps(seconds)

    agora_emulator.latency = 0.6
    async with make_client(agora_emulator, recorded_sleeps, timeout=0.3, sleep=sleep_then_drop_latency) as client:
        assert await client.leave(agent_id) is True

    assert agora_emulator.agent(agent_id).status == "STOPPED"


async def test_logs_never_contain_the_secret_or_tokens(
    caplog: pytest.LogCaptureFixture, agora_emulator: AgoraEmulator, recorded_sleeps: RecordedSleeps
) -> None:
    caplog.set_level(logging.DEBUG)
    properties = make_join_properties(agora_emulator)
    async with make_client(agora_emulator, recorded_sleeps) as client:
        agora_emulator.fail_after_processing_next(1, 503, "join")
        await client.join("call-a", properties)
        agora_emulator.fail_next(1, 401, operation="list")
        with pytest.raises(AgoraAuthError) as caught:
            await client.ping()

    assert "retrying" in caplog.text
    for secret in (agora_emulator.customer_secret, properties["token"]):
        assert secret not in caplog.text
        assert secret not in str(caught.value)
