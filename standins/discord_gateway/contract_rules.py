"""Discord's rules that its OpenAPI schemas do not spell out as schema keywords, each from the specs: the 3-second
first answer, the locales a localization may name, and the length of an autocomplete suggestion's value.

* Spec ``discord-testing.md`` §4.3: "you **must send an initial response within 3 seconds** of receiving the event.
  If the 3 second deadline is exceeded, the token will be invalidated [...] A missed deadline gives `NotFound 10062
  Unknown interaction`." §5 lists the deadline once, for interactions of every type (2 command, 3 component, 4
  autocomplete, 5 modal submit): the fake holds all of them to it.
* ``discord-api-spec/openapi.json``: ``name_localizations`` and ``description_localizations`` are maps of at most 34
  entries, and ``AvailableLocalesEnum`` names Discord's 34 locales; a key that is not one of them is refused (the
  harshest reading of a map sized to the enum).
* Discord's developer documentation, Application Commands, "Application Command Naming"
  (docs.discord.com/developers/interactions/application-commands): "CHAT_INPUT command names and command option
  names must match the following regex ``^[-_'\\p{L}\\p{N}\\p{sc=Deva}\\p{sc=Thai}]{1,32}$`` with the unicode flag
  set. If there is a lowercase variant of any letters used, you must use those." Localized names follow the same
  restrictions ("values follow same restrictions as name"). The OpenAPI description has only the length.
* Spec ``discord-testing.md`` §2.2, Autocomplete: "at most 25 choices [...] values of at most 100 characters" (the
  OpenAPI schema allows 6000 for a string choice's value; the stricter documented limit is enforced).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from functools import cache
from typing import Any

import regex

from standins.discord_gateway.openapi import openapi

FIRST_ANSWER_SECONDS = 3.0
AUTOCOMPLETE_VALUE_CHARS = 100
LOCALIZED_FIELDS = ("name_localizations", "description_localizations")
CHAT_INPUT = 1
COMMAND_NAME = regex.compile(r"^[-_'\p{L}\p{N}\p{sc=Deva}\p{sc=Thai}]{1,32}$", regex.UNICODE)


@cache
def available_locales() -> frozenset[str]:
    """``AvailableLocalesEnum`` of Discord's OpenAPI description."""
    schema = openapi().document["components"]["schemas"]["AvailableLocalesEnum"]
    return frozenset(str(option["const"]) for option in schema["oneOf"])


Problem = tuple[list[str], str, str]
"""Where in the body, Discord's error code, and what is wrong."""


def command_problems(commands: Sequence[Mapping[str, Any]]) -> list[Problem]:
    """Each localization a synced command list names for a locale Discord does not have."""
    locales = available_locales()
    problems: list[Problem] = []
    for path, node in _localizable(commands, []):
        for field in LOCALIZED_FIELDS:
            for locale in node.get(field) or {}:
                if locale not in locales:
                    message = f"{locale!r} is not one of Discord's locales (AvailableLocalesEnum)"
                    problems.append(([*path, field, locale], "BASE_TYPE_CHOICES", message))
    for index, command in enumerate(commands):
        if isinstance(command, Mapping) and command.get("type", CHAT_INPUT) == CHAT_INPUT:
            problems.extend(_name_problems(command, [str(index)]))
    return problems


def name_problem(name: object) -> str | None:
    """Why Discord refuses ``name`` as a slash command's or an option's name, or None."""
    if not isinstance(name, str) or not COMMAND_NAME.match(name):
        return f"{name!r} does not match Discord's command name pattern"
    if any(character.lower() != character for character in name):
        return f"{name!r} has letters with a lowercase variant that are not lowercase"
    return None


def _name_problems(node: Mapping[str, Any], path: list[str]) -> Iterator[Problem]:
    """A slash command's or option's name and localized names that Discord refuses, and its options'."""
    if (why := name_problem(node.get("name"))) is not None:
        yield [*path, "name"], "APPLICATION_COMMAND_INVALID_NAME", why
    for locale, localized in (node.get("name_localizations") or {}).items():
        if (why := name_problem(localized)) is not None:
            yield [*path, "name_localizations", locale], "APPLICATION_COMMAND_INVALID_NAME", why
    for index, option in enumerate(node.get("options") or []):
        if isinstance(option, Mapping):
            yield from _name_problems(option, [*path, "options", str(index)])


def autocomplete_problems(data: Mapping[str, Any]) -> list[Problem]:
    """Each suggestion whose value is longer than Discord takes."""
    problems: list[Problem] = []
    for index, choice in enumerate(data.get("choices") or []):
        value = choice.get("value") if isinstance(choice, Mapping) else None
        if isinstance(value, str) and len(value) > AUTOCOMPLETE_VALUE_CHARS:
            message = f"a suggestion's value is at most {AUTOCOMPLETE_VALUE_CHARS} characters, not {len(value)}"
            problems.append((["data", "choices", str(index), "value"], "BASE_TYPE_BAD_LENGTH", message))
    return problems


def _localizable(nodes: Sequence[Mapping[str, Any]], path: list[str]) -> Iterator[tuple[list[str], Mapping[str, Any]]]:
    """Every command, option and choice, with its path in the body."""
    for index, node in enumerate(nodes):
        if not isinstance(node, Mapping):
            continue
        here = [*path, str(index)]
        yield here, node
        for child in ("options", "choices"):
            children = node.get(child)
            if isinstance(children, list):
                yield from _localizable(children, [*here, child])
