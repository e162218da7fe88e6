"""Payload shapes as Discord echoes them (components numbered, embeds typed, synced commands) and as a Discord client
builds them (filled-in options checked against the synced definition, submitted modal rows)."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any


def walk_components(components: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    for component in components:
        yield component
        yield from walk_components(component.get("components") or [])
        for key in ("component", "accessory"):
            if isinstance(component.get(key), Mapping):
                yield from walk_components([component[key]])


def components_response(components: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Request components as Discord echoes them: every component gets a numeric ``id`` (depth first)."""
    result = copy.deepcopy([dict(c) for c in components])
    used = {c["id"] for c in walk_components(result) if isinstance(c.get("id"), int)}
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


def embed_response(embed: Mapping[str, Any]) -> dict[str, Any]:
    result = {k: v for k, v in embed.items() if v is not None}
    result.setdefault("type", "rich")
    return result


def command_response(command: Mapping[str, Any]) -> dict[str, Any]:
    """A synced command as Discord returns it: permissions as a string, no nulls the response forbids."""
    result = {k: v for k, v in copy.deepcopy(dict(command)).items() if v is not None}
    permissions = command.get("default_member_permissions")
    result["default_member_permissions"] = None if permissions is None else str(permissions)
    result.setdefault("type", 1)
    result.setdefault("description", "")
    return result


def find_option(definitions: list[dict[str, Any]] | None, name: str, command: str) -> dict[str, Any] | None:
    if definitions is None:
        return None
    for definition in definitions:
        if definition["name"] == name:
            return definition
    raise LookupError(f"/{command} has no option {name!r}; options: {[d['name'] for d in definitions]}")


_PYTHON_OPTION_TYPES: tuple[tuple[type, int], ...] = ((bool, 5), (int, 4), (float, 10), (str, 3))


def option_payload(name: str, value: Any, definition: Mapping[str, Any] | None) -> dict[str, Any]:
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


def modal_submit_rows(components: Sequence[Mapping[str, Any]], values: dict[str, str]) -> list[dict[str, Any]]:
    """What Discord sends back for a modal: its rows / labels with the typed values (display-only dropped).

    Consumes ``values``; what is left afterwards names inputs the modal does not have.
    """
    shown = components_response(components)  # numbered like Discord numbers them

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
