"""RTC tokens: building them for the agent and the browser, and checking them (used by the test emulator).

The project mandates the PyPI package ``agora-token-builder`` 1.0.0, which only makes ``006`` tokens
(spec §7.1). Everything that mints a token goes through :func:`build_rtc_token`, so moving to ``007``
AccessToken2 later is a change in one place.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
import struct
import time
import zlib
from dataclasses import dataclass
from hashlib import sha256

from agora_token_builder.RtcTokenBuilder import Role_Publisher, RtcTokenBuilder

TOKEN_006_VERSION = "006"
APP_ID_LENGTH = 32
MAX_TOKEN_LIFETIME_SECONDS = 86_400
MAX_RTC_UID = 2**32 - 1

PRIVILEGE_JOIN_CHANNEL = 1
PRIVILEGE_PUBLISH_AUDIO = 2
PRIVILEGE_PUBLISH_VIDEO = 3
PRIVILEGE_PUBLISH_DATA = 4

_HEX32 = re.compile(r"[0-9a-fA-F]{32}")


@dataclass(frozen=True)
class ParsedToken006:
    """The decoded fields of a ``006`` token.

    ``ts`` is set by agora-token-builder from the wall clock (issue time + 24 h) and cannot be injected;
    ``privileges`` maps privilege numbers to absolute Unix expiry times (0 = never expires).
    """

    app_id: str
    signature: bytes
    crc_channel: int
    crc_uid: int
    salt: int
    ts: int
    privileges: dict[int, int]
    signed_message: bytes


def build_rtc_token(
    app_id: str,
    app_certificate: str,
    channel: str,
    uid: int,
    expires_in: int,
    *,
    now: int | None = None,
) -> str:
    """Mint a publisher RTC token for ``uid`` in ``channel``, valid for ``expires_in`` seconds from ``now``.

    Produces a ``006`` token with agora-token-builder, the format the project currently mandates; this is the
    only function that knows the format. ``uid`` 0 makes a token valid for any uid (Agora's convention).
    """
    validate_app_id(app_id)
    validate_app_certificate(app_certificate)
    if not channel:
        raise ValueError("channel must not be empty")
    if not 0 <= uid <= MAX_RTC_UID:
        raise ValueError(f"uid must be between 0 and {MAX_RTC_UID}, got {uid}")
    if not 1 <= expires_in <= MAX_TOKEN_LIFETIME_SECONDS:
        raise ValueError(f"expires_in must be between 1 and {MAX_TOKEN_LIFETIME_SECONDS} seconds, got {expires_in}")
    issued_at = int(time.time()) if now is None else now
    token = RtcTokenBuilder.buildTokenWithUid(
        app_id, app_certificate, channel, uid, Role_Publisher, issued_at + expires_in
    )
    return str(token)


def validate_app_id(app_id: str) -> None:
    if not _HEX32.fullmatch(app_id or ""):
        raise ValueError("agora.app_id must be the 32-character hex App ID from Agora Console")


def validate_app_certificate(app_certificate: str) -> None:
    if not _HEX32.fullmatch(app_certificate or ""):
        raise ValueError("AGORA_APP_CERTIFICATE must be the 32-character hex App Certificate from Agora Console")


def parse_rtc_token_006(token: str) -> ParsedToken006:
    """Decode a ``006`` token (spec §7.4); raises ValueError when it is not one."""
    if not token.startswith(TOKEN_006_VERSION):
        raise ValueError(f"not a 006 token (starts with {token[:3]!r})")
    app_id = token[3 : 3 + APP_ID_LENGTH]
    if not _HEX32.fullmatch(app_id):
        raise ValueError("006 token does not carry a 32-hex app id")
    try:
        content = base64.b64decode(token[3 + APP_ID_LENGTH :], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("006 token content is not valid base64") from exc
    reader = _Reader(content)
    signature = reader.string()
    crc_channel = reader.u32()
    crc_uid = reader.u32()
    signed_message = reader.string()
    reader.expect_end()
    message = _Reader(signed_message)
    salt = message.u32()
    ts = message.u32()
    privileges = {message.u16(): message.u32() for _ in range(message.u16())}
    message.expect_end()
    return ParsedToken006(app_id, signature, crc_channel, crc_uid, salt, ts, privileges, signed_message)


def verify_rtc_token_006(
    token: str,
    app_id: str,
    app_certificate: str,
    channel: str,
    uid: int | str,
    now: int | float,
) -> str | None:
    """Return None when ``token`` lets ``uid`` join ``channel`` at ``now``, else a short reason.

    A token minted for uid 0 (empty uid) is a wildcard. Expiry is judged by the join-channel privilege, the
    only expiry :func:`build_rtc_token` controls; the wall-clock ``ts`` field is not checked.
    """
    try:
        parsed = parse_rtc_token_006(token)
    except ValueError as exc:
        return str(exc)
    if parsed.app_id != app_id:
        return "token was minted for another app id"
    if parsed.crc_channel != _crc32(channel):
        return "token was minted for another channel"
    uid_text = "" if str(uid) == "0" else str(uid)
    if parsed.crc_uid == _crc32(uid_text):
        signed_uid = uid_text
    elif parsed.crc_uid == _crc32(""):
        signed_uid = ""
    else:
        return "token was minted for another uid"
    payload = app_id.encode() + channel.encode() + signed_uid.encode() + parsed.signed_message
    expected = hmac.new(app_certificate.encode(), payload, sha256).digest()
    if not hmac.compare_digest(expected, parsed.signature):
        return "token signature does not match the app certificate"
    join_expiry = parsed.privileges.get(PRIVILEGE_JOIN_CHANNEL)
    if join_expiry is None:
        return "token lacks the join-channel privilege"
    if join_expiry != 0 and join_expiry <= now:
        return "token has expired"
    return None


def _crc32(text: str) -> int:
    return zlib.crc32(text.encode()) & 0xFFFFFFFF


class _Reader:
    """Little-endian reader for the packed token layout; every short read is a ValueError."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._position = 0

    def _take(self, size: int) -> bytes:
        end = self._position + size
        if end > len(self._data):
            raise ValueError("006 token is truncated")
        chunk = self._data[self._position : end]
        self._position = end
        return chunk

    def u16(self) -> int:
        value: int = struct.unpack("<H", self._take(2))[0]
        return value

    def u32(self) -> int:
        value: int = struct.unpack("<I", self._take(4))[0]
        return value

    def string(self) -> bytes:
        return self._take(self.u16())

    def expect_end(self) -> None:
        if self._position != len(self._data):
            raise ValueError("006 token has trailing bytes")
