from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.agora import HistoryItem, Notification, parse_notification, sign_body, verify_signature

# Spec §6 test vector (the values printed in Agora's docs do not reproduce; these do).
VECTOR_SECRET = "secret"
VECTOR_BODY = (
    b'{"eventType":10,"noticeId":"4eb720f0-8da7-11e9-a43e53f411c2761f","notifyMs":1560408533119,'
    b'"payload":{"a":"1","b":2},"productId":1}'
)
VECTOR_V1 = "92ea60c5249b641f80de046d11e1cb2d15f1d1b2"
VECTOR_V2 = "6ba85d7c1122f6c51143cce7765f06c601c0fbd691987f4510e45b943b2639e8"


def test_sign_body_reproduces_the_spec_test_vector() -> None:
    assert sign_body(VECTOR_SECRET, VECTOR_BODY) == {"Agora-Signature": VECTOR_V1, "Agora-Signature-V2": VECTOR_V2}


@pytest.mark.parametrize(
    "headers",
    [
        {"Agora-Signature-V2": VECTOR_V2},
        {"agora-signature-v2": VECTOR_V2},
        {"AGORA-SIGNATURE-V2": VECTOR_V2.upper()},
        {"Agora-Signature": VECTOR_V1},
        {"agora-signature": VECTOR_V1},
        {"Agora-Signature": VECTOR_V1, "Agora-Signature-V2": VECTOR_V2},
        {"Agora-Signature": "wrong", "Agora-Signature-V2": VECTOR_V2},
    ],
)
def test_valid_signatures_are_accepted(headers: dict[str, str]) -> None:
    assert verify_signature(VECTOR_SECRET, VECTOR_BODY, headers) is True


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Content-Type": "application/json"},
        {"Agora-Signature-V2": "0" * 64},
        {"Agora-Signature-V2": ""},
        {"Agora-Signature-V2": "é" * 64},
        {"Agora-Signature": "0" * 40},
        {"Agora-Signature": VECTOR_V1, "Agora-Signature-V2": "0" * 64},
        {"Agora-Signature-V2": VECTOR_V1},
    ],
)
def test_invalid_or_missing_signatures_are_rejected(headers: dict[str, str]) -> None:
    assert verify_signature(VECTOR_SECRET, VECTOR_BODY, headers) is False


def test_signature_covers_the_raw_bytes_not_the_json_meaning() -> None:
    reserialised = json.dumps(json.loads(VECTOR_BODY)).encode()
    assert verify_signature(VECTOR_SECRET, reserialised, {"Agora-Signature-V2": VECTOR_V2}) is False
    assert verify_signature("other-secret", VECTOR_BODY, {"Agora-Signature-V2": VECTOR_V2}) is False


def test_empty_secret_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="secret"):
        verify_signature("", VECTOR_BODY, {"Agora-Signature-V2": VECTOR_V2})
    with pytest.raises(ValueError, match="secret"):
        sign_body("", VECTOR_BODY)


@settings(max_examples=50, deadline=None)
@given(secret=st.text(min_size=1, max_size=40), body=st.binary(max_size=300))
def test_sign_then_verify_round_trips(secret: str, body: bytes) -> None:
    assert verify_signature(secret, body, sign_body(secret, body))
    assert not verify_signature(secret, body + b" ", sign_body(secret, body))


def _envelope(event_type: int, payload: dict[str, object]) -> bytes:
    return json.dumps(
        {
            "sid": "C866467GVJJ54687",
            "noticeId": "2000001428:4330:107",
            "productId": 17,
            "eventType": event_type,
            "notifyMs": 1611566412672,
            "payload": payload,
        }
    ).encode()


def test_parse_agent_left_notification() -> None:
    payload = {
        "agent_id": "1NT29X10YHxxxxxWJOXLYHNYB",
        "name": "my-agent",
        "start_ts": 1737111452,
        "stop_ts": 1737111455,
        "channel": "xxxxx",
        "status": "STOPPED",
        "message": "Idle for too long",
        "labels": {"call_id": "42"},
    }

    notification = parse_notification(_envelope(102, payload))

    assert notification == Notification("2000001428:4330:107", 102, 1611566412672, payload, product_id=17)
    assert notification.is_convoai
    assert notification.agent_id == "1NT29X10YHxxxxxWJOXLYHNYB"
    assert notification.name == "my-agent"
    assert notification.channel == "xxxxx"
    assert notification.labels == {"call_id": "42"}
    assert notification.stop_message == "Idle for too long"
    assert notification.status == "STOPPED"
    assert (notification.start_ts, notification.stop_ts) == (1737111452, 1737111455)
    assert notification.contents == ()


def test_parse_history_notification_keeps_role_and_content_only() -> None:
    payload = {
        "agent_id": "A1",
        "contents": [
            {"role": "user", "content": "hello.", "turn_id": 1, "metadata": {"source": "asr"}},
            {"role": "assistant", "content": None},
            "not-an-item",
        ],
    }

    notification = parse_notification(_envelope(103, payload))

    assert notification.contents == (HistoryItem("user", "hello."), HistoryItem("assistant", ""))
    assert notification.labels == {}
    assert notification.stop_message is None
    assert notification.status is None


def test_numeric_notice_id_is_accepted_as_text() -> None:
    body = json.dumps({"noticeId": 12345, "eventType": 101, "notifyMs": 1, "payload": {}}).encode()
    assert parse_notification(body).notice_id == "12345"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"eventType": 101, "notifyMs": 1, "payload": {}}', "noticeId"),
        (b'{"noticeId": "", "eventType": 101, "notifyMs": 1, "payload": {}}', "noticeId"),
        (b'{"noticeId": "n", "eventType": "101", "notifyMs": 1, "payload": {}}', "eventType"),
        (b'{"noticeId": "n", "eventType": true, "notifyMs": 1, "payload": {}}', "eventType"),
        (b'{"noticeId": "n", "eventType": 101, "payload": {}}', "notifyMs"),
        (b'{"noticeId": "n", "eventType": 101, "notifyMs": 1}', "payload"),
        (b'{"noticeId": "n", "eventType": 101, "notifyMs": 1, "payload": []}', "payload"),
    ],
)
def test_malformed_envelopes_raise_value_error_naming_the_problem(body: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_notification(body)


@settings(max_examples=100, deadline=None)
@given(body=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_parse_never_fails_with_anything_but_value_error(body: bytes) -> None:
    try:
        notification = parse_notification(body)
    except ValueError:
        return
    assert isinstance(notification.labels, dict)
    assert isinstance(notification.contents, tuple)
