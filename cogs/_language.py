"""The `language` option of /call, /memory and /settings language: the languages calls can be held in
(`bot.calls.language`), each under its own name ("Español (Spanish)"), read the same in every Discord language."""

from __future__ import annotations

from discord import app_commands

from bot.calls.language import AUTOMATIC, LANGUAGES
from bot.i18n import Words

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


def label(code: str, words: Words) -> str:
    """How a language is named to a member: its own name, then its name in the member's language (Babel's), as in
    "Español (Spanish)", "Español (Spanisch)", or "Español" alone to a Spanish speaker. A code the table no longer
    has (stored by another version of the bot) is shown as it is."""
    language = LANGUAGES.get(code)
    if language is None:
        return code
    theirs = words.locale.languages.get(code, language.name)
    return language.native if theirs.casefold() == language.native.casefold() else f"{language.native} ({theirs})"


def in_text(code: str, words: Words) -> str:
    """How a language is named inside a member's sentence: the member's word for it, cased as their language writes
    it there ("en español", "auf Spanisch", "in Spanish"), then its own name when that differs ("en japonés
    (日本語)"). ``label`` names it as a menu entry or a heading does."""
    language = LANGUAGES.get(code)
    if language is None:
        return code
    theirs = words.locale.languages.get(code, language.name)
    return theirs if theirs.casefold() == language.native.casefold() else f"{theirs} ({language.native})"
