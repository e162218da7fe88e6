"""The emulator where Agora's own SDK (``agora-agents``) and token tools are the reference: token auth as the SDK
sends it, tokens as Agora's builders and parser make and read them, NCS resends, the CLI's one port, and the
Deepgram ASR preset."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from aiohttp import web

from bot.agora import build_rtc_token, verify_signature
from standins.agora_emulator import (
    ASR_LANGUAGES,
    NCS_RECEIVER_TIMEOUT_SECONDS,
    TEST_APP_CERTIFICATE,
    TEST_APP_ID,
    TEST_CUSTOMER_ID,
    TEST_CUSTOMER_SECRET,
    TEST_WEBHOOK_SECRET,
    AgoraEmulator,
    ControlledAgoraEmulator,
    make_join_properties,
    running_emulator,
)
from standins.harness import free_port
from tests.agora.conftest import BASIC, FROZEN_NOW, agora_built_token, packed_string, token_service

OTHER_APP_ID = "fedcba9876543210fedcba9876543210"
OTHER_CERTIFICATE = "0123456789abcdef0123456789abcdef"


def sdk_client(emulator: AgoraEmulator, monkeypatch: pytest.MonkeyPatch, **auth: str) -> Any:
    """Agora's async client pointed at the emulator (spec §1: the variable is read when the client is built)."""
    monkeypatch.setenv("AGORA_AGENTS_API_BASE_URL", f"http://127.0.0.1:{emulator.port}")
    from agora_agent import Area, AsyncAgora

    return AsyncAgora(area=Area.US, app_id=TEST_APP_ID, **auth)


def sdk_session(client: Any, name: str) -> Any:
    """The memory recipe's pipeline (spec §8): Agora-managed Deepgram, GPT-4o mini and MiniMax."""
    from agora_agent.agentkit import Agent
    from agora_agent.agentkit.vendors import DeepgramSTT, MiniMaxTTS, OpenAI

    agent = (
        Agent(client=client, greeting="Hi!", max_history=32)
        .with_stt(DeepgramSTT(model="nova-3", language="en"))
        .with_llm(OpenAI(model="gpt-4o-mini", system_messages=[{"role": "system", "content": "BASE"}]))
        .with_tts(MiniMaxTTS(model="speech_2_6_turbo", voice_id="English_captivating_female1"))
    )
    return agent.create_async_session(channel=f"ch-{name}", agent_uid="1001", remote_uids=["2002"], name=name)


def assert_401(response: httpx.Response, detail_fragment: str) -> None:
    assert response.status_code == 401, response.text
    body = response.json()
    assert set(body) == {"detail", "reason"} and body["reason"] == "InvalidPermission"
    assert detail_fragment in body["detail"], body


# --- REST auth: Authorization: agora token=<007...> (spec §2) -------------------------------------------------


@pytest.mark.parametrize(
    "auth",
    [
        {"app_certificate": TEST_APP_CERTIFICATE},  # the SDK's default: a fresh "agora token=" per request
        {  # Basic keeps working (the certificate then only mints the agent's properties.token)
            "app_certificate": TEST_APP_CERTIFICATE,
            "customer_id": TEST_CUSTOMER_ID,
            "customer_secret": TEST_CUSTOMER_SECRET,
        },
    ],
    ids=["agora-token", "basic"],
)
async def test_agoras_sdk_runs_sessions_against_the_emulator(
    monkeypatch: pytest.MonkeyPatch, auth: dict[str, str]
) -> None:
    async with running_emulator() as emulator:  # the SDK stamps its tokens with the wall clock
        client = sdk_client(emulator, monkeypatch, **auth)
        session = sdk_session(client, "sdk-a")
        agent_id = await session.start()
        emulator.user_joined(agent_id)
        history = await session.get_history()
        await session.stop()
        other = await sdk_session(client, "sdk-b").start()
        await client.stop_agent(other)  # signed with a token for channel "stop" and uid 0

    assert [item.content for item in history.contents] == ["Hi!"]
    assert emulator.agent(agent_id).status == emulator.agent(other).status == "STOPPED"
    assert [(call.operation, call.status) for call in emulator.calls] == [
        ("join", 200),
        ("history", 200),
        ("leave", 200),
        ("join", 200),
        ("leave", 200),
    ]


async def test_a_token_signed_with_another_certificate_gets_agoras_401(monkeypatch: pytest.MonkeyPatch) -> None:
    from agora_agent.core.api_error import ApiError

    async with running_emulator() as emulator:
        client = sdk_client(emulator, monkeypatch, app_certificate=OTHER_CERTIFICATE)
        with pytest.raises(ApiError) as raised:
            await sdk_session(client, "sdk-a").start()

    assert raised.value.status_code == 401
    assert raised.value.body["reason"] == "InvalidPermission"
    assert "signature" in raised.value.body["detail"]
    assert emulator.agents == {}


async def test_an_expired_or_foreign_agora_token_is_401(monkeypatch: pytest.MonkeyPatch) -> None:
    from agora_agent.agentkit.token import generate_convo_ai_token

    fresh = generate_convo_ai_token(TEST_APP_ID, TEST_APP_CERTIFICATE, "stop", 0, token_expire=600)
    foreign = build_rtc_token(OTHER_APP_ID, TEST_APP_CERTIFICATE, "stop", 0, 600)
    async with running_emulator() as emulator, httpx.AsyncClient(base_url=emulator.project_url) as http:

        async def agents(authorization: str) -> httpx.Response:
            return await http.get("/agents", headers={"Authorization": authorization})

        assert (await agents(f"agora token={fresh}")).status_code == 200
        assert_401(await agents(f"agora token={foreign}"), "another app id")
        assert_401(await agents("agora token="), "agora token=<token>")
        assert_401(await agents(f"agora {fresh}"), "agora token=<token>")
        emulator.advance(600)
        assert_401(await agents(f"agora token={fresh}"), "expired")
        assert (await agents(BASIC)).status_code == 200


# --- tokens as Agora's builders and parser make and read them (spec §7) --------------------------------------


def rtc_and_rtm(channel: str, uid: bytes, *extra: tuple[int, bytes]) -> list[tuple[int, bytes]]:
    """``RtcTokenBuilder2.build_token_with_rtm(..., privilege_expire=0)``'s services: RTC privileges 0 (Agora's
    default) and the RTM login for the token's lifetime, plus ``extra`` services."""
    rtc = token_service(1, dict.fromkeys((1, 2, 3, 4), 0), packed_string(channel.encode()), packed_string(uid))
    return [rtc, token_service(2, {1: 3600}, packed_string(uid)), *extra]


async def join_with(http: httpx.AsyncClient, emulator: AgoraEmulator, token: str, **properties: Any) -> httpx.Response:
    body = {"name": "agent-x", "properties": make_join_properties(emulator, channel="tok-1", token=token, **properties)}
    return await http.post("/join", json=body, headers={"Authorization": f"agora token={token}"})


async def test_a_privilege_expiry_of_zero_lasts_until_the_token_expires(
    agora_emulator: AgoraEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = agora_built_token(monkeypatch, rtc_and_rtm("tok-1", b"1001"), issued_at=FROZEN_NOW, expire=3600)
    async with httpx.AsyncClient(base_url=agora_emulator.project_url) as http:
        response = await join_with(http, agora_emulator, token, advanced_features={"enable_rtm": True})
        assert response.status_code == 200, response.text
        agora_emulator.advance(3600)
        assert_401(await http.get("/agents", headers={"Authorization": f"agora token={token}"}), "expired")


async def test_a_token_with_a_service_type_the_parser_does_not_know_is_accepted(
    agora_emulator: AgoraEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    newer = token_service(4242, {1: 3600}, b"a service Agora added after this parser")
    token = agora_built_token(monkeypatch, rtc_and_rtm("tok-1", b"1001", newer), issued_at=FROZEN_NOW, expire=3600)
    async with httpx.AsyncClient(base_url=agora_emulator.project_url) as http:
        response = await join_with(http, agora_emulator, token, advanced_features={"enable_rtm": True})
    assert response.status_code == 200, response.text


# --- NCS resends (spec §6) --------------------------------------------------------------------------------------


@pytest.fixture
async def flaky_receiver() -> AsyncIterator[tuple[str, list[tuple[bytes, dict[str, str]]], list[float]]]:
    """Records every delivery attempt (raw body, headers), fails the first two with 500, and moves the emulator's
    clock (the list it yields) 5 s on per attempt."""
    attempts: list[tuple[bytes, dict[str, str]]] = []
    clock = [FROZEN_NOW]

    async def handle(request: web.Request) -> web.Response:
        attempts.append((await request.read(), dict(request.headers)))
        clock[0] += 5
        if len(attempts) <= 2:
            return web.json_response({"code": 1, "msg": "try again"}, status=500)
        return web.json_response({"code": 0, "msg": "success"})

    app = web.Application()
    app.router.add_post("/ncs", handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/ncs", attempts, clock
    finally:
        await runner.cleanup()


async def test_each_resend_is_restamped_and_signed_anew(
    flaky_receiver: tuple[str, list[tuple[bytes, dict[str, str]]], list[float]],
) -> None:
    url, attempts, clock = flaky_receiver
    async with running_emulator(clock=lambda: clock[0], webhook_url=url) as emulator:
        async with httpx.AsyncClient(base_url=emulator.project_url, headers={"Authorization": BASIC}) as http:
            response = await http.post("/join", json={"name": "a", "properties": make_join_properties(emulator)})
            assert response.status_code == 200, response.text
        await emulator.wait_webhooks_idle()

    envelopes = [json.loads(raw) for raw, _ in attempts]
    sent_at_ms = int(FROZEN_NOW * 1000)
    assert [envelope["notifyMs"] for envelope in envelopes] == [sent_at_ms, sent_at_ms + 5000, sent_at_ms + 10_000]
    unchanged = [{key: value for key, value in envelope.items() if key != "notifyMs"} for envelope in envelopes]
    assert unchanged == [unchanged[0]] * 3  # the same noticeId, sid, eventType and payload each time
    for raw, headers in attempts:
        assert verify_signature(TEST_WEBHOOK_SECRET, raw, {"Agora-Signature-V2": headers["Agora-Signature-V2"]})
        assert verify_signature(TEST_WEBHOOK_SECRET, raw, {"Agora-Signature": headers["Agora-Signature"]})
    assert len({headers["Agora-Signature-V2"] for _, headers in attempts}) == 3
    assert emulator.delivered == [json.loads(attempts[-1][0])]


def test_the_receiver_gets_agoras_ten_seconds_to_answer() -> None:
    assert NCS_RECEIVER_TIMEOUT_SECONDS == 10.0
    assert AgoraEmulator().webhook_timeout == NCS_RECEIVER_TIMEOUT_SECONDS


# --- the command line's port ------------------------------------------------------------------------------------


async def test_a_fixed_port_is_the_only_port_listened_on() -> None:
    port = free_port()
    async with ControlledAgoraEmulator(port=port, clock=lambda: FROZEN_NOW) as emulator:
        assert emulator._runner is not None
        assert [address[1] for address in emulator._runner.addresses] == [port]
        async with httpx.AsyncClient(headers={"Authorization": BASIC}) as client:
            assert (await client.get(f"{emulator.project_url}/agents")).status_code == 200
            assert (await client.get(f"{emulator.control_url}/stats")).status_code == 200


# --- the Deepgram ASR preset (spec §4.1) -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("asr", "status"),
    [
        ({"vendor": "deepgram", "language": "en-US", "params": {"language": "en"}}, 200),  # the SDK's, the bot's
        ({"language": "en-US", "keyterm": "agora"}, 200),  # Agora's Deepgram page: no vendor, no params
        ({"params": {"language": "en", "keyterm": "agora"}}, 200),  # Agora's presets page
        ({"vendor": "microsoft", "params": {"language": "en-US"}}, 400),
        ({"vendor": "deepgram", "params": {"language": ""}}, 400),
        ({"vendor": "deepgram", "params": {"language": 7}}, 400),
        ({"vendor": "deepgram", "params": "en"}, 400),
        ({"vendor": "deepgram", "language": "es-ES", "params": {"language": "es"}}, 200),  # a Spanish call
        ({"vendor": "deepgram", "language": "es-ES", "params": {"language": "en-US"}}, 400),  # two languages
        ({"vendor": "deepgram", "language": "es", "params": {"language": "es"}}, 400),  # not a documented value
    ],
)
async def test_a_deepgram_preset_refuses_another_vendor_or_a_bad_language(
    agora_emulator: AgoraEmulator, asr: dict[str, Any], status: int
) -> None:
    body = {"name": "dg", "preset": "deepgram_nova_3", "properties": make_join_properties(agora_emulator, asr=asr)}
    async with httpx.AsyncClient(base_url=agora_emulator.project_url, headers={"Authorization": BASIC}) as http:
        response = await http.post("/join", json=body)
    assert response.status_code == status, response.text
    if status == 400:
        assert response.json()["reason"] == "InvalidFieldValue"
        assert "properties.asr" in response.json()["detail"]


def test_the_asr_languages_are_the_ones_agoras_sdk_documents() -> None:
    from typing import get_args

    from agora_agent.types.asr_language import AsrLanguage

    assert set(get_args(get_args(AsrLanguage)[0])) == ASR_LANGUAGES


@pytest.mark.parametrize(
    ("language", "status"), [("en-US", 200), ("de-DE", 200), ("de", 400), ("german", 400), (7, 400)]
)
async def test_the_asr_language_must_be_one_agora_documents(
    agora_emulator: AgoraEmulator, language: object, status: int
) -> None:
    body = {"name": "lang", "properties": make_join_properties(agora_emulator, asr={"language": language})}
    async with httpx.AsyncClient(base_url=agora_emulator.project_url, headers={"Authorization": BASIC}) as http:
        response = await http.post("/join", json=body)
    assert response.status_code == status, response.text


@pytest.mark.parametrize(("boost", "status"), [(None, 200), ("Spanish", 200), ("Chinese,Yue", 200), ("es", 400)])
async def test_a_minimax_language_boost_must_be_one_minimax_names(
    agora_emulator: AgoraEmulator, boost: str | None, status: int
) -> None:
    params: dict[str, Any] = {"voice_setting": {"voice_id": "Spanish_SereneWoman"}}
    if boost is not None:
        params["language_boost"] = boost
    properties = make_join_properties(agora_emulator, tts={"vendor": "minimax", "params": params})
    body = {"name": "boost", "preset": "minimax_speech_2_6_turbo", "properties": properties}
    async with httpx.AsyncClient(base_url=agora_emulator.project_url, headers={"Authorization": BASIC}) as http:
        response = await http.post("/join", json=body)
    assert response.status_code == status, response.text
