"""A loopback fake of Discord (REST API v10 + gateway) for wire-level smoke tests of a discord.py bot.

See ``/work/shared/specs/discord-testing.md`` §1.5 for what the fake must implement. In short: an aiohttp
server on 127.0.0.1 answers the handful of REST routes a slash-command bot uses and speaks just enough of the
gateway protocol (HELLO, heartbeat ACK, IDENTIFY -> READY + GUILD_CREATE) for ``bot.start(token)`` to reach
``on_ready``. Test code then pushes interactions (:meth:`FakeDiscord.slash`, :meth:`FakeDiscord.click`, ...)
and reads what the bot answered (:meth:`FakeDiscord.next_response`).

OpenAPI validation
------------------
Every request body the bot sends (JSON, or the ``payload_json`` part of a multipart request) and every
declared path and query parameter is validated against Discord's own OpenAPI 3.1 description
(``discord_openapi.json`` next to this file, a copy of discord/discord-api-spec commit 74fda0fad044, MIT, see
``DISCORD_OPENAPI_LICENSE``). An invalid request is answered like Discord does -- HTTP 400, ``{"message":
"Invalid Form Body", "code": 50035, "errors": {...}}`` -- so the bot raises :class:`discord.HTTPException`,
and it is recorded in :attr:`FakeDiscord.invalid_requests`; call
:meth:`FakeDiscord.assert_no_invalid_requests` at teardown. Where discord.py 2.7.1's real payloads disagree
with the published schema, the schema is widened by an explicit, documented entry in :data:`SCHEMA_ALLOWANCES`
(an allowance only ever *adds* an accepted alternative, it never drops a rule). The fake's own JSON answers
are validated against the documented response schemas too; mismatches (bugs of the fake, not of the bot) land
in :attr:`FakeDiscord.invalid_responses`.

The document is parsed once per process and validators are built lazily per schema location and cached
(:func:`openapi`), so a test pays roughly 60 ms once and microseconds afterwards.

Known gaps (why this fake is for smoke tests only, spec §1.5.6): one guild, one text channel, no roles or
channel overwrites, no rate limits, no resume/reconnect, no token expiry, unknown JSON fields are accepted
(the published schemas do not forbid additional properties). Rules it *does* enforce beyond the schema:
commands must be synced before a user can run them, ``default_member_permissions`` gates invocation, ephemeral
messages can only be clicked by their recipient, an interaction can be acknowledged once, followups need an
acknowledged interaction, the first followup after a deferred response edits the loading message and keeps its
ephemeral flag (as Discord documents), modals can only be submitted by the user they were shown to, and
bot-authenticated routes need an ``Authorization: Bot ...`` header.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import itertools
import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import discord
import yarl
from aiohttp import BodyPartReader, WSMsgType, web
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError
from referencing import Registry
from referencing.jsonschema import DRAFT202012

log = logging.getLogger(__name__)

OPENAPI_FILE = Path(__file__).with_name("discord_openapi.json")
_DOC_URI = "urn:fake-discord:openapi"
_ORIGINALS_KEY = "x-fake-discord-originals"
API_PREFIX = "/api/v10"
JSON_CONTENT_TYPE = "application/json"  # exactly this string: discord.http.json_or_text compares with ==

# Interaction types (Discord API).
APPLICATION_COMMAND, MESSAGE_COMPONENT, AUTOCOMPLETE, MODAL_SUBMIT = 2, 3, 4, 5
# Interaction callback types.
CHANNEL_MESSAGE, DEFERRED_CHANNEL_MESSAGE, DEFERRED_UPDATE, UPDATE_MESSAGE = 4, 5, 6, 7
AUTOCOMPLETE_RESULT, MODAL = 8, 9
# Message flags.
EPHEMERAL, LOADING = 1 << 6, 1 << 7
ADMINISTRATOR = 1 << 3

# Which callback types Discord accepts for which interaction type (PONG and activities are out of scope).
_ALLOWED_CALLBACKS: dict[int, frozenset[int]] = {
    APPLICATION_COMMAND: frozenset({CHANNEL_MESSAGE, DEFERRED_CHANNEL_MESSAGE, MODAL}),
    MESSAGE_COMPONENT: frozenset({CHANNEL_MESSAGE, DEFERRED_CHANNEL_MESSAGE, DEFERRED_UPDATE, UPDATE_MESSAGE, MODAL}),
    AUTOCOMPLETE: frozenset({AUTOCOMPLETE_RESULT}),
    MODAL_SUBMIT: frozenset({CHANNEL_MESSAGE, DEFERRED_CHANNEL_MESSAGE, DEFERRED_UPDATE, UPDATE_MESSAGE}),
}

# Query-string booleans. The schema only says ``type: boolean``; discord.py 2.7.1 sends ``with_response=1``,
# ``wait=1`` and ``with_components=0`` (``int(bool)``), which real Discord accepts, so 1/0 count as booleans.
QUERY_BOOLEAN_LITERALS: Mapping[str, bool] = {"true": True, "false": False, "1": True, "0": False}


# ----------------------------------------------------------------------------------------------------------
# OpenAPI document: loading, explicit allowances, routing, cached validators
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SchemaAllowance:
    """One documented place where discord.py's real payloads disagree with the published schema.

    The schema at ``pointer`` (a JSON pointer into the OpenAPI document) becomes
    ``anyOf: [<original>, also_accept]``: everything the original schema accepted is still accepted and
    nothing else changes. ``witness`` is a value discord.py really sends there: it must fail the original and
    pass the widened schema (checked by a test, so a stale allowance is noticed once upstream fixes it).
    """

    pointer: str
    also_accept: Mapping[str, Any]
    reason: str
    witness: Any


SCHEMA_ALLOWANCES: tuple[SchemaAllowance, ...] = (
    SchemaAllowance(
        pointer="/components/schemas/MessageAttachmentRequest/properties/id",
        also_accept={"type": "integer", "minimum": 0},
        reason=(
            "discord.py 2.7.1 File.to_dict() sends the attachment id as the integer upload index (0, 1, ...) "
            "matching the multipart part files[<index>]; the schema says SnowflakeType (a string). Discord "
            "accepts integer snowflakes in request bodies."
        ),
        witness=0,
    ),
    SchemaAllowance(
        pointer="/components/schemas/CreatePrivateChannelRequest/properties/recipient_id",
        also_accept={"type": "integer", "minimum": 0},
        reason=(
            "discord.py 2.7.1 HTTPClient.start_private_message() sends recipient_id as an int (User.id); the "
            "schema says SnowflakeType (a string). Discord accepts integer snowflakes in request bodies."
        ),
        witness=1100000000000000001,
    ),
)


def _escape_pointer_token(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _unescape_pointer_token(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _pointer(*tokens: str | int) -> str:
    return "".join("/" + _escape_pointer_token(str(token)) for token in tokens)


def _resolve_pointer(document: Any, pointer: str) -> Any:
    node = document
    for raw in pointer.split("/")[1:]:
        token = _unescape_pointer_token(raw)
        node = node[int(token)] if isinstance(node, list) else node[token]
    return node


_FORMATS = FormatChecker(formats=())


@_FORMATS.checks("uri")
def _is_uri(value: object) -> bool:
    """Absolute URI: a scheme, and a host for http(s).

    jsonschema's own "uri" check needs rfc3987, which is not installed, and would silently pass everything.
    """
    if not isinstance(value, str):
        return True
    parts = urlsplit(value)
    if not parts.scheme or any(ch.isspace() for ch in value):
        return False
    return bool(parts.netloc) if parts.scheme in ("http", "https") else True


@_FORMATS.checks("date-time", raises=ValueError)
def _is_date_time(value: object) -> bool:
    if isinstance(value, str):
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    return True


def _int_range_check(bits: int) -> Callable[[object], bool]:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

    def check(value: object) -> bool:
        if isinstance(value, int) and not isinstance(value, bool):
            return low <= value <= high
        return True

    return check


_FORMATS.checks("int32")(_int_range_check(32))
_FORMATS.checks("int64")(_int_range_check(64))


@dataclass(frozen=True)
class Operation:
    """One (method, path template) operation of the OpenAPI document."""

    method: str  # upper case
    template: str  # e.g. "/interactions/{interaction_id}/{interaction_token}/callback"
    regex: re.Pattern[str]
    literal_segments: int

    @property
    def key(self) -> str:
        return f"{self.method} {self.template}"


@dataclass(frozen=True)
class ParameterSpec:
    name: str
    location: str  # "path" or "query"
    required: bool
    schema_pointer: str
    schema_type: str | None


class OpenAPI:
    """Discord's OpenAPI document plus routing and cached validators; :func:`openapi` gives the shared one."""

    def __init__(self, document: dict[str, Any]) -> None:
        """Takes ownership of ``document`` (freshly parsed JSON): the allowances are applied in place."""
        self.document = document
        self._apply_allowances()
        # Per-instance caches (not functools.cache on methods, which would keep every instance alive).
        self._validators: dict[str, Draft202012Validator] = {}
        self._body_pointers: dict[tuple[Operation, str], str | None] = {}
        self._response_pointers: dict[tuple[Operation, int], str | None] = {}
        self._parameters: dict[Operation, tuple[ParameterSpec, ...]] = {}
        self.registry: Registry[Any] = Registry().with_resource(_DOC_URI, DRAFT202012.create_resource(document))
        self.operations: list[Operation] = []
        for template, item in document["paths"].items():
            for method in item:
                if method in ("get", "put", "post", "patch", "delete"):
                    self.operations.append(_make_operation(method.upper(), template))
        # Most literal segments first, so "/messages/@original" wins over "/messages/{message_id}".
        self.operations.sort(key=lambda op: -op.literal_segments)

    def _apply_allowances(self) -> None:
        if _ORIGINALS_KEY in self.document:
            raise ValueError("allowances were already applied to this document; parse the file again")
        originals: list[Any] = self.document.setdefault(_ORIGINALS_KEY, [])
        for allowance in SCHEMA_ALLOWANCES:
            parent_pointer, _, last = allowance.pointer.rpartition("/")
            parent = _resolve_pointer(self.document, parent_pointer)
            key = _unescape_pointer_token(last)
            originals.append(parent[key])
            original_ref = {"$ref": "#" + _pointer(_ORIGINALS_KEY, len(originals) - 1)}
            parent[key] = {"anyOf": [original_ref, dict(allowance.also_accept)]}

    def original_pointer(self, allowance: SchemaAllowance) -> str:
        """Pointer to the schema as published, before ``allowance`` widened it (for tests)."""
        return _pointer(_ORIGINALS_KEY, SCHEMA_ALLOWANCES.index(allowance))

    def match(self, method: str, path: str) -> tuple[Operation, dict[str, str]] | None:
        """The operation whose path template matches ``path`` (no query string, without ``/api/v10``)."""
        for op in self.operations:
            if op.method != method:
                continue
            found = op.regex.fullmatch(path)
            if found:
                return op, found.groupdict()
        return None

    def operation_spec(self, op: Operation) -> dict[str, Any]:
        return self.document["paths"][op.template][op.method.lower()]

    def validator(self, pointer: str) -> Draft202012Validator:
        """A (cached) validator for the schema at ``pointer``; ``$ref``s resolve within the document."""
        validator = self._validators.get(pointer)
        if validator is None:
            reference = _DOC_URI + "#" + quote(pointer, safe="/~")
            validator = Draft202012Validator({"$ref": reference}, registry=self.registry, format_checker=_FORMATS)
            self._validators[pointer] = validator
        return validator

    def request_body_pointer(self, op: Operation, media_type: str) -> str | None:
        """Where the request-body schema of ``op`` for ``media_type`` is (JSON's if that type is unlisted)."""
        key = (op, media_type)
        if key not in self._body_pointers:
            content = self.operation_spec(op).get("requestBody", {}).get("content", {})
            chosen = media_type if media_type in content else JSON_CONTENT_TYPE
            self._body_pointers[key] = (
                _pointer("paths", op.template, op.method.lower(), "requestBody", "content", chosen, "schema")
                if chosen in content
                else None
            )
        return self._body_pointers[key]

    def request_body_required(self, op: Operation) -> bool:
        return bool(self.operation_spec(op).get("requestBody", {}).get("required"))

    def response_pointer(self, op: Operation, status: int) -> str | None:
        """Where the documented JSON response schema of ``op`` for ``status`` is, if there is one."""
        key = (op, status)
        if key not in self._response_pointers:
            response = self.operation_spec(op).get("responses", {}).get(str(status), {})
            documented = JSON_CONTENT_TYPE in response.get("content", {})
            self._response_pointers[key] = (
                _pointer(
                    "paths",
                    op.template,
                    op.method.lower(),
                    "responses",
                    str(status),
                    "content",
                    JSON_CONTENT_TYPE,
                    "schema",
                )
                if documented
                else None
            )
        return self._response_pointers[key]

    def parameters(self, op: Operation) -> tuple[ParameterSpec, ...]:
        """Path and query parameters of ``op`` (operation-level ones override path-level ones)."""
        if op not in self._parameters:
            self._parameters[op] = self._collect_parameters(op)
        return self._parameters[op]

    def _collect_parameters(self, op: Operation) -> tuple[ParameterSpec, ...]:
        specs: dict[tuple[str, str], ParameterSpec] = {}
        path_item = self.document["paths"][op.template]
        for owner_tokens, params in (
            (("paths", op.template, "parameters"), path_item.get("parameters", [])),
            (
                ("paths", op.template, op.method.lower(), "parameters"),
                self.operation_spec(op).get("parameters", []),
            ),
        ):
            for index, param in enumerate(params):
                schema = param.get("schema", {})
                if "$ref" in schema:
                    schema = _resolve_pointer(self.document, schema["$ref"][1:])
                schema_type = schema.get("type") if isinstance(schema.get("type"), str) else None
                specs[(param["in"], param["name"])] = ParameterSpec(
                    name=param["name"],
                    location=param["in"],
                    required=bool(param.get("required")),
                    schema_pointer=_pointer(*owner_tokens, index, "schema"),
                    schema_type=schema_type,
                )
        return tuple(specs.values())


def _make_operation(method: str, template: str) -> Operation:
    parts = []
    literal = 0
    for segment in template.strip("/").split("/"):
        param = re.fullmatch(r"\{(\w+)\}", segment)
        if param:
            parts.append(f"(?P<{param.group(1)}>[^/]+)")
        else:
            parts.append(re.escape(segment))
            literal += 1
    return Operation(method, template, re.compile("/" + "/".join(parts)), literal)


@functools.cache
def openapi() -> OpenAPI:
    """The process-wide OpenAPI document (parsed once; validators are built lazily and cached)."""
    with OPENAPI_FILE.open(encoding="utf-8") as fh:
        return OpenAPI(json.load(fh))


# ----------------------------------------------------------------------------------------------------------
# Turning jsonschema errors into Discord's error shape
# ----------------------------------------------------------------------------------------------------------

_WEAK_VALIDATORS = frozenset({"type", "const", "enum"})


def _leaf_errors(error: ValidationError) -> list[ValidationError]:
    """The most specific errors under ``error``.

    For ``anyOf``/``oneOf`` failures jsonschema reports one error whose ``context`` holds the failures of
    every branch; only the branch the sender meant is reported. Discord's unions are discriminated by a
    ``type`` field, so a branch whose ``type`` enum/const matched wins first (``{"type": 7, "data": ...}`` is
    judged as an UPDATE_MESSAGE callback, not as the CREATE_MESSAGE branch that fails on ``type``); if no
    branch's ``type`` matched, that is the one error reported. Then the branch that got deepest into the
    instance (a long button label fails deep inside the button branch), then one with a real constraint
    failure over one that only failed on type/const/enum, then the one with the fewest problems. If branches
    still tie (``"x": 5`` against ``oneOf: [null, string]``) none is more likely and the union error itself is
    reported (see :func:`_discord_error_item`).
    """
    if not error.context:
        return [error]
    branches: dict[Any, list[ValidationError]] = {}
    for sub in error.context:
        branch = sub.relative_schema_path[0] if sub.relative_schema_path else None
        branches.setdefault(branch, []).extend(_leaf_errors(sub))
    discriminator = [*error.absolute_path, "type"]

    def type_mismatch(leaves: list[ValidationError]) -> ValidationError | None:
        for leaf in leaves:
            if leaf.validator in ("enum", "const") and list(leaf.absolute_path) == discriminator:
                return leaf
        return None

    mismatches = [type_mismatch(leaves) for leaves in branches.values()]
    if all(mismatches):
        return [_unknown_type_error(error, discriminator, [m for m in mismatches if m is not None])]

    def score(leaves: list[ValidationError]) -> tuple[bool, int, bool, int]:
        depth = max(len(leaf.absolute_path) for leaf in leaves)
        strong = any(leaf.validator not in _WEAK_VALIDATORS for leaf in leaves)
        return type_mismatch(leaves) is None, depth, strong, -len(leaves)

    ranked = sorted(branches.values(), key=score, reverse=True)
    if len(ranked) > 1 and score(ranked[0]) == score(ranked[1]) and not score(ranked[0])[2]:
        return [error]
    return ranked[0]


def _unknown_type_error(
    union: ValidationError, discriminator: list[Any], mismatches: list[ValidationError]
) -> ValidationError:
    """One ``type: X is not one of [...]`` error for a union none of whose branches has that ``type``."""
    allowed: list[Any] = []
    for mismatch in mismatches:
        values = mismatch.validator_value if mismatch.validator == "enum" else [mismatch.validator_value]
        allowed += [value for value in values if value not in allowed]
    try:
        allowed.sort()
    except TypeError:  # mixed types: any stable order will do
        allowed.sort(key=repr)
    return ValidationError(
        f"{mismatches[0].instance!r} is not one of {allowed}",
        validator="enum",
        validator_value=allowed,
        instance=mismatches[0].instance,
        path=discriminator,
        schema_path=list(union.absolute_schema_path),
    )


def _discord_error_item(error: ValidationError) -> tuple[list[str], dict[str, str]]:
    """(path into the body, ``{"code", "message"}``) in the style of Discord's 50035 errors."""
    path = [str(key) for key in error.absolute_path]
    kind, limit = error.validator, error.validator_value
    if kind == "required":
        missing = [name for name in limit if isinstance(error.instance, dict) and name not in error.instance]
        return path + missing[:1], {"code": "BASE_TYPE_REQUIRED", "message": "This field is required"}
    if kind in ("maxLength", "maxItems"):
        return path, {"code": "BASE_TYPE_MAX_LENGTH", "message": f"Must be {limit} or fewer in length."}
    if kind in ("minLength", "minItems"):
        return path, {"code": "BASE_TYPE_MIN_LENGTH", "message": f"Must be {limit} or more in length."}
    if kind == "maximum":
        return path, {"code": "NUMBER_TYPE_MAX", "message": f"Value should be less than or equal to {limit}."}
    if kind == "minimum":
        return path, {
            "code": "NUMBER_TYPE_MIN",
            "message": f"Value should be greater than or equal to {limit}.",
        }
    if kind == "format" and limit == "uri":
        return path, {"code": "URL_TYPE_INVALID_URL", "message": "Not a well formed URL."}
    if kind in ("anyOf", "oneOf") and error.context:
        options = " | ".join(sorted({sub.message for sub in error.context}))
        return path, {
            "code": "FAKE_SCHEMA_UNION",
            "message": f"{error.instance!r} matches none of: {options}",
        }
    message = error.message if len(error.message) <= 300 else error.message[:297] + "..."
    return path, {"code": f"FAKE_SCHEMA_{str(kind).upper()}", "message": message}


def _insert_error(errors: dict[str, Any], path: Sequence[str], item: Mapping[str, str]) -> None:
    node = errors
    for key in path:
        node = node.setdefault(key, {})
    node.setdefault("_errors", []).append(dict(item))


def _collect_errors(errors: Iterable[ValidationError], prefix: Sequence[str] = ()) -> tuple[dict[str, Any], list[str]]:
    """Discord-shaped ``errors`` object plus one human-readable line per problem."""
    shaped: dict[str, Any] = {}
    lines: list[str] = []
    seen: set[tuple[tuple[str, ...], str]] = set()
    for error in errors:
        for leaf in _leaf_errors(error):
            path, item = _discord_error_item(leaf)
            full = (*prefix, *path)
            if (full, item["message"]) in seen:
                continue
            seen.add((full, item["message"]))
            _insert_error(shaped, full, item)
            where = ".".join(full) or "<body>"
            schema_at = "/".join(str(p) for p in leaf.absolute_schema_path)
            lines.append(f"{where}: {item['message']} [{item['code']}; schema path {schema_at}]")
    return shaped, lines


# ----------------------------------------------------------------------------------------------------------
# Records exposed to tests
# ----------------------------------------------------------------------------------------------------------


@dataclass
class InvalidRequest:
    """A request the fake rejected because the bot got something wrong (not an unimplemented route)."""

    method: str
    path: str  # request path below /api/v10, with query string
    operation: str | None  # e.g. "POST /webhooks/{webhook_id}/{webhook_token}"
    status: int
    body: Any
    errors: dict[str, Any]  # the Discord-shaped error object sent back
    problems: list[str]  # human-readable, one line per problem

    def describe(self) -> str:
        lines = "\n    ".join(self.problems)
        return f"{self.method} {self.path} -> {self.status}\n    {lines}"


@dataclass
class InvalidResponse:
    """A JSON answer of the fake that does not match Discord's documented response schema (a fake bug)."""

    operation: str
    status: int
    payload: Any
    problems: list[str]


@dataclass(frozen=True)
class UploadedFile:
    """A file the bot attached to a request (multipart part ``files[<index>]``)."""

    filename: str
    data: bytes
    content_type: str | None
    attachment_id: str  # id of the attachment in the created/edited message ("" if no message was created)
    message_id: str | None


@dataclass
class _IncomingRequest:
    method: str
    path: str
    params: dict[str, str]
    query: Mapping[str, str]
    body: Any
    files: list[tuple[int, str, bytes, str | None]]  # (index, filename, bytes, content type)
    operation: Operation


@dataclass
class _Interaction:
    id: str
    token: str
    type: int
    user_id: str
    payload: dict[str, Any]
    acknowledged: bool = False
    original_message_id: str | None = None  # the message @original refers to, once there is one
    message_ids: set[str] = field(default_factory=set)  # every message created/edited through this token


@dataclass
class _Gateway:
    ws: web.WebSocketResponse
    sequence: int = 0
    identified: bool = False
    shard: list[int] | None = None


class _Reject(Exception):
    """Raised by handlers to answer with a Discord error (and record it when it is the bot's fault)."""

    def __init__(
        self,
        status: int,
        message: str,
        code: int,
        errors: dict[str, Any] | None = None,
        problems: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.errors = status, message, code, errors
        self.problems = list(problems) or [f"{message} (code {code})"]


def _invalid_form_body(path: Sequence[str], code: str, message: str) -> _Reject:
    """A 50035 rejection with one Discord-shaped error at ``path``."""
    errors: dict[str, Any] = {}
    _insert_error(errors, path, {"code": code, "message": message})
    return _Reject(400, "Invalid Form Body", 50035, errors, [f"{'.'.join(path) or '<body>'}: {message}"])


def _unknown(what: str, code: int) -> _Reject:
    return _Reject(404, f"Unknown {what}", code)


def _json_response(payload: Any, status: int = 200) -> web.Response:
    """JSON answer built by hand (spec gotcha 1).

    aiohttp's json_response says ``application/json; charset=utf-8``; discord.http.json_or_text only parses
    the body when the header is exactly ``application/json``.
    """
    return web.Response(status=status, body=json.dumps(payload).encode(), headers={"Content-Type": JSON_CONTENT_TYPE})


def _now() -> str:
    return datetime.now(UTC).isoformat()


# ----------------------------------------------------------------------------------------------------------
# The fake
# ----------------------------------------------------------------------------------------------------------

_Handler = Callable[[_IncomingRequest], Awaitable[tuple[int, Any]]]


class FakeDiscord:
    """Loopback Discord for one bot: REST under ``/api/v10``, gateway at ``/gateway``, one guild, one channel.

    Typical use (pytest)::

        fake = FakeDiscord(); await fake.start(); fake.patch(monkeypatch)
        ... start the bot with bot.start("fake-token"), wait_until_ready, tree.sync() ...
        token = await fake.slash("call", ALICE)
        kind, body = await fake.next_response(token)
        fake.assert_no_invalid_requests(); await fake.stop()
    """

    def __init__(self, *, require_synced_commands: bool = True, validate_responses: bool = True) -> None:
        """``require_synced_commands``: :meth:`slash` and :meth:`autocomplete` refuse commands the bot never
        synced (real Discord only offers registered commands) and take option types from the synced payload.
        Turn it off only to test a bot that does not sync; option types are then guessed from Python values.
        ``validate_responses``: check the fake's own JSON answers against the documented response schemas.
        """
        self.require_synced_commands = require_synced_commands
        self.validate_responses = validate_responses
        self._ids = itertools.count(1_100_000_000_000_000_000)
        self.application_id: str = self._snowflake()
        self.bot_user_id: str = self._snowflake()
        self.guild_id: str = self._snowflake()
        self.channel_id: str = self._snowflake()
        self.owner_id: str = self._snowflake()
        self.bot_username = "FakeBot"
        #: Permissions the bot has in the channel, sent as ``app_permissions`` with every interaction.
        self.app_permissions = "0"

        #: Last synced command payload per scope ("global" or the guild id), exactly as the bot sent it.
        self.commands: dict[str, list[dict[str, Any]]] = {}
        #: Every message that exists in the fake, by id (bot messages and users' DMs).
        self.messages: dict[str, dict[str, Any]] = {}
        #: Bodies the bot POSTed to /channels/{id}/messages, per channel id (guild channel and DM channels).
        self.channel_messages: dict[str, list[dict[str, Any]]] = {}
        #: Bodies the bot PATCHed to /channels/{id}/messages/{message id} (its own messages), per channel id.
        self.channel_message_edits: dict[str, list[dict[str, Any]]] = {}
        #: Channel ids the bot showed "typing…" in (POST /channels/{id}/typing), in order.
        self.typing: list[str] = []
        #: Uploaded files, keyed by interaction token (files sent through that interaction) and by message id.
        self.files: dict[str, list[UploadedFile]] = {}
        #: Every ``(kind, body)`` the bot sent per interaction token (what :meth:`next_response` hands out).
        self.responses: dict[str, list[tuple[str, Any]]] = {}
        #: The INTERACTION_CREATE payload pushed for each token.
        self.interactions: dict[str, dict[str, Any]] = {}
        #: Modals the bot opened (callback type 9 ``data``), by modal custom_id.
        self.modals: dict[str, dict[str, Any]] = {}
        #: Requests rejected because the bot got something wrong; must stay empty in a passing test.
        self.invalid_requests: list[InvalidRequest] = []
        #: Requests for routes the fake does not implement (answered 404 -> discord.NotFound): "METHOD path".
        self.unimplemented_requests: list[str] = []
        #: Requests the fake crashed on (bugs of the fake; answered 400 so discord.py does not retry).
        self.internal_errors: list[str] = []
        #: JSON answers of the fake that do not match Discord's response schemas (bugs of the fake).
        self.invalid_responses: list[InvalidResponse] = []
        #: IDENTIFY payloads received over the gateway.
        self.identify_payloads: list[dict[str, Any]] = []
        #: Known users by id (created on first use).
        self.users: dict[str, dict[str, Any]] = {}
        #: Bot tokens Discord refuses (401), as after "Reset Token" in the Developer Portal.
        self.refused_tokens: set[str] = set()
        #: The application's Interactions Endpoint URL (set, Discord sends interactions there, not the gateway).
        self.interactions_endpoint_url: str | None = None

        self._interactions_by_id: dict[str, _Interaction] = {}
        self._interactions_by_token: dict[str, _Interaction] = {}
        self._queues: dict[str, asyncio.Queue[tuple[str, Any]]] = {}
        self._channel_queues: dict[str, asyncio.Queue[dict[str, Any]]] = {}
        self._dm_channels: dict[str, str] = {}  # user id -> DM channel id
        self._visible_to: dict[str, str] = {}  # ephemeral message id -> the only user who sees it
        self._modal_owner: dict[str, tuple[str, _Interaction]] = {}  # modal custom_id -> (user id, opener)
        self._gateways: list[_Gateway] = []
        self._ready: asyncio.Event | None = None
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._handlers: dict[str, _Handler] = {
            "GET /users/@me": self._get_me,
            "GET /oauth2/applications/@me": self._get_application,
            "GET /gateway/bot": self._get_gateway_bot,
            "PUT /applications/{application_id}/commands": self._put_commands,
            "PUT /applications/{application_id}/guilds/{guild_id}/commands": self._put_commands,
            "POST /interactions/{interaction_id}/{interaction_token}/callback": self._post_callback,
            "POST /webhooks/{webhook_id}/{webhook_token}": self._post_followup,
            "GET /webhooks/{webhook_id}/{webhook_token}/messages/@original": self._get_webhook_message,
            "GET /webhooks/{webhook_id}/{webhook_token}/messages/{message_id}": self._get_webhook_message,
            "PATCH /webhooks/{webhook_id}/{webhook_token}/messages/@original": self._patch_webhook_message,
            "PATCH /webhooks/{webhook_id}/{webhook_token}/messages/{message_id}": self._patch_webhook_message,
            "DELETE /webhooks/{webhook_id}/{webhook_token}/messages/@original": self._delete_webhook_message,
            "DELETE /webhooks/{webhook_id}/{webhook_token}/messages/{message_id}": (self._delete_webhook_message),
            "POST /channels/{channel_id}/messages": self._post_channel_message,
            "PATCH /channels/{channel_id}/messages/{message_id}": self._patch_channel_message,
            "POST /channels/{channel_id}/typing": self._post_typing,
            "POST /users/@me/channels": self._post_dm_channel,
        }
        # Routes called with the bot token; webhook and interaction-callback routes carry their own token.
        self._bot_auth_prefixes = ("/users/", "/oauth2/", "/gateway/", "/applications/", "/channels/")

    # ---------------------------------------------------------------------------------------------- lifecycle

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("FakeDiscord is not started")
        return self._port

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/api/v10`` (what ``discord.http.Route.BASE`` is patched to)."""
        return f"http://127.0.0.1:{self.port}{API_PREFIX}"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    @property
    def handled_routes(self) -> tuple[str, ...]:
        """The operations the fake implements, as ``"METHOD /template"`` (OpenAPI path templates)."""
        return tuple(self._handlers)

    async def start(self) -> None:
        """Bind to 127.0.0.1 on a free port and start serving. Loads the OpenAPI document once per process."""
        openapi()
        self._ready = asyncio.Event()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/gateway", self._gateway_handler)
        app.router.add_get("/attachments/{message_id}/{attachment_id}/{filename}", self._get_attachment)
        app.router.add_route("*", API_PREFIX + "/{tail:.*}", self._rest_handler)
        app.router.add_route("*", "/{tail:.*}", self._rest_handler)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server  # aiohttp has no public accessor for the bound port
        assert server is not None and server.sockets  # type: ignore[union-attr]
        self._port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        """Close gateway connections and shut the server down."""
        for gateway in self._gateways:
            if not gateway.ws.closed:
                await gateway.ws.close()
        self._gateways.clear()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def patch(self, monkeypatch: Any) -> None:
        """Point discord.py at the fake (REST base URL and the default gateway URL)."""
        monkeypatch.setattr(discord.http.Route, "BASE", self.base_url)
        monkeypatch.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY", yarl.URL(self.gateway_url))

    def assert_no_invalid_requests(self) -> None:
        """Fail with a readable listing if the bot sent anything Discord would have rejected.

        Also fails on :attr:`internal_errors`: a request the fake crashed on was not checked either.
        """
        problems = [r.describe() for r in self.invalid_requests]
        problems += [f"fake discord crashed: {e}" for e in self.internal_errors]
        if problems:
            listing = "\n".join(problems)
            raise AssertionError(f"{len(problems)} rejected or unchecked request(s):\n{listing}")

    # ----------------------------------------------------------------------------------------- ids & payloads

    def _snowflake(self) -> str:
        return str(next(self._ids))

    def user(self, user_id: int | str, username: str | None = None) -> dict[str, Any]:
        """The user object for ``user_id`` (created on first use; ``username`` renames it)."""
        key = str(user_id)
        data = self.users.get(key)
        if data is None:
            data = {
                "id": key,
                "username": username or f"user{key[-4:]}",
                "discriminator": "0",
                "avatar": None,
                "global_name": None,
                "public_flags": 0,
                "flags": 0,
                "primary_guild": None,
            }
            self.users[key] = data
        elif username is not None:
            data["username"] = username
        return data

    def bot_user(self) -> dict[str, Any]:
        data = self.user(self.bot_user_id, self.bot_username)
        data["bot"] = True
        return data

    def member(self, user_id: int | str, permissions: str | int = "0") -> dict[str, Any]:
        return {
            "user": dict(self.user(user_id)),
            "roles": [],
            "joined_at": _now(),
            "deaf": False,
            "mute": False,
            "flags": 0,
            "permissions": str(permissions),
        }

    def _channel_payload(self) -> dict[str, Any]:
        return {
            "id": self.channel_id,
            "type": 0,
            "guild_id": self.guild_id,
            "name": "general",
            "position": 0,
            "permission_overwrites": [],
        }

    def dm_channel_id(self, user_id: int | str) -> str:
        """The id of the DM channel between the bot and ``user_id`` (also the one the bot opens itself)."""
        key = str(user_id)
        if key not in self._dm_channels:
            self._dm_channels[key] = self._snowflake()
            self.user(key)
        return self._dm_channels[key]

    # ------------------------------------------------------------------------------------------------ gateway

    async def _gateway_handler(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        gateway = _Gateway(ws)
        self._gateways.append(gateway)
        await ws.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": 41250}}))
        async for message in ws:
            if message.type != WSMsgType.TEXT:
                continue
            frame = json.loads(message.data)
            op, data = frame.get("op"), frame.get("d")
            if op == 1:  # HEARTBEAT
                await ws.send_str(json.dumps({"op": 11}))
            elif op == 2:  # IDENTIFY
                await self._identify(gateway, data)
            elif op == 8:  # REQUEST_GUILD_MEMBERS: the fake guild has no members worth chunking
                chunk = {"guild_id": self.guild_id, "members": [], "chunk_index": 0, "chunk_count": 1}
                if data.get("nonce") is not None:
                    chunk["nonce"] = data["nonce"]
                await self._send_dispatch(gateway, "GUILD_MEMBERS_CHUNK", chunk)
            else:
                log.debug("fake gateway ignores op %s", op)
        if gateway in self._gateways:
            self._gateways.remove(gateway)
        return ws

    async def _identify(self, gateway: _Gateway, data: dict[str, Any]) -> None:
        self.identify_payloads.append(data)
        gateway.shard = data.get("shard")
        ready: dict[str, Any] = {
            "v": 10,
            "user": self.bot_user(),
            "guilds": [{"id": self.guild_id, "unavailable": True}],
            "session_id": "fake",
            "resume_gateway_url": self.gateway_url,
            "application": {"id": self.application_id, "flags": 0},
        }
        if gateway.shard is not None:
            ready["shard"] = gateway.shard  # AutoShardedConnectionState.parse_ready reads data["shard"][0]
        await self._send_dispatch(gateway, "READY", ready)
        if gateway.shard is None or gateway.shard[0] == 0:
            await self._send_dispatch(gateway, "GUILD_CREATE", self._guild_payload())
        gateway.identified = True
        assert self._ready is not None
        self._ready.set()

    def _guild_payload(self) -> dict[str, Any]:
        everyone = {
            "id": self.guild_id,
            "name": "@everyone",
            "permissions": "0",
            "position": 0,
            "color": 0,
            "hoist": False,
            "managed": False,
            "mentionable": False,
            "flags": 0,
        }
        return {
            "id": self.guild_id,
            "name": "Test Guild",
            "owner_id": self.owner_id,
            "features": [],
            "emojis": [],
            "stickers": [],
            "members": [self.member(self.bot_user_id)],  # real Discord always includes the bot's own member
            "threads": [],
            "voice_states": [],
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "roles": [everyone],
            "channels": [{k: v for k, v in self._channel_payload().items() if k != "guild_id"}],
            "member_count": 2,
            "unavailable": False,
            "large": False,
            "joined_at": _now(),
        }

    async def _send_dispatch(self, gateway: _Gateway, event: str, data: dict[str, Any]) -> None:
        gateway.sequence += 1
        await gateway.ws.send_str(json.dumps({"op": 0, "d": data, "s": gateway.sequence, "t": event}))

    async def wait_until_ready(self, timeout: float = 10.0) -> None:  # noqa: ASYNC109 - API of spec §1.5.4
        """Wait until READY and GUILD_CREATE were sent to a bot."""
        if self._ready is None:
            raise RuntimeError("FakeDiscord is not started")
        try:
            await asyncio.wait_for(self._ready.wait(), timeout)
        except TimeoutError:
            raise TimeoutError(f"no bot identified on the fake gateway within {timeout}s") from None

    async def dispatch(self, event: str, data: dict[str, Any], *, shard: int = 0) -> None:
        """Send any gateway DISPATCH event to the bot connection of `shard` (an unsharded bot is shard 0); for
        events without a helper. Discord routes a guild's events to the shard that guild belongs to."""
        await self.wait_until_ready()
        for gateway in self._gateways:
            number = 0 if gateway.shard is None else gateway.shard[0]
            if gateway.identified and not gateway.ws.closed and number == shard:
                await self._send_dispatch(gateway, event, data)
                return
        raise RuntimeError(f"no bot connected to the fake gateway runs shard {shard}")

    # ------------------------------------------------------------------------------------------ test-side API

    async def slash(
        self,
        name: str,
        user_id: int | str,
        options: Mapping[str, Any] | None = None,
        subcommand: str | None = None,
        permissions: str | int = "0",
        *,
        shard: int = 0,
    ) -> str:
        """Run ``/name [subcommand] options...`` as ``user_id``; returns the interaction token.

        ``subcommand`` is ``"sub"`` or ``"group sub"``. ``options`` maps option names to values (str, int,
        float, bool). ``permissions`` is the member's resolved permission bits (decimal string or int; Manage
        Server is ``"32"``); a command whose synced ``default_member_permissions`` the member lacks raises
        PermissionError, as Discord would not offer it.
        """
        command, scope = self._synced_command(name, user_id, permissions)
        data = self._command_data(name, command, scope, options or {}, subcommand, focused=None)
        return await self._push_interaction(APPLICATION_COMMAND, user_id, permissions, data, shard=shard)

    async def autocomplete(
        self,
        name: str,
        user_id: int | str,
        option: str,
        current: str,
        subcommand: str | None = None,
        *,
        options: Mapping[str, Any] | None = None,
        permissions: str | int = "0",
    ) -> str:
        """Type ``current`` into the autocomplete option ``option``; returns the token (expect callback 8).

        ``options`` are other option values already filled in.
        """
        command, scope = self._synced_command(name, user_id, permissions)
        data = self._command_data(name, command, scope, options or {}, subcommand, focused=(option, current))
        return await self._push_interaction(AUTOCOMPLETE, user_id, permissions, data)

    async def click(
        self,
        message: Mapping[str, Any] | str | int,
        custom_id: str,
        user_id: int | str,
        *,
        values: Sequence[str] | None = None,
        permissions: str | int = "0",
    ) -> str:
        """Click the button (or pick ``values`` in the string select) ``custom_id`` on a message of the fake.

        ``message`` is a message dict from :attr:`messages` (or its id). Raises LookupError if the message has
        no such enabled component and PermissionError if the message is ephemeral and ``user_id`` is not its
        recipient.
        """
        message_id = str(message if isinstance(message, str | int) else message["id"])
        stored = self.messages.get(message_id)
        if stored is None:
            raise LookupError(f"message {message_id} does not exist in the fake")
        owner = self._visible_to.get(message_id)
        if owner is not None and owner != str(user_id):
            raise PermissionError(f"message {message_id} is ephemeral: only user {owner} can see it")
        component = next((c for c in _walk_components(stored["components"]) if c.get("custom_id") == custom_id), None)
        if component is None:
            raise LookupError(f"message {message_id} has no component with custom_id {custom_id!r}")
        if component.get("disabled"):
            raise LookupError(f"component {custom_id!r} is disabled")
        data: dict[str, Any] = {"custom_id": custom_id, "component_type": component["type"]}
        if component["type"] == 3:
            data["values"] = list(values or [])
        elif component["type"] != 2:
            raise NotImplementedError(f"the fake only clicks buttons and string selects, not type {component['type']}")
        return await self._push_interaction(MESSAGE_COMPONENT, user_id, permissions, data, message=stored)

    async def submit_modal(
        self, custom_id: str, user_id: int | str, values: Mapping[str, str], *, permissions: str | int = "0"
    ) -> str:
        """Submit the modal ``custom_id`` (opened by the bot for ``user_id``) with ``{input_id: text}``."""
        if custom_id not in self._modal_owner:
            raise LookupError(f"the bot never opened a modal {custom_id!r}; opened: {sorted(self.modals)}")
        owner, opener = self._modal_owner[custom_id]
        if owner != str(user_id):
            raise PermissionError(f"modal {custom_id!r} was shown to user {owner}, not {user_id}")
        remaining = dict(values)
        rows = _modal_submit_rows(self.modals[custom_id]["components"], remaining)
        if remaining:
            raise LookupError(f"modal {custom_id!r} has no text inputs {sorted(remaining)}")
        data = {"custom_id": custom_id, "components": rows}
        message = None
        if opener.type == MESSAGE_COMPONENT:
            message = self.messages.get(str(opener.payload["message"]["id"]))
        return await self._push_interaction(MODAL_SUBMIT, user_id, permissions, data, message=message)

    async def send_dm(self, user_id: int | str, content: str) -> dict[str, Any]:
        """``user_id`` writes ``content`` to the bot in their DM channel (MESSAGE_CREATE); returns it.

        Discord delivers DM content to bots without the privileged message-content intent, so the content is
        always included. Read the bot's answer with :meth:`next_channel_message` on ``message["channel_id"]``.
        """
        channel_id = self.dm_channel_id(user_id)
        message = {
            "id": self._snowflake(),
            "channel_id": channel_id,
            "type": 0,
            "content": content,
            "author": dict(self.user(user_id)),
            "timestamp": _now(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "components": [],
            "pinned": False,
            "flags": 0,
        }
        self.messages[message["id"]] = message
        await self.dispatch("MESSAGE_CREATE", message)
        return message

    async def next_response(self, token: str, timeout: float = 5.0) -> tuple[str, Any]:  # noqa: ASYNC109
        """The next ``(kind, body)`` the bot sent for the interaction ``token``.

        ``kind`` is ``"callback"``, ``"followup"``, ``"edit"`` or ``"delete"`` (body ``None``); ``body`` is
        the JSON (the ``payload_json`` part for multipart requests; the files are in :attr:`files`). Rejected
        requests are not delivered here -- they are in :attr:`invalid_requests`.
        """
        if token not in self._queues:
            raise KeyError(f"unknown interaction token {token!r}")
        try:
            return await asyncio.wait_for(self._queues[token].get(), timeout)
        except TimeoutError:
            raise TimeoutError(self._silence_report(f"interaction {token}", timeout)) from None

    async def next_channel_message(
        self,
        channel_id: int | str,
        timeout: float = 5.0,  # noqa: ASYNC109 - same shape as next_response
    ) -> dict[str, Any]:
        """The next body the bot POSTed to ``/channels/{channel_id}/messages``."""
        queue = self._channel_queues.setdefault(str(channel_id), asyncio.Queue())
        try:
            return await asyncio.wait_for(queue.get(), timeout)
        except TimeoutError:
            raise TimeoutError(self._silence_report(f"channel {channel_id}", timeout)) from None

    def ephemeral_recipient(self, message_id: int | str) -> str | None:
        """The only user who sees an ephemeral message; None for a message everyone in its channel sees."""
        return self._visible_to.get(str(message_id))

    def _silence_report(self, what: str, timeout: float) -> str:
        text = f"the bot sent nothing for {what} within {timeout}s"
        if self.invalid_requests:
            text += "; rejected requests:\n" + "\n".join(r.describe() for r in self.invalid_requests)
        if self.unimplemented_requests:
            text += f"; unimplemented routes hit: {self.unimplemented_requests}"
        return text

    # ------------------------------------------------------------------------------------------- interactions

    def _synced_command(
        self, name: str, user_id: int | str, permissions: str | int
    ) -> tuple[dict[str, Any] | None, str | None]:
        """The synced chat-input command ``name`` (guild scope first) and its scope; enforces permissions."""
        for scope in (self.guild_id, "global"):
            for command in self.commands.get(scope, []):
                if command["name"] == name and command.get("type", 1) in (1, None):
                    self._check_command_permissions(command, user_id, permissions)
                    return command, scope
        if self.require_synced_commands:
            synced = {scope: [c["name"] for c in cmds] for scope, cmds in self.commands.items()}
            raise LookupError(f"/{name} was never synced (synced: {synced}); call bot.tree.sync() first")
        return None, None

    @staticmethod
    def _check_command_permissions(command: Mapping[str, Any], user_id: int | str, permissions: str | int) -> None:
        required = command.get("default_member_permissions")
        if required is None:
            return
        have, need = int(permissions), int(required)
        if have & ADMINISTRATOR:
            return
        if need == 0 or have & need != need:
            raise PermissionError(
                f"/{command['name']} needs permissions {need} (default_member_permissions); user {user_id} has {have}"
            )

    def _command_data(
        self,
        name: str,
        command: Mapping[str, Any] | None,
        scope: str | None,
        values: Mapping[str, Any],
        subcommand: str | None,
        focused: tuple[str, str] | None,
    ) -> dict[str, Any]:
        path = subcommand.split() if subcommand else []
        definitions = list(command.get("options") or []) if command else None
        wrappers: list[dict[str, Any]] = []
        for depth, part in enumerate(path):
            # Unsynced commands: "group sub" -> group (type 2) then subcommand (type 1).
            part_type = 2 if depth < len(path) - 1 else 1
            if definitions is not None:
                node = next((o for o in definitions if o["name"] == part and o["type"] in (1, 2)), None)
                if node is None:
                    raise LookupError(f"/{name} has no subcommand (group) {part!r}")
                part_type = node["type"]
                definitions = list(node.get("options") or [])
            wrappers.append({"name": part, "type": part_type})
        if definitions is not None and any(o["type"] in (1, 2) for o in definitions):
            raise LookupError(f"/{name} {subcommand or ''}".rstrip() + " needs a subcommand")

        leaf_options = [_option_payload(n, v, _find_option(definitions, n, name)) for n, v in values.items()]
        if focused is not None:
            option_name, text = focused
            definition = _find_option(definitions, option_name, name)
            if definition is not None and not definition.get("autocomplete"):
                raise LookupError(f"option {option_name!r} of /{name} has no autocomplete")
            option_type = definition["type"] if definition else 3
            leaf_options.append({"name": option_name, "type": option_type, "value": text, "focused": True})
        if definitions is not None:
            given = {o["name"] for o in leaf_options}
            missing = [o["name"] for o in definitions if o.get("required") and o["name"] not in given]
            if missing and focused is None:
                raise LookupError(f"/{name}: required options missing: {missing}")

        options: list[dict[str, Any]] = leaf_options
        for wrapper in reversed(wrappers):
            options = [{**wrapper, "options": options}]
        data: dict[str, Any] = {
            "id": command["id"] if command and "id" in command else self._snowflake(),
            "name": name,
            "type": 1,
            "options": options,
        }
        if scope not in (None, "global"):
            data["guild_id"] = scope  # discord.py looks guild commands up with data["guild_id"]
        return data

    async def _push_interaction(
        self,
        interaction_type: int,
        user_id: int | str,
        permissions: str | int,
        data: dict[str, Any],
        message: Mapping[str, Any] | None = None,
        *,
        shard: int = 0,
    ) -> str:
        interaction_id = self._snowflake()
        token = f"tok-{interaction_id}"
        payload: dict[str, Any] = {
            "id": interaction_id,
            "application_id": self.application_id,
            "token": token,
            "version": 1,
            "type": interaction_type,
            "guild_id": self.guild_id,
            "channel_id": self.channel_id,
            "channel": self._channel_payload(),
            "member": self.member(user_id, permissions),
            "locale": "en-US",
            "guild_locale": "en-US",
            "app_permissions": self.app_permissions,
            "entitlements": [],
            "context": 0,
            "authorizing_integration_owners": {"0": self.guild_id},
            "attachment_size_limit": 8 * 1024 * 1024,
            "data": data,
        }
        if message is not None:
            payload["message"] = copy.deepcopy(dict(message))
        interaction = _Interaction(interaction_id, token, interaction_type, str(user_id), payload)
        if message is not None:
            interaction.original_message_id = str(message["id"])  # @original of a component interaction
        self._interactions_by_id[interaction_id] = interaction
        self._interactions_by_token[token] = interaction
        self._queues[token] = asyncio.Queue()
        self.responses[token] = []
        self.interactions[token] = payload
        await self.dispatch("INTERACTION_CREATE", payload, shard=shard)
        return token

    def _record_response(self, interaction: _Interaction, kind: str, body: Any) -> None:
        self.responses[interaction.token].append((kind, body))
        self._queues[interaction.token].put_nowait((kind, body))

    # ------------------------------------------------------------------------------------------ HTTP plumbing

    async def _rest_handler(self, request: web.Request) -> web.StreamResponse:
        raw_path = request.path
        if not raw_path.startswith(API_PREFIX + "/"):
            return self._not_implemented(request.method, raw_path)
        path = raw_path[len(API_PREFIX) :]
        shown_path = path + (f"?{request.query_string}" if request.query_string else "")
        api = openapi()
        matched = api.match(request.method, path)
        if matched is None or matched[0].key not in self._handlers:
            return self._not_implemented(request.method, path)
        op, params = matched

        if path.startswith(self._bot_auth_prefixes) and not request.headers.get("Authorization", "").startswith("Bot "):
            return _json_response({"message": "401: Unauthorized", "code": 0}, 401)
        if request.headers.get("Authorization", "").removeprefix("Bot ") in self.refused_tokens:
            return _json_response({"message": "401: Unauthorized", "code": 0}, 401)

        body, files, problem = await self._read_body(request)
        incoming = _IncomingRequest(request.method, shown_path, params, request.query, body, files, op)
        if problem is not None:
            return self._reject(incoming, _Reject(400, "Invalid Form Body", 50035, {}, [problem]))
        errors, problems = self._validate_request(api, incoming, request.content_type)
        if problems:
            return self._reject(incoming, _Reject(400, "Invalid Form Body", 50035, errors, problems))
        try:
            status, payload = await self._handlers[op.key](incoming)
        except _Reject as rejection:
            return self._reject(incoming, rejection)
        except Exception as exc:
            # A bug in the fake. Answer 400, not 500: discord.py retries 5xx with growing sleeps, which would
            # turn the bug into a slow timeout. The error is recorded and fails assert_no_invalid_requests().
            log.exception("fake discord crashed on %s %s", incoming.method, incoming.path)
            self.internal_errors.append(f"{incoming.method} {incoming.path}: {exc!r}")
            return _json_response({"message": f"fake discord crashed: {exc!r}", "code": 0}, 400)
        if status == 204:
            return web.Response(status=204)
        if self.validate_responses:
            self._validate_response(api, op, status, payload)
        return _json_response(payload, status)

    def _not_implemented(self, method: str, path: str) -> web.Response:
        self.unimplemented_requests.append(f"{method} {path}")
        return _json_response({"message": f"fake discord: {method} {path} not implemented", "code": 0}, 404)

    def _reject(self, incoming: _IncomingRequest, rejection: _Reject) -> web.Response:
        payload: dict[str, Any] = {"message": rejection.message, "code": rejection.code}
        if rejection.errors is not None:
            payload["errors"] = rejection.errors
        self.invalid_requests.append(
            InvalidRequest(
                method=incoming.method,
                path=incoming.path,
                operation=incoming.operation.key,
                status=rejection.status,
                body=incoming.body,
                errors=rejection.errors or {},
                problems=rejection.problems,
            )
        )
        log.warning("fake discord rejected %s %s: %s", incoming.method, incoming.path, rejection.problems)
        return _json_response(payload, rejection.status)

    @staticmethod
    async def _read_body(
        request: web.Request,
    ) -> tuple[Any, list[tuple[int, str, bytes, str | None]], str | None]:
        """(JSON body or payload_json, uploaded files, problem); problem: the body is unreadable."""
        files: list[tuple[int, str, bytes, str | None]] = []
        if request.content_type == "multipart/form-data":
            body: Any = None
            reader = await request.multipart()
            async for part in reader:
                if not isinstance(part, BodyPartReader):
                    return None, files, "nested multipart is not supported by Discord"
                name = part.name or ""
                data = await part.read(decode=False)
                if name == "payload_json":
                    try:
                        body = json.loads(data)
                    except ValueError as exc:
                        return None, files, f"payload_json is not JSON: {exc}"
                elif (found := re.fullmatch(r"files\[(\d+)\]", name)) is not None:
                    content_type = part.headers.get("Content-Type")
                    files.append(
                        (
                            int(found.group(1)),
                            part.filename or f"file{found.group(1)}",
                            bytes(data),
                            content_type,
                        )
                    )
                else:
                    return None, files, f"unexpected multipart part {name!r}"
            return body, files, None
        raw = await request.read()
        if not raw:
            return None, files, None
        if request.content_type != JSON_CONTENT_TYPE:
            return None, files, f"unsupported Content-Type {request.content_type!r}"
        try:
            return json.loads(raw), files, None
        except ValueError as exc:
            return None, files, f"body is not JSON: {exc}"

    @staticmethod
    def _validate_request(
        api: OpenAPI, incoming: _IncomingRequest, content_type: str
    ) -> tuple[dict[str, Any], list[str]]:
        errors: dict[str, Any] = {}
        problems: list[str] = []
        op = incoming.operation
        for spec in api.parameters(op):
            if spec.location == "path":
                raw: str | None = incoming.params.get(spec.name)
            elif spec.location == "query":
                raw = incoming.query.get(spec.name)
            else:
                continue
            if raw is None:
                if spec.required:
                    _insert_error(
                        errors,
                        [spec.name],
                        {"code": "BASE_TYPE_REQUIRED", "message": "This field is required"},
                    )
                    problems.append(f"{spec.location} parameter {spec.name}: required")
                continue
            value: Any = raw
            try:
                if spec.schema_type == "boolean":
                    value = QUERY_BOOLEAN_LITERALS[raw.lower()]
                elif spec.schema_type == "integer":
                    value = int(raw)
                elif spec.schema_type == "number":
                    value = float(raw)
            except (KeyError, ValueError):
                item = {"code": "FAKE_SCHEMA_TYPE", "message": f"{raw!r} is not a valid {spec.schema_type}"}
                _insert_error(errors, [spec.name], item)
                problems.append(f"{spec.location} parameter {spec.name}: {item['message']}")
                continue
            shaped, lines = _collect_errors(api.validator(spec.schema_pointer).iter_errors(value), [spec.name])
            _merge_errors(errors, shaped)
            problems.extend(f"{spec.location} parameter {line}" for line in lines)

        body_pointer = api.request_body_pointer(op, content_type)
        if body_pointer is not None:
            if incoming.body is None:
                if api.request_body_required(op):
                    problems.append("<body>: a request body is required")
                    _insert_error(errors, [], {"code": "BASE_TYPE_REQUIRED", "message": "This field is required"})
            else:
                shaped, lines = _collect_errors(api.validator(body_pointer).iter_errors(incoming.body))
                _merge_errors(errors, shaped)
                problems.extend(lines)
        elif incoming.body is not None:
            problems.append("<body>: this operation takes no request body")
        return errors, problems

    def _validate_response(self, api: OpenAPI, op: Operation, status: int, payload: Any) -> None:
        pointer = api.response_pointer(op, status)
        if pointer is None:
            return
        _, problems = _collect_errors(api.validator(pointer).iter_errors(payload))
        if problems:
            self.invalid_responses.append(InvalidResponse(op.key, status, payload, problems))
            log.error("fake discord answered %s with an undocumented shape: %s", op.key, problems)

    async def _get_attachment(self, request: web.Request) -> web.StreamResponse:
        for uploaded in self.files.get(request.match_info["message_id"], []):
            if uploaded.attachment_id == request.match_info["attachment_id"]:
                return web.Response(
                    body=uploaded.data, content_type=uploaded.content_type or "application/octet-stream"
                )
        return web.Response(status=404)

    # ------------------------------------------------------------------------------------------ REST handlers

    async def _get_me(self, req: _IncomingRequest) -> tuple[int, Any]:
        return 200, {**self.bot_user(), "mfa_enabled": False, "locale": "en-US", "verified": True}

    async def _get_application(self, req: _IncomingRequest) -> tuple[int, Any]:
        owner = self.user(self.owner_id, "owner")
        return 200, {
            "id": self.application_id,
            "name": self.bot_username,
            "icon": None,
            "description": "",
            "type": None,
            "bot_public": True,
            "bot_require_code_grant": False,
            "verify_key": "0" * 64,
            "flags": 0,
            "flags_new": "0",
            "redirect_uris": [],
            "interactions_endpoint_url": self.interactions_endpoint_url,
            "role_connections_verification_url": None,
            "owner": owner,
            "approximate_guild_count": 1,
            "approximate_user_install_count": 0,
            "approximate_user_authorization_count": 0,
            "explicit_content_filter": 0,
            "team": None,
            "eligible_oauth2_scopes": [],
            "bot": self.bot_user(),
        }

    async def _get_gateway_bot(self, req: _IncomingRequest) -> tuple[int, Any]:
        limit = {"total": 1000, "remaining": 1000, "reset_after": 0, "max_concurrency": 1}
        return 200, {"url": self.gateway_url, "shards": 1, "session_start_limit": limit}

    async def _put_commands(self, req: _IncomingRequest) -> tuple[int, Any]:
        self._check_application(req.params["application_id"])
        guild_id = req.params.get("guild_id")
        if guild_id is not None and guild_id != self.guild_id:
            raise _unknown("Guild", 10004)
        scope = guild_id or "global"
        body: list[dict[str, Any]] = req.body or []
        previous = {c["name"]: c for c in self.commands.get(scope, [])}
        stored = []
        for command in body:
            # Keep ids stable across re-syncs of the same name, as Discord does.
            old = previous.get(command["name"])
            stored.append(
                {
                    **copy.deepcopy(command),
                    "id": old["id"] if old else self._snowflake(),
                    "application_id": self.application_id,
                    "version": self._snowflake(),
                    **({"guild_id": guild_id} if guild_id else {}),
                }
            )
        self.commands[scope] = stored
        return 200, [_command_response(c) for c in stored]

    async def _post_callback(self, req: _IncomingRequest) -> tuple[int, Any]:
        interaction = self._interactions_by_id.get(req.params["interaction_id"])
        if interaction is None or interaction.token != req.params["interaction_token"]:
            raise _unknown("interaction", 10062)
        if interaction.acknowledged:
            raise _Reject(400, "Interaction has already been acknowledged.", 40060)
        body: dict[str, Any] = req.body
        callback_type = body["type"]
        if callback_type not in _ALLOWED_CALLBACKS.get(interaction.type, frozenset()):
            reason = f"Callback type {callback_type} is invalid for interactions of type {interaction.type}"
            raise _invalid_form_body(["type"], "INTERACTION_CALLBACK_TYPE_INVALID", reason)
        interaction.acknowledged = True
        data = body.get("data") or {}
        summary: dict[str, Any] = {"id": interaction.id, "type": interaction.type}
        resource: dict[str, Any] | None = None

        if callback_type in (CHANNEL_MESSAGE, DEFERRED_CHANNEL_MESSAGE):
            if callback_type == DEFERRED_CHANNEL_MESSAGE:
                data = {"flags": (data.get("flags") or 0) & EPHEMERAL | LOADING}
            message = self._create_message(
                data, self.channel_id, req.files, interaction=interaction, token=interaction.token
            )
            interaction.original_message_id = message["id"]
            summary |= {
                "response_message_id": message["id"],
                "response_message_loading": callback_type == DEFERRED_CHANNEL_MESSAGE,
                "response_message_ephemeral": bool(message["flags"] & EPHEMERAL),
            }
            # The documented response has a resource (with the message) only for types 4, 7 and 12.
            if callback_type == CHANNEL_MESSAGE:
                resource = {"type": callback_type, "message": message}
        elif callback_type == UPDATE_MESSAGE:
            message = self._edit_message(interaction, interaction.original_message_id, data, req.files)
            summary |= {
                "response_message_id": message["id"],
                "response_message_loading": False,
                "response_message_ephemeral": bool(message["flags"] & EPHEMERAL),
            }
            resource = {"type": callback_type, "message": message}
        elif callback_type == MODAL:
            self.modals[data["custom_id"]] = copy.deepcopy(data)
            self._modal_owner[data["custom_id"]] = (interaction.user_id, interaction)
        # DEFERRED_UPDATE and AUTOCOMPLETE_RESULT change nothing the fake models.

        self._record_response(interaction, "callback", body)
        answer: dict[str, Any] = {"interaction": summary}
        if resource is not None:
            answer["resource"] = resource
        return 200, answer

    async def _post_followup(self, req: _IncomingRequest) -> tuple[int, Any]:
        interaction = self._webhook_interaction(req)
        if not interaction.acknowledged:
            raise _Reject(404, "Unknown Webhook", 10015, problems=["followup before the interaction was acknowledged"])
        body: dict[str, Any] = req.body or {}
        original = self.messages.get(interaction.original_message_id or "")
        if original is not None and original["flags"] & LOADING:
            # Discord: the first followup after a deferred response edits the loading message, and "the
            # ephemeral flag will be ignored, and the value you provided in the initial defer response will be
            # preserved".
            edit = {k: v for k, v in body.items() if k != "flags"}
            message = self._edit_message(interaction, original["id"], edit, req.files)
        else:
            message = self._create_message(
                body, self.channel_id, req.files, interaction=interaction, token=req.params["webhook_token"]
            )
        self._record_response(interaction, "followup", body)
        wait = QUERY_BOOLEAN_LITERALS.get(req.query.get("wait", "false").lower(), False)
        return (200, message) if wait else (204, None)

    async def _get_webhook_message(self, req: _IncomingRequest) -> tuple[int, Any]:
        interaction = self._webhook_interaction(req)
        return 200, self.messages[self._webhook_message_id(interaction, req)]

    async def _patch_webhook_message(self, req: _IncomingRequest) -> tuple[int, Any]:
        interaction = self._webhook_interaction(req)
        message_id = self._webhook_message_id(interaction, req)
        message = self._edit_message(interaction, message_id, req.body or {}, req.files)
        self._record_response(interaction, "edit", req.body)
        return 200, message

    async def _delete_webhook_message(self, req: _IncomingRequest) -> tuple[int, Any]:
        interaction = self._webhook_interaction(req)
        message_id = self._webhook_message_id(interaction, req)
        self.messages.pop(message_id, None)
        self._record_response(interaction, "delete", None)
        return 204, None

    async def _post_channel_message(self, req: _IncomingRequest) -> tuple[int, Any]:
        channel_id = req.params["channel_id"]
        if channel_id != self.channel_id and channel_id not in self._dm_channels.values():
            raise _unknown("Channel", 10003)
        body: dict[str, Any] = req.body or {}
        if not any(body.get(k) for k in ("content", "embeds", "components", "sticker_ids", "poll")) and not req.files:
            raise _Reject(400, "Cannot send an empty message", 50006)
        message = self._create_message(body, channel_id, req.files)
        self.channel_messages.setdefault(channel_id, []).append(body)
        self._channel_queues.setdefault(channel_id, asyncio.Queue()).put_nowait(body)
        return 200, message

    def _check_channel(self, channel_id: str) -> None:
        if channel_id != self.channel_id and channel_id not in self._dm_channels.values():
            raise _unknown("Channel", 10003)

    async def _patch_channel_message(self, req: _IncomingRequest) -> tuple[int, Any]:
        """Edit a message the bot sent in a channel (how it streams an answer into a DM). Discord lets a bot edit
        only its own messages (403, code 50005)."""
        channel_id, message_id = req.params["channel_id"], req.params["message_id"]
        self._check_channel(channel_id)
        message = self.messages.get(message_id)
        if message is None or message["channel_id"] != channel_id:
            raise _unknown("Message", 10008)
        if message["author"]["id"] != self.bot_user_id:
            raise _Reject(403, "Cannot edit a message authored by another user", 50005)
        edited = self._edit_message(None, message_id, req.body or {}, req.files)
        self.channel_message_edits.setdefault(channel_id, []).append(req.body or {})
        return 200, edited

    async def _post_typing(self, req: _IncomingRequest) -> tuple[int, Any]:
        """The "typing…" indicator: Discord answers 204 and shows it for about ten seconds."""
        channel_id = req.params["channel_id"]
        self._check_channel(channel_id)
        self.typing.append(channel_id)
        return 204, None

    async def _post_dm_channel(self, req: _IncomingRequest) -> tuple[int, Any]:
        recipient = (req.body or {}).get("recipient_id")
        if recipient is None:
            raise _invalid_form_body(["recipient_id"], "BASE_TYPE_REQUIRED", "This field is required")
        channel_id = self.dm_channel_id(recipient)
        return 200, {
            "id": channel_id,
            "type": 1,
            "flags": 0,
            "last_message_id": None,
            "recipients": [dict(self.user(recipient))],
        }

    # ----------------------------------------------------------------------------------------------- messages

    def _check_application(self, application_id: str) -> None:
        if application_id != self.application_id:
            raise _unknown("Application", 10002)

    def _webhook_interaction(self, req: _IncomingRequest) -> _Interaction:
        interaction = self._interactions_by_token.get(req.params["webhook_token"])
        if req.params["webhook_id"] != self.application_id or interaction is None:
            raise _unknown("Webhook", 10015)
        return interaction

    def _webhook_message_id(self, interaction: _Interaction, req: _IncomingRequest) -> str:
        message_id = req.params.get("message_id") or interaction.original_message_id
        if message_id is None or message_id not in self.messages:
            raise _unknown("Message", 10008)
        if message_id != interaction.original_message_id and message_id not in interaction.message_ids:
            raise _unknown("Message", 10008)
        return message_id

    def _attachments(
        self, message_id: str, files: Sequence[tuple[int, str, bytes, str | None]], token: str | None
    ) -> list[dict[str, Any]]:
        attachments = []
        for _index, filename, data, content_type in sorted(files):
            attachment_id = self._snowflake()
            uploaded = UploadedFile(filename, data, content_type, attachment_id, message_id)
            self.files.setdefault(message_id, []).append(uploaded)
            if token is not None:
                self.files.setdefault(token, []).append(uploaded)
            url = f"http://127.0.0.1:{self.port}/attachments/{message_id}/{attachment_id}/{filename}"
            attachment = {
                "id": attachment_id,
                "filename": filename,
                "size": len(data),
                "url": url,
                "proxy_url": url,
            }
            if content_type:
                attachment["content_type"] = content_type
            attachments.append(attachment)
        return attachments

    def _create_message(
        self,
        body: Mapping[str, Any],
        channel_id: str,
        files: Sequence[tuple[int, str, bytes, str | None]],
        *,
        interaction: _Interaction | None = None,
        token: str | None = None,
    ) -> dict[str, Any]:
        message_id = self._snowflake()
        message: dict[str, Any] = {
            "id": message_id,
            "channel_id": channel_id,
            "type": 20 if interaction is not None and interaction.type == APPLICATION_COMMAND else 0,
            "content": body.get("content") or "",
            "author": self.bot_user(),
            "timestamp": _now(),
            "edited_timestamp": None,
            "tts": bool(body.get("tts")),
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": self._attachments(message_id, files, token),
            "embeds": [_embed_response(e) for e in body.get("embeds") or []],
            "components": _components_response(body.get("components") or []),
            "pinned": False,
            "flags": body.get("flags") or 0,
        }
        if interaction is not None:
            message["webhook_id"] = self.application_id
            message["application_id"] = self.application_id
            interaction.message_ids.add(message_id)
            if message["flags"] & EPHEMERAL:
                self._visible_to[message_id] = interaction.user_id
        reference = body.get("message_reference")
        if reference and reference.get("message_id"):
            message["type"] = 19
            message["message_reference"] = {
                "type": 0,
                "channel_id": str(reference.get("channel_id") or channel_id),
                "message_id": str(reference["message_id"]),
            }
        self.messages[message_id] = message
        return message

    def _edit_message(
        self,
        interaction: _Interaction | None,
        message_id: str | None,
        body: Mapping[str, Any],
        files: Sequence[tuple[int, str, bytes, str | None]],
    ) -> dict[str, Any]:
        if message_id is None or message_id not in self.messages:
            raise _unknown("Message", 10008)
        message = self.messages[message_id]
        if "content" in body:
            message["content"] = body["content"] or ""
        if "embeds" in body:
            message["embeds"] = [_embed_response(e) for e in body["embeds"] or []]
        if "components" in body:
            message["components"] = _components_response(body["components"] or [])
        if "attachments" in body:
            # "attachments" lists the existing attachments to keep; new uploads come as files[n].
            keep = {str(a["id"]) for a in body["attachments"] or []}
            message["attachments"] = [a for a in message["attachments"] if a["id"] in keep]
        token = interaction.token if interaction is not None else None
        message["attachments"] += self._attachments(message_id, files, token)
        message["flags"] &= ~LOADING
        message["edited_timestamp"] = _now()
        if interaction is not None:
            interaction.message_ids.add(message_id)
        return message


# ----------------------------------------------------------------------------------------------------------
# Helpers for payload shapes
# ----------------------------------------------------------------------------------------------------------


def _merge_errors(into: dict[str, Any], other: Mapping[str, Any]) -> None:
    for key, value in other.items():
        if key == "_errors":
            into.setdefault("_errors", []).extend(value)
        else:
            _merge_errors(into.setdefault(key, {}), value)


def _walk_components(components: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    for component in components:
        yield component
        yield from _walk_components(component.get("components") or [])
        for key in ("component", "accessory"):
            if isinstance(component.get(key), Mapping):
                yield from _walk_components([component[key]])


def _components_response(components: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Request components as Discord echoes them: every component gets a numeric ``id`` (depth first)."""
    result = copy.deepcopy([dict(c) for c in components])
    used = {c["id"] for c in _walk_components(result) if isinstance(c.get("id"), int)}
    counter = itertools.count(1)

    def assign(items: Iterable[dict[str, Any]]) -> None:
        for item in items:
            if not isinstance(item.get("id"), int):
                item["id"] = next(n for n in counter if n not in used)
            for key in ("component", "accessory"):
                if isinstance(item.get(key), dict):
                    assign([item[key]])
            assign(item.get("components") or [])
            # Discord fills select defaults in what it returns.
            if item.get("type") in (3, 5, 6, 7, 8):
                item.setdefault("min_values", 1)
                item.setdefault("max_values", 1)
            if item.get("type") == 17:
                item.setdefault("accent_color", None)
                item.setdefault("spoiler", False)
            for key, value in list(item.items()):
                if value is None and key not in ("accent_color",):
                    del item[key]
            for holder in [item, *(o for o in item.get("options") or [] if isinstance(o, dict))]:
                if isinstance(holder.get("emoji"), dict):  # a Unicode emoji: discord.py sends "id": null
                    holder["emoji"] = {k: v for k, v in holder["emoji"].items() if v is not None}

    assign(result)
    return result


def _embed_response(embed: Mapping[str, Any]) -> dict[str, Any]:
    result = {k: v for k, v in embed.items() if v is not None}
    result.setdefault("type", "rich")
    return result


def _command_response(command: Mapping[str, Any]) -> dict[str, Any]:
    """A synced command as Discord returns it: permissions as a string, no nulls the response forbids."""
    result = {k: v for k, v in copy.deepcopy(dict(command)).items() if v is not None}
    permissions = command.get("default_member_permissions")
    result["default_member_permissions"] = None if permissions is None else str(permissions)
    result.setdefault("type", 1)
    result.setdefault("description", "")
    return result


def _find_option(definitions: list[dict[str, Any]] | None, name: str, command: str) -> dict[str, Any] | None:
    if definitions is None:
        return None
    for definition in definitions:
        if definition["name"] == name:
            return definition
    raise LookupError(f"/{command} has no option {name!r}; options: {[d['name'] for d in definitions]}")


_PYTHON_OPTION_TYPES: tuple[tuple[type, int], ...] = ((bool, 5), (int, 4), (float, 10), (str, 3))


def _option_payload(name: str, value: Any, definition: Mapping[str, Any] | None) -> dict[str, Any]:
    """One filled-in option; checks the value against the synced definition like the Discord client would."""
    if definition is None:
        option_type = next((t for py, t in _PYTHON_OPTION_TYPES if isinstance(value, py)), None)
        if option_type is None:
            raise TypeError(f"cannot guess the option type of {name}={value!r}")
        return {"name": name, "type": option_type, "value": value}
    option_type = definition["type"]
    expected: dict[int, tuple[type, ...]] = {3: (str,), 4: (int,), 5: (bool,), 10: (int, float)}
    if option_type not in expected:
        raise NotImplementedError(f"option {name!r} has type {option_type}; the fake only fills 3, 4, 5 and 10")
    if not isinstance(value, expected[option_type]) or (option_type in (4, 10) and isinstance(value, bool)):
        raise TypeError(f"option {name!r} (type {option_type}) cannot take {value!r}")
    choices = definition.get("choices")
    if choices and value not in [c["value"] for c in choices]:
        raise ValueError(f"option {name!r} only accepts {[c['value'] for c in choices]}, not {value!r}")
    for key, check in (
        ("min_length", lambda limit: len(value) >= limit),
        ("max_length", lambda limit: len(value) <= limit),
        ("min_value", lambda limit: value >= limit),
        ("max_value", lambda limit: value <= limit),
    ):
        if definition.get(key) is not None and not check(definition[key]):
            raise ValueError(f"option {name!r}={value!r} violates {key}={definition[key]}")
    return {"name": name, "type": option_type, "value": value}


def _modal_submit_rows(components: Sequence[Mapping[str, Any]], values: dict[str, str]) -> list[dict[str, Any]]:
    """What Discord sends back for a modal: its rows / labels with the typed values (display-only dropped).

    Consumes ``values``; what is left afterwards names inputs the modal does not have.
    """
    shown = _components_response(components)  # numbered like Discord numbers them

    def submitted(inner: Mapping[str, Any]) -> dict[str, Any]:
        if inner.get("type") != 4:
            raise NotImplementedError(f"the fake only submits text inputs, not component type {inner.get('type')}")
        custom_id = inner["custom_id"]
        if custom_id not in values and inner.get("required", True):
            raise LookupError(f"required text input {custom_id!r} needs a value")
        return {"type": 4, "id": inner["id"], "custom_id": custom_id, "value": values.pop(custom_id, "")}

    rows: list[dict[str, Any]] = []
    for component in shown:
        if component.get("type") == 1:
            rows.append(
                {
                    "type": 1,
                    "id": component["id"],
                    "components": [submitted(c) for c in component["components"]],
                }
            )
        elif component.get("type") == 18:
            rows.append({"type": 18, "id": component["id"], "component": submitted(component["component"])})
    return rows


__all__ = [
    "QUERY_BOOLEAN_LITERALS",
    "SCHEMA_ALLOWANCES",
    "FakeDiscord",
    "InvalidRequest",
    "InvalidResponse",
    "OpenAPI",
    "SchemaAllowance",
    "UploadedFile",
    "openapi",
]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m standins.discord_gateway``: serves the fake on a free port of 127.0.0.1 until SIGTERM or
    SIGINT and prints where (``fake-discord ready <REST base URL> <gateway URL>``), the two addresses discord.py is
    pointed at (``discord.http.Route.BASE`` and ``DiscordWebSocket.DEFAULT_GATEWAY``, see ``FakeDiscord.patch``)."""
    import argparse
    import signal

    argparse.ArgumentParser(prog="python -m standins.discord_gateway", description=main.__doc__).parse_args(argv)

    async def serve() -> None:
        fake = FakeDiscord()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await fake.start()
        try:
            print(f"fake-discord ready {fake.base_url} {fake.gateway_url}", flush=True)
            await stop.wait()
        finally:
            await fake.stop()

    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
