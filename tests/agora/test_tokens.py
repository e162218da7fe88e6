from __future__ import annotations

import base64
import time

import pytest
from agora_token_builder.RtcTokenBuilder import RtcTokenBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.agora.tokens import (
    PRIVILEGE_JOIN_CHANNEL,
    PRIVILEGE_PUBLISH_AUDIO,
    PRIVILEGE_PUBLISH_DATA,
    PRIVILEGE_PUBLISH_VIDEO,
    build_rtc_token,
    parse_rtc_token_006,
    verify_rtc_token_006,
)
from tests.fakes.agora_emulator import TEST_APP_CERTIFICATE, TEST_APP_ID

NOW = 1_750_000_000
OTHER_CERTIFICATE = "0123456789abcdef0123456789abcdef"
OTHER_APP_ID = "fedcba9876543210fedcba9876543210"


def _token(channel: str = "call-1", uid: int = 1001, expires_in: int = 3600) -> str:
    return build_rtc_token(TEST_APP_ID, TEST_APP_CERTIFICATE, channel, uid, expires_in, now=NOW)


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


def test_token_verifies_for_its_channel_and_uid() -> None:
    assert verify_rtc_token_006(_token(), TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", 1001, NOW) is None
    assert verify_rtc_token_006(_token(), TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", "1001", NOW) is None


def test_default_now_is_the_wall_clock() -> None:
    before = int(time.time())
    token = build_rtc_token(TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", 1001, 60)
    expiry = parse_rtc_token_006(token).privileges[PRIVILEGE_JOIN_CHANNEL]
    assert before + 60 <= expiry <= int(time.time()) + 60


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
    channel: str, uid: int, app_id: str, certificate: str, now: int, reason_fragment: str
) -> None:
    reason = verify_rtc_token_006(_token(), app_id, certificate, channel, uid, now)
    assert reason is not None
    assert reason_fragment in reason


def test_token_is_valid_until_one_second_before_expiry() -> None:
    assert verify_rtc_token_006(_token(), TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", 1001, NOW + 3599) is None


def test_uid_zero_token_is_a_wildcard() -> None:
    token = _token(uid=0)
    for uid in (0, 1001, "42"):
        assert verify_rtc_token_006(token, TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", uid, NOW) is None


def test_specific_uid_token_does_not_serve_a_random_uid_agent() -> None:
    reason = verify_rtc_token_006(_token(uid=1001), TEST_APP_ID, TEST_APP_CERTIFICATE, "call-1", "0", NOW)
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
@given(channel=channels, uid=st.integers(min_value=1, max_value=2**32 - 1), lifetime=st.integers(1, 86_400))
def test_round_trip_and_tamper_detection(channel: str, uid: int, lifetime: int) -> None:
    token = build_rtc_token(TEST_APP_ID, TEST_APP_CERTIFICATE, channel, uid, lifetime, now=NOW)
    assert verify_rtc_token_006(token, TEST_APP_ID, TEST_APP_CERTIFICATE, channel, uid, NOW) is None
    assert verify_rtc_token_006(token, TEST_APP_ID, TEST_APP_CERTIFICATE, channel, uid, NOW + lifetime) is not None
    assert verify_rtc_token_006(token, TEST_APP_ID, TEST_APP_CERTIFICATE, channel + "x", uid, NOW) is not None
