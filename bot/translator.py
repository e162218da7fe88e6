"""The Discord side of the bot's words (``bot.i18n``): the command tree's translator, so command names,
descriptions and options show in each member's Discord language, and the words for an interaction (its locale,
which Discord sends with every one); outside one, `bot.client.MemoryBot.words_for_member`.

The translator finds each string's key from where it sits in the tree, so the cogs declare their commands once,
in English: ``command.<command path>.name`` / ``.description``, ``command.<command path>.option.<option>.name`` /
``.description`` and ``choice.<value>``. English itself is the commands' own text (the translator answers None)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import discord
from discord import app_commands
from discord.app_commands import TranslationContextLocation as Where

from bot.i18n import ENGLISH_TAG, Words, language_of, words_for

Decorated = TypeVar("Decorated")


def options(**descriptions: str) -> Callable[[Decorated], Decorated]:
    """``app_commands.describe`` for a command's options, their names and descriptions marked for the translator
    (discord.py translates an option only when given as ``locale_str``)."""

    def decorate(command: Decorated) -> Decorated:
        renamed = app_commands.rename(**{name: app_commands.locale_str(name) for name in descriptions})(command)
        marked = {name: app_commands.locale_str(text) for name, text in descriptions.items()}
        return app_commands.describe(**marked)(renamed)

    return decorate


def command_key(context: app_commands.TranslationContextTypes) -> str | None:
    """The catalogue key of a command string, from where it sits in the command tree."""
    where, data = context.location, context.data
    part = "name" if where in (Where.command_name, Where.group_name, Where.parameter_name) else "description"
    if isinstance(data, app_commands.Command | app_commands.Group | app_commands.ContextMenu):
        return f"command.{_path(data)}.{part}"
    if isinstance(data, app_commands.Parameter):
        return f"command.{_path(data.command)}.option.{data.name}.{part}"
    if isinstance(data, app_commands.Choice):
        return f"choice.{data.value}"
    return None


def _path(command: app_commands.Command[Any, Any, Any] | app_commands.Group | app_commands.ContextMenu) -> str:
    return ".".join(command.qualified_name.split())


class CatalogueTranslator(app_commands.Translator):
    """Command names, descriptions and options from the message catalogues, for every Discord locale that has
    one; None (Discord shows the English default) for English and for locales without a catalogue."""

    async def translate(
        self, string: app_commands.locale_str, locale: discord.Locale, context: app_commands.TranslationContextTypes
    ) -> str | None:
        tag = language_of(locale.value)
        key = command_key(context)
        if tag == ENGLISH_TAG or key is None:
            return None
        return words_for(tag).catalogue.texts.get(key)


def words_of(interaction: discord.Interaction) -> Words:
    """The words for whoever caused ``interaction``: their Discord language."""
    return words_for(interaction.locale.value)
