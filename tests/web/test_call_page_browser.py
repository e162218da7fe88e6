"""The call page in real headless Chromium (Playwright), against the real web server, the in-memory backend
and the Agora SDK stub (standins/agora_sdk_stub.js, served from another origin). One browser per session.

Also takes a screenshot of the page in its active state (docs/call-page.png with UPDATE_DOCS_SCREENSHOT=1)."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
import pytest_asyncio
from playwright.async_api import expect

from bot.web.server import WebServer
from standins.harness import eventually
from tests.web.conftest import REPO_ROOT
from tests.web.fake_backend import FAKE_APP_ID, FakeCallPageBackend

pytestmark = pytest.mark.asyncio(loop_scope="session")

DOCS_SCREENSHOT = REPO_ROOT / "docs" / "call-page.png"
# The README's picture is refreshed on request (UPDATE_DOCS_SCREENSHOT=1), so a test run leaves the tree clean.
SCREENSHOT_PATH = (
    DOCS_SCREENSHOT if os.environ.get("UPDATE_DOCS_SCREENSHOT") else REPO_ROOT / "test-artifacts" / "call-page.png"
)
USER_UID = 1001
AGENT_UID = 2002


@dataclass
class CallPage:
    page: Any
    token: str
    page_errors: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)

    async def calls(self, name: str | None = None) -> list[dict[str, Any]]:
        calls = await self.page.evaluate("window.__agoraCalls")
        return [c for c in calls if name is None or c["name"] == name]

    async def emit(self, event: str, *args: Any) -> None:
        await self.page.evaluate("([event, args]) => window.__agoraStub.emit(event, ...args)", [event, list(args)])

    async def start(self, *, agent_joins: bool = False) -> None:
        await self.page.get_by_role("button", name="Start call").click()
        await expect(self.status).to_have_text("Waiting for the agent…")
        if agent_joins:
            await self.emit("user-published", AGENT_UID, "audio")
            await expect(self.status).to_have_text("Agent joined — speak any time")

    @property
    def status(self) -> Any:
        return self.page.get_by_role("status")


OpenCall = Callable[..., Awaitable[CallPage]]


@pytest_asyncio.fixture(loop_scope="session")
async def call_server(fake_backend: FakeCallPageBackend, sdk_stub_url: str) -> AsyncIterator[WebServer]:
    server = WebServer(
        fake_backend,
        host="127.0.0.1",
        port=0,
        sdk_url=sdk_stub_url,
        public_url="http://127.0.0.1",
        status_poll_interval=0.25,
    )
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def open_call(browser: Any, call_server: WebServer, fake_backend: FakeCallPageBackend) -> AsyncIterator[OpenCall]:
    context = await browser.new_context(viewport={"width": 900, "height": 700})
    opened: list[CallPage] = []

    async def _open(*, token: str | None = None, stub_config: dict[str, Any] | None = None, **call: Any) -> CallPage:
        if token is None:
            call.setdefault("user_uid", USER_UID)
            call.setdefault("agent_uid", AGENT_UID)
            token = fake_backend.add_call(**call)
        page = await context.new_page()
        result = CallPage(page=page, token=token)
        page.on("pageerror", lambda exc: result.page_errors.append(str(exc)))
        page.on("console", lambda msg: result.console_errors.append(msg.text) if msg.type == "error" else None)
        if stub_config is not None:
            await page.add_init_script(f"window.__agoraStubConfig = {json.dumps(stub_config)};")
        result.response = await page.goto(f"{call_server.url}/call/{token}")  # type: ignore[attr-defined]
        opened.append(result)
        return result

    try:
        yield _open
    finally:
        await context.close()
    for call_page in opened:
        assert call_page.page_errors == [], call_page.page_errors


def stream_chunks(message: dict[str, Any], message_id: str, parts: int) -> list[str]:
    """The datastream wire format message_id|part_idx|part_sum|base64(json) (spec §10.2)."""
    encoded = base64.b64encode(json.dumps(message).encode()).decode()
    size = -(-len(encoded) // parts)
    pieces = [encoded[i : i + size] for i in range(0, len(encoded), size)]
    return [f"{message_id}|{i}|{len(pieces)}|{piece}" for i, piece in enumerate(pieces, start=1)]


# ---- tests -----------------------------------------------------------------------------------------------


async def test_page_renders_with_accessible_start_button(open_call: OpenCall) -> None:
    call = await open_call()
    page = call.page

    assert call.response.status == 200  # type: ignore[attr-defined]
    assert await page.get_attribute("html", "lang") == "en"
    await expect(page.get_by_role("heading", level=1)).to_have_text("Voice call")
    start = page.get_by_role("button", name="Start call")
    await expect(start).to_be_visible()
    await expect(start).to_be_enabled()
    await expect(call.status).to_contain_text("Start call")
    assert await call.status.get_attribute("aria-live") == "polite"
    await expect(page.get_by_role("button", name="Mute")).to_be_hidden()
    await expect(page.get_by_role("button", name="End call")).to_be_hidden()
    await expect(page.get_by_role("alert")).to_be_hidden()
    # The Start button is the first stop in the tab order.
    await page.keyboard.press("Tab")
    assert await page.evaluate("document.activeElement.id") == "start"
    # The cross-origin SDK (stub) loaded under the page's CSP; no CSP violations or other console errors.
    assert await page.evaluate("window.AgoraRTC.VERSION") == "4.24.8-stub"
    assert call.console_errors == []
    assert await call.calls() == []  # nothing happens before the click


async def test_start_joins_with_exactly_the_session_params(
    open_call: OpenCall, fake_backend: FakeCallPageBackend
) -> None:
    channel = 'call-42 </script> & "quoted"'
    call = await open_call(channel=channel)
    session = fake_backend.calls[call.token].session

    # Keyboard only: Tab to the Start button, press Enter.
    await call.page.keyboard.press("Tab")
    await call.page.keyboard.press("Enter")
    await expect(call.status).to_have_text("Waiting for the agent…")

    [create] = await call.calls("createClient")
    assert create["args"] == [{"mode": "rtc", "codec": "vp8"}]
    [join] = await call.calls("join")
    assert join["args"] == [FAKE_APP_ID, channel, session.rtc_token, USER_UID]
    assert await call.page.evaluate("typeof window.__agoraStub.calls('join')[0].args[3]") == "number"
    names = [c["name"] for c in await call.calls()]
    assert names.index("join") < names.index("createMicrophoneAudioTrack") < names.index("publish")
    [publish] = await call.calls("publish")
    assert publish["args"] == [[{"track": "mic-1"}]]
    registered = {c["args"][0] for c in await call.calls("on")}
    assert {"user-published", "user-left", "stream-message"} <= registered
    await expect(call.page.get_by_role("button", name="Mute")).to_be_visible()
    await expect(call.page.get_by_role("button", name="End call")).to_be_visible()
    await expect(call.page.get_by_role("button", name="Start call")).to_be_hidden()
    assert await call.page.evaluate("document.activeElement.id") == "end"


async def test_agent_joins_transcript_and_screenshot(open_call: OpenCall) -> None:
    call = await open_call(max_minutes=15)
    await call.start()

    # Someone else publishing is not the agent.
    await call.emit("user-published", 999, "audio")
    await expect(call.status).to_have_text("Waiting for the agent…")
    assert await call.calls("subscribe") == []

    await call.emit("user-published", AGENT_UID, "audio")
    await expect(call.status).to_have_text("Agent joined — speak any time")
    [subscribe] = await call.calls("subscribe")
    assert subscribe["args"] == [{"uid": AGENT_UID}, "audio"]
    assert len(await call.calls("remoteTrack.play")) == 1

    user_turn = {
        "object": "user.transcription",
        "text": "Hi! Do you remember what I said about my trip?",
        "final": True,
        "turn_id": 1,
        "stream_id": USER_UID,
        "user_id": str(USER_UID),
    }
    agent_turn = {
        "object": "assistant.transcription",
        "text": "Of course — you're hiking in the Dolomites next month. Have you picked a route yet?",
        "turn_id": 1,
        "turn_seq_id": 1,
        "turn_status": 1,
    }
    for chunk in stream_chunks(user_turn, "m1", 1):
        await call.emit("stream-message", AGENT_UID, chunk)
    c1, c2, c3 = stream_chunks(agent_turn, "m2", 3)
    c1 = c1.replace("|1|3|", "|1|???|")  # part_sum may be unknown on early chunks
    for chunk in (c2, c3, c1):  # out of order
        await call.emit("stream-message", AGENT_UID, chunk)
    # An in-progress user turn is updated in place.
    for text, final in (("The Alta Via", False), ("The Alta Via 1, I think.", True)):
        partial = {"object": "user.transcription", "text": text, "final": final, "turn_id": 2}
        for chunk in stream_chunks(partial, f"m-{text}", 2):
            await call.emit("stream-message", AGENT_UID, chunk)
    await call.emit("stream-message", AGENT_UID, "garbage|x|y")  # ignored

    items = call.page.locator("#transcript li")
    await expect(items).to_have_text(
        [f"You:{user_turn['text']}", f"Agent:{agent_turn['text']}", "You:The Alta Via 1, I think."]
    )
    await expect(call.page.locator("#transcript-empty")).to_be_hidden()

    await call.emit("volume-indicator", [{"uid": AGENT_UID, "level": 60}, {"uid": USER_UID, "level": 0}])
    await expect(call.page.locator("#activity")).to_have_text("The agent is speaking…")

    SCREENSHOT_PATH.parent.mkdir(parents=True, exist_ok=True)
    await call.page.evaluate("document.activeElement.blur()")
    await call.page.screenshot(path=str(SCREENSHOT_PATH), full_page=False)
    assert SCREENSHOT_PATH.stat().st_size > 10_000


async def test_mute_toggles_the_microphone(open_call: OpenCall) -> None:
    call = await open_call()
    await call.start(agent_joins=True)
    await expect(call.page.locator("#type-form")).to_be_hidden()  # typing is for the Agora emulator only
    mute = call.page.get_by_role("button", name="Mute")

    await mute.click()
    await expect(mute).to_have_attribute("aria-pressed", "true")
    await expect(call.page.locator("#activity")).to_have_text("Your microphone is muted.")
    await mute.press("Space")  # keyboard works too
    await expect(mute).to_have_attribute("aria-pressed", "false")

    assert [c["args"] for c in await call.calls("track.setEnabled")] == [
        [{"track": "mic-1"}, False],
        [{"track": "mic-1"}, True],
    ]


async def test_end_call_hangs_up_and_shows_the_result(open_call: OpenCall, fake_backend: FakeCallPageBackend) -> None:
    call = await open_call(turns_on_hangup=4, facts_on_hangup=None)
    await call.start(agent_joins=True)

    await call.page.get_by_role("button", name="End call").click()

    await expect(call.status).to_have_text("Call ended")
    assert fake_backend.hangups == [(call.token, "page")]
    names = [c["name"] for c in await call.calls()]
    assert "leave" in names and "track.close" in names
    await expect(call.page.locator("#summary-turns")).to_have_text("4")
    await expect(call.page.get_by_text("Lines of the conversation kept")).to_be_visible()
    await expect(call.page.locator("#summary-facts")).to_have_text("Still being processed…")
    await expect(call.page.get_by_text("Nothing yet.")).to_be_hidden()  # no captions came: no transcript at all
    await expect(call.page.get_by_role("heading", name="Live transcript")).to_be_hidden()
    for name in ("Mute", "End call", "Start call"):
        await expect(call.page.get_by_role("button", name=name)).to_be_hidden()

    # Post-call processing finishes: the page picks up the number of things learned.
    fake_backend.calls[call.token].facts_learned = 2
    await expect(call.page.locator("#summary-facts")).to_have_text("2")


async def test_call_ended_elsewhere_is_noticed(open_call: OpenCall, fake_backend: FakeCallPageBackend) -> None:
    call = await open_call()
    await call.start(agent_joins=True)

    fake_backend.end_call(call.token, reason="hangup_button", turns=3, facts=1, learned=("Has a cat called Miso",))

    await expect(call.status).to_have_text("Call ended")
    await expect(call.page.locator("#summary-note")).to_have_text("You ended the call from Discord.")
    await expect(call.page.locator("#summary-turns")).to_have_text("3")
    await expect(call.page.locator("#summary-facts")).to_have_text("1")
    learned = call.page.locator("#summary-learned")
    await expect(learned.get_by_role("listitem")).to_have_text(["Has a cat called Miso"])
    await expect(learned).to_contain_text("/memory")
    await expect(call.page.locator("#footer")).to_be_hidden()
    assert len(await call.calls("leave")) == 1
    assert len(await call.calls("track.close")) == 1
    assert fake_backend.hangups == []


async def test_what_the_member_asked_to_remember_or_forget_shows_in_the_transcript(
    open_call: OpenCall, fake_backend: FakeCallPageBackend
) -> None:
    call = await open_call()
    await call.start(agent_joins=True)
    fake_backend.calls[call.token].remembered = ("My daughter's birthday is 4 May",)
    transcript = call.page.locator("#transcript")
    memory = transcript.locator("li[data-role='memory']")
    await expect(memory).to_have_text(["Memory:Remembered: My daughter's birthday is 4 May"])
    fake_backend.calls[call.token].remembered = ()
    await expect(memory).to_have_text(
        ["Memory:Remembered: My daughter's birthday is 4 May", "Memory:Forgotten: My daughter's birthday is 4 May"]
    )
    assert call.page_errors == []


async def test_a_network_drop_offers_rejoin_and_keeps_the_call(
    open_call: OpenCall, fake_backend: FakeCallPageBackend
) -> None:
    call = await open_call()
    await call.start(agent_joins=True)

    await call.emit("connection-state-change", "RECONNECTING", "CONNECTED", "NETWORK_ERROR")
    await expect(call.status).to_have_text("Reconnecting…")
    await call.emit("connection-state-change", "CONNECTED", "RECONNECTING", None)
    await expect(call.status).to_have_text("Agent joined — speak any time")

    await call.emit("connection-state-change", "RECONNECTING", "CONNECTED", "NETWORK_ERROR")
    await call.emit("connection-state-change", "DISCONNECTED", "RECONNECTING", "NETWORK_ERROR")
    await expect(call.status).to_have_text("Connection lost.")
    await expect(call.page.get_by_role("alert")).to_contain_text("press Rejoin")
    rejoin = call.page.get_by_role("button", name="Rejoin")
    await expect(rejoin).to_be_enabled()
    assert fake_backend.hangups == [], "a network drop does not end the call"
    assert fake_backend.calls[call.token].state == "active"

    await rejoin.click()
    await expect(call.status).to_have_text("Waiting for the agent…")
    assert len(await call.calls("join")) == 2
    await call.emit("user-published", AGENT_UID, "audio")
    await expect(call.status).to_have_text("Agent joined — speak any time")
    assert fake_backend.hangups == []


async def test_after_a_drop_the_call_ends_when_the_bot_says_so(
    open_call: OpenCall, fake_backend: FakeCallPageBackend
) -> None:
    call = await open_call()
    await call.start(agent_joins=True)
    await call.emit("connection-state-change", "DISCONNECTED", "RECONNECTING", "NETWORK_ERROR")
    await expect(call.page.get_by_role("button", name="Rejoin")).to_be_visible()

    fake_backend.end_call(call.token, reason="idle_timeout", turns=2, facts=None)

    await expect(call.status).to_have_text("Call ended")
    note = call.page.locator("#summary-note")
    await expect(note).to_have_text("The call ended because nobody was connected to it for a while.")
    await expect(call.page.get_by_role("button", name="Rejoin")).to_be_hidden()
    await expect(call.page.get_by_role("alert")).to_be_hidden()


async def test_the_summary_speaks_plainly(open_call: OpenCall, fake_backend: FakeCallPageBackend) -> None:
    """No internal codes, no "connection lost" next to "you hung up", nothing "being processed" for a call in which
    nothing was said, and the footer about closing the tab gone once the call ended."""
    call = await open_call(turns_on_hangup=0, facts_on_hangup=None)
    await call.start(agent_joins=True)
    fake_backend.calls[call.token].state = "ended"
    fake_backend.calls[call.token].end_reason = "some_new_internal_code"

    await call.emit("user-left", AGENT_UID, "Quit")

    await expect(call.status).to_have_text("Call ended")
    body = await call.page.locator("main").inner_text()
    assert "some_new_internal_code" not in body and "Some new internal code" not in body
    assert "Reason:" not in body
    await expect(call.page.locator("#summary-facts-row")).to_be_hidden()
    await expect(call.page.locator("#footer")).to_be_hidden()


async def test_token_expiry_says_one_thing(open_call: OpenCall, fake_backend: FakeCallPageBackend) -> None:
    call = await open_call()
    await call.start(agent_joins=True)

    await call.emit("token-privilege-did-expire")

    await expect(call.status).to_have_text("Call ended")
    await expect(call.page.locator("#summary-note")).to_have_text("The call's access has expired.")


async def test_a_token_about_to_expire_is_renewed_from_the_bot(
    open_call: OpenCall, fake_backend: FakeCallPageBackend
) -> None:
    call = await open_call()
    await call.start(agent_joins=True)

    await call.emit("token-privilege-will-expire")

    async def renewed() -> bool:
        return bool(await call.calls("renewToken"))

    await eventually(renewed)
    [renew] = await call.calls("renewToken")
    assert renew["args"] == [fake_backend.calls[call.token].session.rtc_token]
    assert renew["args"][0].startswith("007eJxRenewed")
    assert "renew_token" in fake_backend.methods()
    await expect(call.status).not_to_have_text("Call ended")


async def test_start_is_disabled_when_the_voice_component_failed_to_load(
    open_call: OpenCall, fake_backend: FakeCallPageBackend
) -> None:
    call = await open_call()
    await call.page.route("**/AgoraRTC_N-*.js", lambda route: route.abort())
    await call.page.reload()

    await expect(call.page.get_by_role("alert")).to_contain_text("The voice component didn't load.")
    await expect(call.page.get_by_role("button", name="Start call")).to_be_disabled()


async def test_start_is_disabled_once_the_link_expired(open_call: OpenCall, fake_backend: FakeCallPageBackend) -> None:
    call = await open_call(expires_in=timedelta(seconds=2))
    start = call.page.get_by_role("button", name="Start call")
    await expect(start).to_be_enabled()

    await expect(start).to_be_disabled(timeout=5000)
    await expect(call.page.get_by_role("alert")).to_contain_text("This call link has expired.")


async def test_call_ended_before_start(open_call: OpenCall, fake_backend: FakeCallPageBackend) -> None:
    call = await open_call()
    fake_backend.end_call(call.token, reason="idle_timeout", turns=0, facts=None)

    await expect(call.status).to_have_text("Call ended")
    await expect(call.page.get_by_role("button", name="Start call")).to_be_hidden()
    assert await call.calls("join") == []


async def test_agent_leaving_ends_the_call(open_call: OpenCall, fake_backend: FakeCallPageBackend) -> None:
    call = await open_call()
    await call.start(agent_joins=True)

    await call.emit("user-left", 999, "Quit")  # not the agent: nothing happens
    await call.emit("user-left", AGENT_UID, "Quit")

    await expect(call.status).to_have_text("Call ended")
    assert len(await call.calls("leave")) == 1
    # The bot still thought the call was running, so the page told it.
    assert fake_backend.hangups == [(call.token, "page")]


async def test_closing_the_tab_sends_the_beacon(open_call: OpenCall, fake_backend: FakeCallPageBackend) -> None:
    call = await open_call()
    await call.start(agent_joins=True)

    await call.page.close(run_before_unload=True)

    assert await fake_backend.wait_for_hangup(within=5) == (call.token, "beacon")


async def test_navigating_away_sends_the_beacon(
    open_call: OpenCall, fake_backend: FakeCallPageBackend, call_server: WebServer
) -> None:
    call = await open_call()
    await call.start()

    await call.page.goto(f"{call_server.url}/healthz")

    assert await fake_backend.wait_for_hangup(within=5) == (call.token, "beacon")


async def test_no_beacon_before_the_call_starts(open_call: OpenCall, fake_backend: FakeCallPageBackend) -> None:
    call = await open_call()
    await call.page.close(run_before_unload=True)
    with pytest.raises(TimeoutError):
        await fake_backend.wait_for_hangup(within=0.5)


@pytest.mark.parametrize(
    ("stub_config", "message"),
    [
        (
            {"micError": {"code": "PERMISSION_DENIED", "name": "NotAllowedError"}},
            "Microphone access was blocked.",
        ),
        ({"micError": {"code": "DEVICE_NOT_FOUND"}}, "No microphone was found."),
        ({"joinError": {"code": "NETWORK_ERROR", "message": "ws closed"}}, "Couldn't connect to the call."),
        (
            {"joinError": {"code": "CAN_NOT_GET_GATEWAY_SERVER", "message": "dynamic key expired"}},
            "This call link has expired.",
        ),
    ],
)
async def test_start_errors_are_explained(
    open_call: OpenCall, fake_backend: FakeCallPageBackend, stub_config: dict[str, Any], message: str
) -> None:
    call = await open_call(stub_config=stub_config)

    await call.page.get_by_role("button", name="Start call").click()

    alert = call.page.get_by_role("alert")
    await expect(alert).to_be_visible()
    await expect(alert).to_contain_text(message)
    await expect(call.status).to_have_text("Not connected.")
    start = call.page.get_by_role("button", name="Start call")
    await expect(start).to_be_enabled()
    await expect(start).to_be_focused()
    assert len(await call.calls("leave")) == 1  # left the channel again, so a retry starts clean
    assert fake_backend.hangups == []


async def test_bad_or_expired_links_show_the_invalid_page(
    open_call: OpenCall, fake_backend: FakeCallPageBackend
) -> None:
    expired = fake_backend.add_call(expires_in=timedelta(seconds=-5))
    for token in (expired, "A" * 43, "not.a.token"):
        call = await open_call(token=token)
        assert call.response.status == 404  # type: ignore[attr-defined]
        await expect(call.page.get_by_role("heading", level=1)).to_have_text("This link is no longer valid")
        await expect(call.page.get_by_role("button")).to_have_count(0)
        await call.page.close()


async def test_the_page_speaks_the_language_its_link_asks_for(
    browser: Any, call_server: WebServer, fake_backend: FakeCallPageBackend
) -> None:
    """The call card links a Spanish member's page with ?lang=es: the page, its script's texts and the pages for a
    link that no longer works are in that language."""
    context = await browser.new_context(viewport={"width": 900, "height": 700})
    try:
        page = await context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        token = fake_backend.add_call(user_uid=USER_UID, agent_uid=AGENT_UID, max_minutes=1)
        call = CallPage(page=page, token=token)
        await page.goto(f"{call_server.url}/call/{token}?lang=es")

        assert await page.get_attribute("html", "lang") == "es"
        assert await page.title() == "Llamada de voz"
        await expect(page.get_by_role("heading", level=1)).to_have_text("Llamada de voz")
        await expect(page.locator("#footer")).to_have_text(
            "Las llamadas duran hasta 1 minuto. Si cierras esta pestaña, la llamada termina."
        )
        await page.get_by_role("button", name="Iniciar llamada").click()
        await expect(call.status).to_have_text("Esperando al agente…")
        await call.emit("user-published", AGENT_UID, "audio")
        await expect(call.status).to_have_text("El agente está aquí: habla cuando quieras")
        await page.get_by_role("button", name="Terminar llamada").click()
        await expect(page.get_by_role("heading", name="Resumen de la llamada")).to_be_visible()
        await expect(page.locator("#summary dt").first).to_have_text("Líneas de la conversación guardadas")

        await page.goto(f"{call_server.url}/call/not-a-link-anyone-sent?lang=de")
        await expect(page.get_by_role("heading", level=1)).to_have_text("Dieser Link ist nicht mehr gültig")
        assert await page.get_attribute("html", "lang") == "de"
        assert errors == []
    finally:
        await context.close()
