"""Agora Notification Center Service (NCS) webhooks: signatures and the notification envelope (spec §6).

Signatures are HMAC over the raw request bytes, never over re-serialised JSON. Deliveries can be duplicated
and arrive out of order; callers deduplicate by ``notice_id`` (and ``agent_id``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bot.agora.client import HistoryItem, parse_history_items

SIGNATURE_V1_HEADER = "Agora-Signature"
SIGNATURE_V2_HEADER = "Agora-Signature-V2"
CONVOAI_PRODUCT_ID = 17

EVENT_AGENT_JOINED = 101
EVENT_AGENT_LEFT = 102
EVENT_AGENT_HISTORY = 103
EVENT_AGENT_TOKEN_EXPIRING = 104
EVENT_AGENT_ERROR = 110
EVENT_AGENT_METRICS = 111
EVENT_TURNS_FINISHED = 112


def sign_body(secret: str, raw_body: bytes) -> dict[str, str]:
    """Both NCS signature headers for ``raw_body``: HMAC-SHA1 (V1) and HMAC-SHA256 (V2), lower-case hex."""
    key = _secret_bytes(secret)
    return {
        SIGNATURE_V1_HEADER: hmac.new(key, raw_body, hashlib.sha1).hexdigest(),
        SIGNATURE_V2_HEADER: hmac.new(key, raw_body, hashlib.sha256).hexdigest(),
    }


def verify_signature(secret: str, raw_body: bytes, headers: Mapping[str, str]) -> bool:
    """True when the signature headers match ``raw_body``.

    V2 (SHA-256) is authoritative when present, even if a V1 header is also sent; V1 is used only when V2 is
    absent. An empty secret raises ValueError: it is a configuration error, not a bad request.
    """
    key = _secret_bytes(secret)
    lowered = {name.lower(): value for name, value in headers.items()}
    v2 = lowered.get(SIGNATURE_V2_HEADER.lower())
    if v2 is not None:
        return _digest_matches(hmac.new(key, raw_body, hashlib.sha256).hexdigest(), v2)
    v1 = lowered.get(SIGNATURE_V1_HEADER.lower())
    if v1 is not None:
        return _digest_matches(hmac.new(key, raw_body, hashlib.sha1).hexdigest(), v1)
    return False


def _secret_bytes(secret: str) -> bytes:
    if not secret:
        raise ValueError("the Agora webhook secret (AGORA_WEBHOOK_SECRET) is empty")
    return secret.encode()


def _digest_matches(expected_hex: str, received: str) -> bool:
    return hmac.compare_digest(expected_hex.encode(), received.strip().lower().encode())


@dataclass(frozen=True)
class Notification:
    """One NCS envelope. ``payload`` is kept as sent; the properties read its common ConvoAI fields."""

    notice_id: str
    event_type: int
    notify_ms: int
    payload: dict[str, Any]
    product_id: int | None = None

    @property
    def is_convoai(self) -> bool:
        """Whether Conversational AI sent it: one NCS webhook URL may also receive other products' events
        (RTC channel events, cloud recording...), whose event types overlap ConvoAI's."""
        return self.product_id == CONVOAI_PRODUCT_ID

    @property
    def agent_id(self) -> str | None:
        return _optional_str(self.payload.get("agent_id"))

    @property
    def name(self) -> str | None:
        return _optional_str(self.payload.get("name"))

    @property
    def channel(self) -> str | None:
        return _optional_str(self.payload.get("channel"))

    @property
    def labels(self) -> dict[str, str]:
        raw = self.payload.get("labels")
        if not isinstance(raw, Mapping):
            return {}
        return {str(key): value if isinstance(value, str) else str(value) for key, value in raw.items()}

    @property
    def contents(self) -> tuple[HistoryItem, ...]:
        """History items of a 103 notification (empty for other events)."""
        return parse_history_items(self.payload.get("contents"))

    @property
    def stop_message(self) -> str | None:
        """The exit reason of a 102 notification, e.g. "OK" or "Idle for too long"."""
        return _optional_str(self.payload.get("message"))

    @property
    def status(self) -> str | None:
        return _optional_str(self.payload.get("status"))

    @property
    def start_ts(self) -> int | None:
        return _optional_int(self.payload.get("start_ts"))

    @property
    def stop_ts(self) -> int | None:
        return _optional_int(self.payload.get("stop_ts"))


def parse_notification(raw_body: bytes) -> Notification:
    """Parse an NCS envelope; ValueError with a readable message when it is not one."""
    try:
        decoded: Any = json.loads(raw_body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"notification body is not valid JSON: {exc}") from exc
    except RecursionError as exc:  # a few KB of "[" nest deeper than the parser goes
        raise ValueError("notification body is nested too deeply") from exc
    if not isinstance(decoded, dict):
        raise ValueError("notification body must be a JSON object")
    notice_id = decoded.get("noticeId")
    if isinstance(notice_id, bool) or not isinstance(notice_id, str | int) or notice_id == "":
        raise ValueError("notification noticeId is missing or not a string")
    event_type = _required_int(decoded, "eventType")
    notify_ms = _required_int(decoded, "notifyMs")
    payload = decoded.get("payload")
    if not isinstance(payload, dict):
        raise ValueError("notification payload is missing or not an object")
    product_id = decoded.get("productId")
    return Notification(
        notice_id=str(notice_id),
        event_type=event_type,
        notify_ms=notify_ms,
        payload=payload,
        product_id=product_id if isinstance(product_id, int) and not isinstance(product_id, bool) else None,
    )


def _required_int(envelope: Mapping[str, Any], key: str) -> int:
    value = envelope.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"notification {key} is missing or not an integer")
    return value


def _optional_str(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else str(value)


def _optional_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value
