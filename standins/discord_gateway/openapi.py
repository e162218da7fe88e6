"""Discord's OpenAPI 3.1 description (``standins/discord_openapi.json``): loaded once per process, widened by the
documented :data:`SCHEMA_ALLOWANCES`, matched against request paths, with validators built lazily and cached."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from jsonschema import Draft202012Validator, FormatChecker
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from standins.discord_gateway.protocol import JSON_CONTENT_TYPE

OPENAPI_FILE = Path(__file__).parent.parent / "discord_openapi.json"
_DOC_URI = "urn:fake-discord:openapi"
_ORIGINALS_KEY = "x-fake-discord-originals"


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
