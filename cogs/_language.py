"""The `language` option of /call, /memory and /settings language: the languages calls can be held in
(`bot.calls.language`), each under its own name ("Español (Spanish)"), read the same in every Discord language."""

from __future__ import annotations

from discord import app_commands

from bot.calls.language import AUTOMATIC, LANGUAGES

AUTOMATIC_CHOICE = app_commands.Choice(
    name=app_commands.locale_str("Automatic (your Discord language)"), value=AUTOMATIC
)
"""A member's way back to their Discord language (the translator finds it as ``choice.auto``)."""
LANGUAGE_CHOICES = [app_commands.Choice(name=language.label, value=code) for code, language in LANGUAGES.items()]
MEMBER_LANGUAGE_CHOICES = [AUTOMATIC_CHOICE, *LANGUAGE_CHOICES]
assert len(MEMBER_LANGUAGE_CHOICES) <= 25, "Discord shows at most 25 choices"


def chosen(value: str) -> str | None:
    """The member's stored choice for an option value: None for **Automatic**."""
    return None if value == AUTOMATIC else value


def label(code: str) -> str:
    """How a language is named to members: "Español (Spanish)"."""
    return LANGUAGES[code].label
