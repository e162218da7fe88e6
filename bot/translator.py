"""The Discord side of the bot's words (``bot.i18n``): the command tree's translator, so command names,
descriptions and options show in each member's Discord language, and the words for an interaction (its locale,
which Discord sends with every one) or for a direct message (the member's last known locale, else English).

The translator finds each string's key from where it sits in the tree, so the cogs declare their commands once,
in English: ``command.<command path>.name`` / ``.description``, ``command.<command path>.option.<option>.name`` /
``.description`` and ``choice.<value>``. English itself is the commands' own text (the translator answers None)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

import discord
from discord import app_commands
from discord.app_commands import TranslationContextLocation as Where

from bot.i18n import ENGLISH_TAG, Words, language_of, words_for

LAST_LOCALES_KEPT = 50_000
"""Members whose last locale a bot remembers for direct messages (a DM carries no locale); the oldest are dropped
first, and after a restart a member's DMs are in English until their next interaction."""

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


class LastLocales:
    """Each member's Discord locale as of their last interaction with this bot, for what reaches them outside one
    (a direct message, a call card edited after a restart of the interaction's process)."""

    def __init__(self, kept: int = LAST_LOCALES_KEPT):
        self.kept = kept
        self._locales: OrderedDict[int, str] = OrderedDict()

    def remember(self, interaction: discord.Interaction) -> None:
        user_id = interaction.user.id
        self._locales[user_id] = interaction.locale.value
        self._locales.move_to_end(user_id)
        while len(self._locales) > self.kept:
            self._locales.popitem(last=False)

    def words_for(self, user_id: int) -> Words:
        """The member's last known language, else English."""
        return words_for(self._locales.get(user_id))
