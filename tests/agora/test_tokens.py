from __future__ import annotations

import base64
import struct
import time
import zlib

import pytest
from agora_token_builder.RtcTokenBuilder import RtcTokenBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.agora.tokens import (
    PRIVILEGE_JOIN_CHANNEL,
    PRIVILEGE_PUBLISH_AUDIO,
    PRIVILEGE_PUBLISH_DATA,
    PRIVILEGE_PUBLISH_VIDEO,
    PRIVILEGE_RTM_LOGIN,
    SERVICE_RTC,
    SERVICE_RTM,
    build_rtc_token,
    parse_rtc_token_006,
    parse_rtc_token_007,
    token_expires_at,
    verify_rtc_token,
    verify_rtc_token_006,
    verify_rtc_token_007,
)
from standins.agora_emulator import TEST_APP_CERTIFICATE, TEST_APP_ID
from tests.agora.conftest import agora_built_token, packed_string, token_service

NOW = 1_750_000_000
OTHER_CERTIFICATE = "0123456789abcdef0123456789abcdef"
OTHER_APP_ID = "fedcba9876543210fedcba9876543210"


FORMATS = pytest.mark.parametrize("token_format", ["007", "006"])


def _token(channel: str = "call-1", uid: int = 1001, expires_in: int = 3600, token_format: str = "006") -> str:
    return build_rtc_token(
        TEST_APP_ID, TEST_APP_CERTIFICATE, channel, uid, expires_in, now=NOW, token_format=token_format
    )


def test_default_token_is_007_with_rtc_and_rtm_privileges_for_the_uid() -> None:
    token = build_rtc_token(TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", 1001, 600, now=NOW)

    parsed = parse_rtc_token_007(token)

    assert token.startswith("007")
    assert (parsed.app_id, parsed.issue_ts, parsed.expire) == (TEST_APP_ID, NOW, 600)
    rtc, rtm = parsed.services[SERVICE_RTC], parsed.services[SERVICE_RTM]
    assert rtc.privileges == {
        PRIVILEGE_JOIN_CHANNEL: 600,
        PRIVILEGE_PUBLISH_AUDIO: 600,
        PRIVILEGE_PUBLISH_VIDEO: 600,
        PRIVILEGE_PUBLISH_DATA: 600,
    }
    assert rtc.fields == (b"call-1", b"1001")
    assert rtm.privileges == {PRIVILEGE_RTM_LOGIN: 600} and rtm.fields == (b"1001",)
    assert token_expires_at(token) == NOW + 600
    assert verify_rtc_token_007(token, TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", 1001, NOW, need_rtm=True) is None


OFFICIAL_VECTOR = (
    "007eJxTYBBbsMMnKq7p9Hf/HcIX5kce9b518kCiQgSr5Zrp4X1Tu6UUGCzNDZwdjU1TUs0Mkk1MzExMk5ISUy0SjQxNDcwMk4yN3b8IMEQwMTAwMoAwB"
    "IL4CgzmKeZGxmamqUmWFsYmFqbGluapxqnGaZYpJmYGSSkpiVwMRhYWRsYmhkbmxgDCaiTj"
)


def test_the_verifier_accepts_agoras_official_access_token2_vector_until_it_expires() -> None:
    channel, uid = "7d72365eb983485397e3e3f9d460bdda", 2882341273
    parsed = parse_rtc_token_007(OFFICIAL_VECTOR)
    assert (parsed.issue_ts, parsed.expire, parsed.salt) == (1111111, 600, 1)
    assert verify_rtc_token_007(OFFICIAL_VECTOR, TEST_APP_ID, TEST_APP_CERTIFICATE, channel, uid, 1111710) is None
    assert verify_rtc_token_007(OFFICIAL_VECTOR, TEST_APP_ID, TEST_APP_CERTIFICATE, channel, uid, 1111711) == (
        "token has expired"
    )
    reason = verify_rtc_token_007(
        OFFICIAL_VECTOR, TEST_APP_ID, TEST_APP_CERTIFICATE, channel, uid, 1111200, need_rtm=True
    )
    assert reason == "token lacks the RTM login privilege"


def test_the_builder_matches_the_official_sdk_builder_byte_for_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    """agora-agents' generate_convo_ai_token is Agora's own AccessToken2 builder; with its clock and salt pinned
    it must produce exactly our token."""
    from types import SimpleNamespace

    from agora_agent.agentkit import token as sdk_token

    from bot.agora.tokens import _build_token_007

    monkeypatch.setattr(sdk_token, "time", SimpleNamespace(time=lambda: NOW))
    monkeypatch.setattr(sdk_token, "random", SimpleNamespace(randint=lambda _low, _high: 4242))
    official = sdk_token.generate_convo_ai_token(TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", 1001, token_expire=900)

    assert official.startswith("007")
    assert _build_token_007(TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", 1001, 900, NOW, salt=4242) == official


def _agora_built(monkeypatch: pytest.MonkeyPatch, services: list[tuple[int, bytes]], expire: int = 600) -> str:
    return agora_built_token(monkeypatch, services, issued_at=NOW, expire=expire)


RTC_1001 = token_service(SERVICE_RTC, dict.fromkeys((1, 2, 3, 4), 0), packed_string(b"call-1"), packed_string(b"1001"))
RTM_1001 = token_service(SERVICE_RTM, {PRIVILEGE_RTM_LOGIN: 600}, packed_string(b"1001"))


def test_a_privilege_expiry_of_zero_lasts_until_the_token_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    """``RtcTokenBuilder2.build_token_with_rtm(..., privilege_expire=0)`` (Agora's default) writes 0 into every
    RTC privilege and the token lifetime into the RTM login: the token is good for its whole lifetime."""
    token = _agora_built(monkeypatch, [RTC_1001, RTM_1001], expire=600)

    assert parse_rtc_token_007(token).services[SERVICE_RTC].privileges[PRIVILEGE_JOIN_CHANNEL] == 0
    assert token_expires_at(token) == NOW + 600
    args = (token, TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", 1001)
    assert verify_rtc_token_007(*args, NOW, need_rtm=True) is None
    assert verify_rtc_token_007(*args, NOW + 599, need_rtm=True) is None
    assert verify_rtc_token_007(*args, NOW + 600) == "token has expired"
    rtm_zero = token_service(SERVICE_RTM, {PRIVILEGE_RTM_LOGIN: 0}, packed_string(b"1001"))
    login_for_life = _agora_built(monkeypatch, [RTC_1001, rtm_zero])
    assert verify_rtc_token_007(login_for_life, *args[1:], NOW + 599, need_rtm=True) is None


def test_services_agora_knows_besides_rtc_and_rtm_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    fpa = token_service(4, {1: 600})
    chat = token_service(5, {1: 600}, packed_string(b"1001"))
    apaas = token_service(7, {1: 600}, packed_string(b"room"), packed_string(b"user"), struct.pack("<h", -1))
    permissions = struct.pack("<HHHHH", 1, 0, 1, 1, 1) + packed_string(b"chan")  # message channels: read ["chan"]
    rtm2 = token_service(8, {1: 600}, packed_string(b"1001"), permissions)
    token = _agora_built(monkeypatch, [RTC_1001, RTM_1001, fpa, chat, apaas, rtm2])

    parsed = parse_rtc_token_007(token)

    assert sorted(parsed.services) == [1, 2, 4, 5, 7, 8]
    assert parsed.services[7].fields == (b"room", b"user", b"\xff\xff")
    assert parsed.services[8].fields == (b"1001", permissions)
    assert verify_rtc_token_007(token, TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", 1001, NOW, need_rtm=True) is None


def test_an_unknown_service_type_ends_the_services_read_as_agoras_parser_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """TOOLS ``AccessToken2.from_string`` stops at a service type it does not know and keeps the ones before it;
    the unknown service's bytes are still signed."""
    unknown = token_service(4242, {1: 600}, b"opaque layout of a newer service")
    token = _agora_built(monkeypatch, [RTC_1001, RTM_1001, unknown])

    parsed = parse_rtc_token_007(token)

    assert sorted(parsed.services) == [SERVICE_RTC, SERVICE_RTM]
    assert verify_rtc_token_007(token, TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", 1001, NOW, need_rtm=True) is None
    content = zlib.decompress(base64.b64decode(token[3:]))
    forged = "007" + base64.b64encode(zlib.compress(content.replace(b"opaque", b"OPAQUE"))).decode()
    reason = verify_rtc_token_007(forged, TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", 1001, NOW)
    assert reason == "token signature does not match the app certificate"
    hidden = _agora_built(monkeypatch, [token_service(0, {}, b"?"), RTC_1001])
    assert verify_rtc_token_007(hidden, TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", 1001, NOW) == (
        "token has no RTC service"
    )


def test_an_unknown_token_format_is_refused() -> None:
    with pytest.raises(ValueError, match="token_format"):
        build_rtc_token(TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", 1001, 600, now=NOW, token_format="008")  # type: ignore[arg-type]


def test_built_token_is_006_with_all_publisher_privileges_expiring_at_now_plus_lifetime() -> None:
    token = _token(expires_in=600)

    parsed = parse_rtc_token_006(token)

    assert token.startswith("006" + TEST_APP_ID)
    assert parsed.app_id == TEST_APP_ID
    assert parsed.privileges == {
        PRIVILEGE_JOIN_CHANNEL: NOW + 600,
        PRIVILEGE_PUBLISH_AUDIO: NOW + 600,
        PRIVILEGE_PUBLISH_VIDEO: NOW + 600,
        PRIVILEGE_PUBLISH_DATA: NOW + 600,
    }


@FORMATS
def test_token_verifies_for_its_channel_and_uid(token_format: str) -> None:
    token = _token(token_format=token_format)
    assert verify_rtc_token(token, TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", 1001, NOW) is None
    assert verify_rtc_token(token, TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", "1001", NOW) is None


@FORMATS
def test_default_now_is_the_wall_clock(token_format: str) -> None:
    before = int(time.time())
    token = build_rtc_token(TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", 1001, 60, token_format=token_format)
    expiry = token_expires_at(token)
    assert expiry is not None and before + 60 <= expiry <= int(time.time()) + 60


def test_a_006_token_cannot_serve_an_agent_that_needs_rtm() -> None:
    reason = verify_rtc_token(_token(), TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", 1001, NOW, need_rtm=True)
    assert reason == "a 006 token carries no RTM privileges"


@FORMATS
@pytest.mark.parametrize(
    ("channel", "uid", "app_id", "certificate", "now", "reason_fragment"),
    [
        ("call-2", 1001, TEST_APP_ID, TEST_APP_CERTIFICATE, NOW, "another channel"),
        ("call-1", 1002, TEST_APP_ID, TEST_APP_CERTIFICATE, NOW, "another uid"),
        ("call-1", 1001, TEST_APP_ID, OTHER_CERTIFICATE, NOW, "signature"),
        ("call-1", 1001, OTHER_APP_ID, TEST_APP_CERTIFICATE, NOW, "another app id"),
        ("call-1", 1001, TEST_APP_ID, TEST_APP_CERTIFICATE, NOW + 3600, "expired"),
        ("call-1", 1001, TEST_APP_ID, TEST_APP_CERTIFICATE, NOW + 99_999, "expired"),
    ],
)
def test_token_is_rejected_with_a_reason(
    channel: str, uid: int, app_id: str, certificate: str, now: int, reason_fragment: str, token_format: str
) -> None:
    reason = verify_rtc_token(_token(token_format=token_format), app_id, certificate, channel, uid, now)
    assert reason is not None
    assert reason_fragment in reason


@FORMATS
def test_token_is_valid_until_one_second_before_expiry(token_format: str) -> None:
    token = _token(token_format=token_format)
    assert verify_rtc_token(token, TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", 1001, NOW + 3599) is None


@FORMATS
def test_uid_zero_token_is_a_wildcard(token_format: str) -> None:
    token = _token(uid=0, token_format=token_format)
    for uid in (0, 1001, "42"):
        assert verify_rtc_token(token, TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", uid, NOW) is None


@FORMATS
def test_specific_uid_token_does_not_serve_a_random_uid_agent(token_format: str) -> None:
    token = _token(uid=1001, token_format=token_format)
    reason = verify_rtc_token(token, TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", "0", NOW)
    assert reason == "token was minted for another uid"


def test_string_account_tokens_verify_for_that_account() -> None:
    token = RtcTokenBuilder.buildTokenWithAccount(TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", "alice", 1, NOW + 60)
    assert verify_rtc_token_006(token, TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", "alice", NOW) is None
    assert verify_rtc_token_006(token, TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", "bob", NOW) is not None


@pytest.mark.parametrize(
    "token",
    [
        "",
        "007eJxTYBBbsMMnKq7p9Hf",
        "006" + TEST_APP_ID,
        "006" + TEST_APP_ID + "!!!not-base64!!!",
        "006" + TEST_APP_ID + base64.b64encode(b"\x05\x00abc").decode(),
        "006" + "z" * 32 + base64.b64encode(b"").decode(),
    ],
)
def test_malformed_tokens_are_rejected_not_crashing(token: str) -> None:
    with pytest.raises(ValueError):
        parse_rtc_token_006(token)
    assert verify_rtc_token_006(token, TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", 1001, NOW) is not None


def test_trailing_bytes_are_rejected() -> None:
    token = _token()
    content = base64.b64decode(token[35:]) + b"\x00"
    tampered = token[:35] + base64.b64encode(content).decode()
    with pytest.raises(ValueError, match="trailing"):
        parse_rtc_token_006(tampered)


@pytest.mark.parametrize(
    ("app_id", "certificate", "setting"),
    [
        ("not-an-app-id", TEST_APP_CERTIFICATE, "agora.app_id"),
        ("", TEST_APP_CERTIFICATE, "agora.app_id"),
        (TEST_APP_ID, "short", "AGORA_APP_CERTIFICATE"),
        (TEST_APP_ID, "g" * 32, "AGORA_APP_CERTIFICATE"),
    ],
)
def test_build_rejects_credentials_that_are_not_32_hex(app_id: str, certificate: str, setting: str) -> None:
    with pytest.raises(ValueError, match=setting):
        build_rtc_token(app_id, certificate, "call-1", 1001, 3600, now=NOW)


@pytest.mark.parametrize(("uid", "expires_in"), [(-1, 3600), (2**32, 3600), (1001, 0), (1001, 86_401)])
def test_build_rejects_out_of_range_uid_and_lifetime(uid: int, expires_in: int) -> None:
    with pytest.raises(ValueError):
        build_rtc_token(TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", uid, expires_in, now=NOW)


def test_build_rejects_empty_channel() -> None:
    with pytest.raises(ValueError, match="channel"):
        build_rtc_token(TEST_APP_ID, TEST_APP_CERTIFICATE, "", 1001, 3600, now=NOW)


channels = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=64)


@settings(max_examples=40, deadline=None)
@given(
    channel=channels,
    uid=st.integers(min_value=1, max_value=2**32 - 1),
    lifetime=st.integers(1, 86_400),
    token_format=st.sampled_from(["007", "006"]),
)
def test_round_trip_and_tamper_detection(channel: str, uid: int, lifetime: int, token_format: str) -> None:
    token = build_rtc_token(
        TEST_APP_ID, TEST_APP_CERTIFICATE, channel, uid, lifetime, now=NOW, token_format=token_format
    )  # type: ignore[arg-type]
    assert verify_rtc_token(token, TEST_APP_ID, TEST_APP_CERTIFICATE, channel, uid, NOW) is None
    assert verify_rtc_token(token, TEST_APP_ID, TEST_APP_CERTIFICATE, channel, uid, NOW + lifetime) is not None
    assert verify_rtc_token(token, TEST_APP_ID, TEST_APP_CERTIFICATE, channel + "x", uid, NOW) is not None
