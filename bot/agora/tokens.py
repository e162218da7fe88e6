"""RTC tokens: building them for the agent and the browser, and checking them (used by the test emulator).

Everything that mints a token goes through :func:`build_rtc_token`. The default format is ``007``
(AccessToken2, spec §7.3) with RTC privileges for the channel and uid plus the RTM login privilege, exactly
what Agora's own ConvoAI samples and the official ``agora-agents`` SDK (``generate_convo_ai_token``) send.
The SDK's builder stamps tokens with the wall clock and a random salt it draws itself, so it cannot follow
the bot's injectable clock (which the call lifecycle and its tests rely on for renewals); the few lines of
packing and signing below follow the published format and are checked in the tests against Agora's official
test vector and byte for byte against the SDK's builder. ``006`` tokens (``agora.token_format = "006"``) come
from the PyPI package ``agora-token-builder``, which makes only that format.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
import secrets
import struct
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from hashlib import sha256
from typing import Literal

from agora_token_builder.RtcTokenBuilder import Role_Publisher, RtcTokenBuilder

TOKEN_006_VERSION = "006"
TOKEN_007_VERSION = "007"
TokenFormat = Literal["007", "006"]
TOKEN_FORMATS: tuple[TokenFormat, ...] = ("007", "006")
APP_ID_LENGTH = 32
MAX_TOKEN_LIFETIME_SECONDS = 86_400
MAX_RTC_UID = 2**32 - 1

PRIVILEGE_JOIN_CHANNEL = 1
PRIVILEGE_PUBLISH_AUDIO = 2
PRIVILEGE_PUBLISH_VIDEO = 3
PRIVILEGE_PUBLISH_DATA = 4
PRIVILEGE_RTM_LOGIN = 1

SERVICE_RTC = 1
SERVICE_RTM = 2
SERVICE_STREAMING = 3
SERVICE_FPA = 4
SERVICE_CHAT = 5
SERVICE_FCDN = 6
SERVICE_APAAS = 7
SERVICE_RTM2 = 8
SERVICE_CONVOAI = 9
SERVICE_STT = 10

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


@dataclass(frozen=True)
class TokenService:
    """One service of a ``007`` token: its privileges (seconds after ``issue_ts``) and its identity fields
    (channel and uid for RTC, user id for RTM)."""

    type: int
    privileges: dict[int, int]
    fields: tuple[bytes, ...]


@dataclass(frozen=True)
class ParsedToken007:
    """The decoded fields of a ``007`` AccessToken2; all expiries are relative to ``issue_ts``."""

    app_id: str
    signature: bytes
    issue_ts: int
    expire: int
    salt: int
    services: dict[int, TokenService]
    signing_info: bytes

    def expires_at(self) -> int:
        """When joining the channel stops being allowed: the earlier of the token's and the join privilege's
        expiry (absolute Unix time)."""
        rtc = self.services.get(SERVICE_RTC)
        join = rtc.privileges.get(PRIVILEGE_JOIN_CHANNEL, 0) if rtc else 0
        return self.privilege_expires_at(join)

    def privilege_expires_at(self, privilege_expire: int) -> int:
        """When a privilege valid for ``privilege_expire`` seconds ends (absolute Unix time). 0 means "until the
        token expires": Agora's builders (``RtcTokenBuilder2.build_token_with_rtm(..., privilege_expire=0)``, the
        default) write 0, and a privilege never outlives its token."""
        if privilege_expire == 0:
            return self.issue_ts + self.expire
        return self.issue_ts + min(self.expire, privilege_expire)

    def token_expires_at(self) -> int:
        return self.issue_ts + self.expire


def build_rtc_token(
    app_id: str,
    app_certificate: str,
    channel: str,
    uid: int,
    expires_in: int,
    *,
    now: int | None = None,
    token_format: TokenFormat = "007",
) -> str:
    """Mint a publisher token for ``uid`` in ``channel``, valid for ``expires_in`` seconds from ``now``.

    ``007`` (the default) carries RTC join/publish privileges and the RTM login privilege for ``uid``, as the
    agent needs when RTM is enabled and as Agora's samples give the browser too; ``006`` (agora-token-builder)
    carries RTC privileges only. ``uid`` 0 makes a token valid for any uid (Agora's convention).
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
    if token_format == TOKEN_007_VERSION:
        return _build_token_007(app_id, app_certificate, channel, uid, expires_in, issued_at)
    if token_format != TOKEN_006_VERSION:
        raise ValueError(f"agora.token_format must be one of {TOKEN_FORMATS}, got {token_format!r}")
    token = RtcTokenBuilder.buildTokenWithUid(
        app_id, app_certificate, channel, uid, Role_Publisher, issued_at + expires_in
    )
    return str(token)


def _build_token_007(
    app_id: str, app_certificate: str, channel: str, uid: int, expires_in: int, issue_ts: int, salt: int | None = None
) -> str:
    """AccessToken2 with an RTC service (privileges 1-4) and an RTM service (login), as
    ``agora_agent.agentkit.token.generate_convo_ai_token`` builds it."""
    account = "" if uid == 0 else str(uid)
    rtc = _pack_u16(SERVICE_RTC) + _pack_privileges(dict.fromkeys((1, 2, 3, 4), expires_in))
    rtc += _pack_string(channel.encode()) + _pack_string(account.encode())
    rtm = _pack_u16(SERVICE_RTM) + _pack_privileges({PRIVILEGE_RTM_LOGIN: expires_in}) + _pack_string(str(uid).encode())
    salt = secrets.randbelow(99_999_999) + 1 if salt is None else salt
    signing_info = (
        _pack_string(app_id.encode()) + struct.pack("<III", issue_ts, expires_in, salt) + _pack_u16(2) + rtc + rtm
    )
    signature = hmac.new(_signing_key_007(app_certificate, issue_ts, salt), signing_info, sha256).digest()
    return TOKEN_007_VERSION + base64.b64encode(zlib.compress(_pack_string(signature) + signing_info)).decode()


def _signing_key_007(app_certificate: str, issue_ts: int, salt: int) -> bytes:
    key = hmac.new(struct.pack("<I", issue_ts), app_certificate.encode(), sha256).digest()
    return hmac.new(struct.pack("<I", salt), key, sha256).digest()


def _pack_u16(value: int) -> bytes:
    return struct.pack("<H", value)


def _pack_string(value: bytes) -> bytes:
    return _pack_u16(len(value)) + value


def _pack_privileges(privileges: dict[int, int]) -> bytes:
    packed = _pack_u16(len(privileges))
    for key in sorted(privileges):
        packed += struct.pack("<HI", key, privileges[key])
    return packed


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


def parse_rtc_token_007(token: str) -> ParsedToken007:
    """Decode a ``007`` AccessToken2 (spec §7.3); raises ValueError when it is not one.

    Services are read as Agora's own parser reads them (TOOLS ``AccessToken2.from_string``): every service type
    it knows is decoded, and at the first type it does not know it stops and keeps what it has. An unknown
    service's layout cannot be skipped (there is no length prefix), and its bytes stay covered by the signature,
    which is computed over all of ``signing_info``. Builders write services sorted by type, so RTC (1) and RTM
    (2) come before any newer service.
    """
    if not token.startswith(TOKEN_007_VERSION):
        raise ValueError(f"not a 007 token (starts with {token[:3]!r})")
    try:
        content = zlib.decompress(base64.b64decode(token[3:], validate=True))
    except (binascii.Error, ValueError, zlib.error) as exc:
        raise ValueError("007 token content is not compressed base64") from exc
    reader = _Reader(content, "007")
    signature = reader.string()
    info_start = reader.position
    app_id = reader.string().decode("latin-1")
    issue_ts, expire, salt = reader.u32(), reader.u32(), reader.u32()
    services: dict[int, TokenService] = {}
    for _ in range(reader.u16()):
        service_type = reader.u16()
        read_fields = _SERVICE_FIELDS.get(service_type)
        if read_fields is None:
            break
        privileges = {reader.u16(): reader.u32() for _ in range(reader.u16())}
        services[service_type] = TokenService(service_type, privileges, read_fields(reader))
    else:
        reader.expect_end()
    return ParsedToken007(app_id, signature, issue_ts, expire, salt, services, content[info_start:])


def _rtm2_fields(reader: _Reader) -> tuple[bytes, ...]:
    """RTM2 (type 8): the user id, then resource permissions kept as their raw bytes."""
    user_id = reader.string()
    start = reader.position
    for _ in range(reader.u16()):
        reader.u16()
        for _ in range(reader.u16()):
            reader.u16()
            for _ in range(reader.u16()):
                reader.string()
    return (user_id, reader.slice(start))


_SERVICE_FIELDS: dict[int, Callable[[_Reader], tuple[bytes, ...]]] = {
    SERVICE_RTC: lambda r: (r.string(), r.string()),
    SERVICE_RTM: lambda r: (r.string(),),
    SERVICE_STREAMING: lambda r: (r.string(), r.string()),
    SERVICE_FPA: lambda r: (),
    SERVICE_CHAT: lambda r: (r.string(),),
    SERVICE_FCDN: lambda r: (r.string(), r.string()),
    SERVICE_APAAS: lambda r: (r.string(), r.string(), r.take(2)),
    SERVICE_RTM2: _rtm2_fields,
    SERVICE_CONVOAI: lambda r: (),
    SERVICE_STT: lambda r: (),
}
"""The identity fields after each known service's privileges (TOOLS ``AccessToken2`` Python and Node.js)."""


def verify_rtc_token_007(
    token: str,
    app_id: str,
    app_certificate: str,
    channel: str,
    uid: int | str,
    now: int | float,
    *,
    need_rtm: bool = False,
) -> str | None:
    """Return None when the AccessToken2 ``token`` lets ``uid`` join ``channel`` at ``now``, else a short reason.

    Checks the app ID, the signature, the RTC service's channel and uid (an empty uid is a wildcard), the
    join privilege, expiry (the token's and the join privilege's), and with ``need_rtm`` an RTM login for uid.
    """
    try:
        parsed = parse_rtc_token_007(token)
    except ValueError as exc:
        return str(exc)
    problem = _signed_for_app(parsed, app_id, app_certificate)
    if problem is not None:
        return problem
    rtc = parsed.services.get(SERVICE_RTC)
    if rtc is None:
        return "token has no RTC service"
    token_channel, token_uid = rtc.fields
    if token_channel != channel.encode():
        return "token was minted for another channel"
    uid_text = "" if str(uid) == "0" else str(uid)
    if token_uid not in (b"", uid_text.encode()):
        return "token was minted for another uid"
    if PRIVILEGE_JOIN_CHANNEL not in rtc.privileges:
        return "token lacks the join-channel privilege"
    if now >= parsed.expires_at():
        return "token has expired"
    if need_rtm:
        rtm = parsed.services.get(SERVICE_RTM)
        if rtm is None or PRIVILEGE_RTM_LOGIN not in rtm.privileges:
            return "token lacks the RTM login privilege"
        if rtm.fields[0] != str(uid).encode():
            return "token's RTM user is another uid"
        if now >= parsed.privilege_expires_at(rtm.privileges[PRIVILEGE_RTM_LOGIN]):
            return "token's RTM privilege has expired"
    return None


def verify_access_token_007(token: str, app_id: str, app_certificate: str, now: int | float) -> str | None:
    """Return None when ``token`` is an AccessToken2 of this app, signed with its certificate and not expired at
    ``now``, else a short reason: the check for ``Authorization: agora token=<token>`` on Agora's REST API (spec
    §2). Channel, uid and services are not checked there: Agora's SDK signs ``leave`` with a token minted for
    channel "stop" and uid 0."""
    try:
        parsed = parse_rtc_token_007(token)
    except ValueError as exc:
        return str(exc)
    problem = _signed_for_app(parsed, app_id, app_certificate)
    if problem is not None:
        return problem
    if now >= parsed.token_expires_at():
        return "token has expired"
    return None


def _signed_for_app(parsed: ParsedToken007, app_id: str, app_certificate: str) -> str | None:
    if parsed.app_id != app_id:
        return "token was minted for another app id"
    expected = hmac.new(
        _signing_key_007(app_certificate, parsed.issue_ts, parsed.salt), parsed.signing_info, sha256
    ).digest()
    if not hmac.compare_digest(expected, parsed.signature):
        return "token signature does not match the app certificate"
    return None


def verify_rtc_token(
    token: str,
    app_id: str,
    app_certificate: str,
    channel: str,
    uid: int | str,
    now: int | float,
    *,
    need_rtm: bool = False,
) -> str | None:
    """Verify a ``007`` or ``006`` token (see the two functions); ``006`` tokens never carry RTM."""
    if token.startswith(TOKEN_007_VERSION):
        return verify_rtc_token_007(token, app_id, app_certificate, channel, uid, now, need_rtm=need_rtm)
    if token.startswith(TOKEN_006_VERSION):
        problem = verify_rtc_token_006(token, app_id, app_certificate, channel, uid, now)
        if problem is None and need_rtm:
            return "a 006 token carries no RTM privileges"
        return problem
    return f"not a 007 or 006 token (starts with {token[:3]!r})"


def token_expires_at(token: str) -> int | None:
    """When the token stops letting its holder join (absolute Unix time); None for a token that never expires
    or cannot be read."""
    try:
        if token.startswith(TOKEN_007_VERSION):
            return parse_rtc_token_007(token).expires_at()
        return parse_rtc_token_006(token).privileges.get(PRIVILEGE_JOIN_CHANNEL) or None
    except ValueError:
        return None


def _crc32(text: str) -> int:
    return zlib.crc32(text.encode()) & 0xFFFFFFFF


class _Reader:
    """Little-endian reader for the packed token layout; every short read is a ValueError."""

    def __init__(self, data: bytes, version: str = TOKEN_006_VERSION) -> None:
        self._data = data
        self._position = 0
        self._version = version

    @property
    def position(self) -> int:
        return self._position

    def take(self, size: int) -> bytes:
        end = self._position + size
        if end > len(self._data):
            raise ValueError(f"{self._version} token is truncated")
        chunk = self._data[self._position : end]
        self._position = end
        return chunk

    def slice(self, start: int) -> bytes:
        """The bytes read since ``start``."""
        return self._data[start : self._position]

    def u16(self) -> int:
        value: int = struct.unpack("<H", self.take(2))[0]
        return value

    def u32(self) -> int:
        value: int = struct.unpack("<I", self.take(4))[0]
        return value

    def string(self) -> bytes:
        return self.take(self.u16())

    def expect_end(self) -> None:
        if self._position != len(self._data):
            raise ValueError(f"{self._version} token has trailing bytes")
