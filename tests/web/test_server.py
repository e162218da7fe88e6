"""HTTP-level tests of bot.web.server with the in-memory backend."""

from __future__ import annotations

import json
import logging
import re
from datetime import timedelta

import aiohttp
import pytest
from aiohttp.test_utils import TestClient

from bot.web.access_log import redact_path
from bot.web.backend import CallPageBackend, CallStatus
from bot.web.call_api import MAX_WEBHOOK_BYTES
from bot.web.call_page import build_csp, is_valid_link_token
from bot.web.server import WebServer, create_app
from tests.web.conftest import PRODUCTION_SDK_URL, PUBLIC_URL
from tests.web.fake_backend import FAKE_APP_CERTIFICATE, FAKE_APP_ID, FakeCallPageBackend, sign_webhook

CONFIG_RE = re.compile(r'<script type="application/json" id="call-config">(.*?)</script>', re.DOTALL)
INVALID_TEXT = "This link is no longer valid"

# Agora NCS signature test vector (spec §6): secret "secret".
NCS_BODY = (
    b'{"eventType":10,"noticeId":"4eb720f0-8da7-11e9-a43e53f411c2761f","notifyMs":1560408533119,'
    b'"payload":{"a":"1","b":2},"productId":1}'
)
NCS_SIGNATURE_V2 = "6ba85d7c1122f6c51143cce7765f06c601c0fbd691987f4510e45b943b2639e8"


def page_config(body: str) -> dict[str, object]:
    match = CONFIG_RE.search(body)
    assert match, "call page has no #call-config element"
    return json.loads(match.group(1))


def assert_page_headers(headers: object) -> None:
    h = headers  # CIMultiDictProxy
    csp = h["Content-Security-Policy"]  # type: ignore[index]
    directives = {d.split()[0]: d.split()[1:] for d in (part.strip() for part in csp.split(";")) if d}
    assert directives["script-src"] == ["'self'", "https://download.agora.io"]
    assert directives["object-src"] == ["'none'"]
    assert directives["frame-ancestors"] == ["'none'"]
    assert h["Referrer-Policy"] == "no-referrer"  # type: ignore[index]
    assert h["Cache-Control"] == "no-store"  # type: ignore[index]
    assert h["X-Content-Type-Options"] == "nosniff"  # type: ignore[index]


def test_fake_backend_satisfies_protocol(fake_backend: FakeCallPageBackend) -> None:
    assert isinstance(fake_backend, CallPageBackend)


# ---- the call page ---------------------------------------------------------------------------------------


async def test_call_page_for_valid_token(client: TestClient, fake_backend: FakeCallPageBackend) -> None:
    token = fake_backend.add_call(channel="call-abc", user_uid=1234, agent_uid=5678, max_minutes=12)
    session = fake_backend.calls[token].session

    resp = await client.get(f"/call/{token}")

    assert resp.status == 200
    assert resp.content_type == "text/html"
    assert_page_headers(resp.headers)
    body = await resp.text()
    config = page_config(body)
    assert config.pop("words")["page.start"] == "Start call"  # the script's texts, English without a lang
    assert config == {
        "appId": FAKE_APP_ID,
        "channel": "call-abc",
        "token": session.rtc_token,
        "uid": 1234,
        "agentUid": 5678,
        "state": "active",
        "expiresAt": session.expires_at.isoformat().replace("+00:00", "Z"),
        "maxMinutes": 12,
        "pollIntervalMs": 4000,
        "pageId": session.page_id,
        "reopened": False,
        "elapsedSeconds": 0,
        "rejoinSeconds": 0,
    }
    assert f'<script src="{PRODUCTION_SDK_URL}"></script>' in body
    assert '<script type="module" src="/static/call.js"></script>' in body
    assert "up to 12 minutes" in body
    assert "{{" not in body
    # Nothing certificate-like: the only 32-hex string on the page is the App ID.
    assert FAKE_APP_CERTIFICATE not in body
    assert "certificate" not in body.lower()
    assert set(re.findall(r"[0-9a-fA-F]{32}", body.replace(session.rtc_token, ""))) == {FAKE_APP_ID}
    assert fake_backend.methods() == ["open_page"]


async def test_config_is_safely_embedded(client: TestClient, fake_backend: FakeCallPageBackend) -> None:
    nasty = "</script><script>alert(1)</script>&amp;\"'\u2028"
    token = fake_backend.add_call(channel=nasty)

    body = await (await client.get(f"/call/{token}")).text()

    assert "<script>alert(1)" not in body
    assert page_config(body)["channel"] == nasty


@pytest.mark.parametrize("case", ["unknown", "expired", "reused"])
async def test_invalid_links_get_the_same_page(
    client: TestClient, fake_backend: FakeCallPageBackend, case: str
) -> None:
    reference = await client.get("/call/" + "A" * 43)  # an unknown, well-formed token
    reference_body = await reference.text()
    if case == "unknown":
        token = "Zm9vYmFyYmF6cXV4"
    elif case == "expired":
        token = fake_backend.add_call(channel="secret-channel", expires_in=timedelta(seconds=-1))
    elif case == "reused":
        token = fake_backend.add_call(channel="secret-channel", max_opens=1)
        assert (await client.get(f"/call/{token}")).status == 200

    resp = await client.get(f"/call/{token}")

    assert resp.status == 404
    assert_page_headers(resp.headers)
    body = await resp.text()
    assert body == reference_body
    assert INVALID_TEXT in body
    assert "secret-channel" not in body and "call-config" not in body


@pytest.mark.parametrize("state", ["ended", "failed"])
async def test_the_link_of_a_call_that_is_over_says_it_has_ended(
    client: TestClient, fake_backend: FakeCallPageBackend, state: str
) -> None:
    token = fake_backend.add_call(channel="secret-channel")
    fake_backend.calls[token].state = state

    resp = await client.get(f"/call/{token}")

    assert resp.status == 410
    assert_page_headers(resp.headers)
    body = await resp.text()
    assert "This call has ended" in body and "expire" not in body
    assert INVALID_TEXT not in body
    assert "secret-channel" not in body and "call-config" not in body


async def test_state_ending_still_gets_the_page(client: TestClient, fake_backend: FakeCallPageBackend) -> None:
    token = fake_backend.add_call(state="ending")
    resp = await client.get(f"/call/{token}")
    assert resp.status == 200
    assert page_config(await resp.text())["state"] == "ending"


@pytest.mark.parametrize(
    "token",
    ["a" * 129, "bad.token", "tok%20en", "%3Cscript%3E", "tok$en", "abc=def", "tok~en", "%C3%A9t%C3%A9"],
)
async def test_malformed_tokens_never_reach_the_backend(
    client: TestClient, fake_backend: FakeCallPageBackend, token: str
) -> None:
    page = await client.get(f"/call/{token}")
    status = await client.get(f"/api/calls/{token}/status")
    hangup = await client.post(f"/api/calls/{token}/hangup")

    assert page.status == 404 and INVALID_TEXT in await page.text()
    assert status.status == 404 and await status.json() == {"error": "invalid link"}
    assert hangup.status == 404 and await hangup.json() == {"error": "invalid link"}
    assert fake_backend.log == []


def test_token_shape() -> None:
    assert is_valid_link_token("a" * 128)
    assert is_valid_link_token("abc-_XYZ09")
    assert is_valid_link_token("YWJjZA==")
    assert not is_valid_link_token("")
    assert not is_valid_link_token("a" * 129)
    assert not is_valid_link_token("a=b")
    assert not is_valid_link_token("a/b")


@pytest.mark.parametrize(
    ("method", "user_agent"),
    [
        ("GET", "Mozilla/5.0 (compatible; Discordbot/2.0; +https://discordapp.com)"),
        ("GET", "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)"),
        ("HEAD", "Mozilla/5.0"),
    ],
)
async def test_link_previews_do_not_consume_the_link(
    client: TestClient, fake_backend: FakeCallPageBackend, method: str, user_agent: str
) -> None:
    token = fake_backend.add_call(max_opens=1)
    resp = await client.request(method, f"/call/{token}", headers={"User-Agent": user_agent})
    assert resp.status == 200
    if method == "GET":
        body = await resp.text()
        assert "call-config" not in body and fake_backend.calls[token].session.rtc_token not in body
    assert fake_backend.log == []
    assert (await client.get(f"/call/{token}")).status == 200  # the real visit still works


# ---- status and hang-up API ------------------------------------------------------------------------------


async def test_status_api(client: TestClient, fake_backend: FakeCallPageBackend) -> None:
    token = fake_backend.add_call(turns_stored=2)

    resp = await client.get(f"/api/calls/{token}/status")

    assert resp.status == 200
    assert resp.headers["Cache-Control"] == "no-store"
    assert await resp.json() == {
        "state": "active",
        "end_reason": None,
        "turns_stored": 2,
        "facts_learned": None,
        "facts": [],
    }

    missing = await client.get("/api/calls/" + "B" * 40 + "/status")
    assert missing.status == 404
    assert await missing.json() == {"error": "invalid link"}


@pytest.mark.parametrize(
    ("kwargs", "expected_via"),
    [
        ({}, "page"),
        ({"json": {"via": "page"}}, "page"),
        ({"data": b"beacon", "headers": {"Content-Type": "text/plain;charset=UTF-8"}}, "beacon"),
        ({"data": b'{"via":"beacon"}', "headers": {"Content-Type": "text/plain;charset=UTF-8"}}, "beacon"),
        ({"data": b"", "headers": {"Content-Type": "text/plain;charset=UTF-8"}}, "page"),
        ({"data": b"\xff\xfe garbage", "headers": {"Content-Type": "application/octet-stream"}}, "page"),
        ({"params": {"via": "beacon"}}, "beacon"),
    ],
)
async def test_hangup_api(
    client: TestClient, fake_backend: FakeCallPageBackend, kwargs: dict[str, object], expected_via: str
) -> None:
    token = fake_backend.add_call(turns_on_hangup=5, facts_on_hangup=2)

    resp = await client.post(f"/api/calls/{token}/hangup", **kwargs)  # type: ignore[arg-type]

    assert resp.status == 200
    assert resp.headers["Cache-Control"] == "no-store"
    assert await resp.json() == {
        "state": "ended",
        "end_reason": f"hung_up_via_{expected_via}",
        "turns_stored": 5,
        "facts_learned": 2,
        "facts": [],
    }
    assert fake_backend.hangups == [(token, expected_via)]


async def test_hangup_unknown_token(client: TestClient, fake_backend: FakeCallPageBackend) -> None:
    resp = await client.post("/api/calls/" + "C" * 40 + "/hangup", data=b"beacon")
    assert resp.status == 404
    assert await resp.json() == {"error": "invalid link"}
    assert fake_backend.hangups == []


async def test_hangup_checks_origin(client: TestClient, fake_backend: FakeCallPageBackend) -> None:
    token = fake_backend.add_call()

    foreign = await client.post(f"/api/calls/{token}/hangup", headers={"Origin": "https://evil.example"})
    assert foreign.status == 403
    assert fake_backend.hangups == []

    own = await client.post(f"/api/calls/{token}/hangup", headers={"Origin": PUBLIC_URL})
    assert own.status == 200
    assert fake_backend.hangups == [(token, "page")]


async def test_hangup_ignores_oversized_body(client: TestClient, fake_backend: FakeCallPageBackend) -> None:
    token = fake_backend.add_call()
    resp = await client.post(f"/api/calls/{token}/hangup", data=b"beacon" + b" " * 10_000)
    assert resp.status == 200
    assert fake_backend.hangups == [(token, "page")]


# ---- webhook ---------------------------------------------------------------------------------------------


async def test_webhook_good_signature(client: TestClient, fake_backend: FakeCallPageBackend) -> None:
    headers = sign_webhook(NCS_BODY)
    assert headers["Agora-Signature-V2"] == NCS_SIGNATURE_V2

    resp = await client.post("/agora/webhook", data=NCS_BODY, headers=headers)

    assert resp.status == 200
    assert await resp.json() == {"code": 0, "msg": "success"}
    [(raw, received_headers)] = fake_backend.webhooks
    assert raw == NCS_BODY  # the raw bytes, not re-serialised JSON
    assert received_headers["Agora-Signature-V2"] == NCS_SIGNATURE_V2


async def test_webhook_bad_signature(client: TestClient, fake_backend: FakeCallPageBackend) -> None:
    headers = sign_webhook(NCS_BODY, secret="wrong")
    resp = await client.post("/agora/webhook", data=NCS_BODY, headers=headers)
    assert resp.status == 401
    assert await resp.json() == {"code": 1, "msg": "invalid signature"}
    assert fake_backend.webhooks == []


async def test_webhook_headers_are_case_insensitive(client: TestClient, fake_backend: FakeCallPageBackend) -> None:
    headers = {"agora-signature-v2": NCS_SIGNATURE_V2, "content-type": "application/json"}
    resp = await client.post("/agora/webhook", data=NCS_BODY, headers=headers)
    assert resp.status == 200


async def test_webhook_one_mib_is_accepted(client: TestClient, fake_backend: FakeCallPageBackend) -> None:
    body = b"x" * MAX_WEBHOOK_BYTES
    resp = await client.post("/agora/webhook", data=body, headers=sign_webhook(body))
    assert resp.status == 200
    assert fake_backend.webhooks[0][0] == body


async def test_webhook_too_large(client: TestClient, fake_backend: FakeCallPageBackend) -> None:
    body = b"x" * (MAX_WEBHOOK_BYTES + 1)
    resp = await client.post("/agora/webhook", data=body, headers=sign_webhook(body))
    assert resp.status == 413
    assert fake_backend.log == []


async def test_webhook_too_large_chunked(client: TestClient, fake_backend: FakeCallPageBackend) -> None:
    async def chunks():
        for _ in range(5):
            yield b"y" * (MAX_WEBHOOK_BYTES // 4)

    resp = await client.post("/agora/webhook", data=chunks(), headers={"Content-Type": "application/json"})
    assert resp.status == 413
    assert fake_backend.log == []


# ---- health and static files -----------------------------------------------------------------------------


async def test_healthz_ok(client: TestClient, fake_backend: FakeCallPageBackend) -> None:
    fake_backend.health_report = {"database": "ok", "active_calls": 3}
    resp = await client.get("/healthz")
    assert resp.status == 200
    assert await resp.json() == {"database": "ok", "active_calls": 3}


async def test_healthz_failure(client: TestClient, fake_backend: FakeCallPageBackend) -> None:
    fake_backend.health_error = RuntimeError("database is locked")
    resp = await client.get("/healthz")
    assert resp.status == 503
    body = await resp.text()
    assert "locked" not in body
    assert json.loads(body) == {"status": "unavailable"}


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/static/call.js", "javascript"),
        ("/static/call.css", "text/css"),
        ("/static/notice.html", "text/html"),
    ],
)
async def test_static_files(client: TestClient, path: str, content_type: str) -> None:
    resp = await client.get(path)
    assert resp.status == 200
    assert content_type in resp.content_type
    assert resp.headers["X-Content-Type-Options"] == "nosniff"


async def test_static_does_not_escape_its_directory(client: TestClient) -> None:
    for path in ("/static/../server.py", "/static/%2e%2e/server.py", "/static/", "/static/missing.js"):
        resp = await client.get(path)
        assert resp.status in (403, 404), path
        assert "create_app" not in await resp.text()


async def test_backend_error_is_a_500_without_the_token(
    client: TestClient, fake_backend: FakeCallPageBackend, caplog: pytest.LogCaptureFixture
) -> None:
    token = fake_backend.add_call()

    async def broken(link_token: str, **_: object) -> CallStatus | None:
        raise KeyError(link_token)

    fake_backend.status = broken  # type: ignore[method-assign]
    caplog.set_level(logging.DEBUG)

    resp = await client.get(f"/api/calls/{token}/status")

    assert resp.status == 500
    assert await resp.json() == {"error": "internal error"}
    assert "KeyError" in caplog.text
    assert token not in caplog.text


# ---- configuration ---------------------------------------------------------------------------------------


def test_csp_for_same_origin_sdk() -> None:
    assert "script-src 'self';" in build_csp("/static/vendor/AgoraRTC_N-4.24.8.js")


def test_create_app_rejects_bad_urls(fake_backend: FakeCallPageBackend) -> None:
    with pytest.raises(ValueError):
        create_app(fake_backend, sdk_url="javascript:alert(1)", public_url=PUBLIC_URL)
    with pytest.raises(ValueError):
        create_app(fake_backend, sdk_url=PRODUCTION_SDK_URL, public_url="/relative")


# ---- real server: lifecycle and access log --------------------------------------------------------------


def test_redact_path() -> None:
    assert redact_path("/call/abcDEF123_-") == "/call/<redacted>"
    assert redact_path("/api/calls/abc/status") == "/api/calls/<redacted>/status"
    assert redact_path("/api/calls/abc/hangup?via=beacon") == "/api/calls/<redacted>/hangup?<redacted>"
    assert redact_path("/calls/" + "x" * 30) == "/calls/<redacted>"
    assert redact_path("/static/call.js") == "/static/call.js"
    assert redact_path("/healthz") == "/healthz"


async def test_web_server_lifecycle_and_redacted_access_log(
    fake_backend: FakeCallPageBackend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="aiohttp.access")
    token = fake_backend.add_call()
    server = WebServer(fake_backend, host="127.0.0.1", port=0, sdk_url=PRODUCTION_SDK_URL, public_url=PUBLIC_URL)
    await server.start()
    try:
        assert server.port > 0
        assert server.url == f"http://127.0.0.1:{server.port}"
        async with aiohttp.ClientSession(server.url) as http:
            for method, path in [
                ("GET", f"/call/{token}"),
                ("GET", f"/api/calls/{token}/status"),
                ("POST", f"/api/calls/{token}/hangup?via=beacon"),
                ("GET", f"/call/{token}"),  # now over: 410
                ("GET", "/healthz"),
            ]:
                async with http.request(method, path) as resp:
                    await resp.read()
    finally:
        await server.stop()
    await server.stop()  # idempotent

    access_lines = [r.getMessage() for r in caplog.records if r.name == "aiohttp.access"]
    assert len(access_lines) == 5
    assert token not in caplog.text
    assert '"GET /call/<redacted> HTTP/1.1" 200' in access_lines[0]
    assert '"GET /api/calls/<redacted>/status HTTP/1.1" 200' in access_lines[1]
    assert '"POST /api/calls/<redacted>/hangup?<redacted> HTTP/1.1" 200' in access_lines[2]
    assert '"GET /call/<redacted> HTTP/1.1" 410' in access_lines[3]
    assert '"GET /healthz HTTP/1.1" 200' in access_lines[4]
    assert fake_backend.hangups == [(token, "beacon")]
