"""jsonschema's errors turned into Discord's: the 50035 ``errors`` object and one readable line per problem."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jsonschema.exceptions import ValidationError

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


def insert_error(errors: dict[str, Any], path: Sequence[str], item: Mapping[str, str]) -> None:
    node = errors
    for key in path:
        node = node.setdefault(key, {})
    node.setdefault("_errors", []).append(dict(item))


def collect_errors(errors: Iterable[ValidationError], prefix: Sequence[str] = ()) -> tuple[dict[str, Any], list[str]]:
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
            insert_error(shaped, full, item)
            where = ".".join(full) or "<body>"
            schema_at = "/".join(str(p) for p in leaf.absolute_schema_path)
            lines.append(f"{where}: {item['message']} [{item['code']}; schema path {schema_at}]")
    return shaped, lines


def merge_errors(into: dict[str, Any], other: Mapping[str, Any]) -> None:
    for key, value in other.items():
        if key == "_errors":
            into.setdefault("_errors", []).extend(value)
        else:
            merge_errors(into.setdefault(key, {}), value)
