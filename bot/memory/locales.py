"""Each member's Discord language for what reaches them outside an interaction: a direct message carries no locale,
and a call card edited after a restart, or by another bot process sharing the store, has no interaction to read one
from. The locale of the member's last interaction is kept in memory in front of the store (``users.locale``), so an
interaction in the same language writes nothing, and what this process does not know is read from the store.

Who is kept in the store: only members who chose to be remembered and have not paused (`bot.store.models.remembers`
without a conversation). A locale is not memory content, but it is something about the member kept beyond the
moment; "don't remember me" and a pause mean nothing about them is written, so for them the locale stays in this
process's memory only (English after a restart until their next interaction), as it did before it was stored. It is
on the member's row: the export shows it and ``/forget everything`` drops it."""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Protocol

from bot.store.models import UserRecord
from bot.store.repository import StorageFull

log = logging.getLogger(__name__)

DISCORD_LOCALES = frozenset(
    {
        "ar", "bg", "cs", "da", "de", "el", "en-GB", "en-US", "es-419", "es-ES", "fi", "fr", "he", "hi", "hr", "hu",
        "id", "it", "ja", "ko", "lt", "nl", "no", "pl", "pt-BR", "ro", "ru", "sv-SE", "th", "tr", "uk", "vi",
        "zh-CN", "zh-TW",
    }
)  # fmt: skip
"""The locales Discord documents (its OpenAPI document's ``AvailableLocalesEnum``): an interaction's locale is
kept only when it is one of them, so nothing else (a forged value of any length, a NUL) is stored or used."""
LAST_LOCALES_KEPT = 50_000
"""Members whose locale a process keeps in memory; the oldest are dropped first (and read from the store again)."""


class LocaleStore(Protocol):
    """The member's row, where a remembered member's locale is kept."""

    async def get_user(self, user_id: int) -> UserRecord | None: ...
    async def set_user_locale(self, user_id: int, locale: str) -> None: ...


class MemberLocales:
    def __init__(self, store: LocaleStore, *, kept: int = LAST_LOCALES_KEPT) -> None:
        self.store = store
        self.kept = kept
        self._known: OrderedDict[int, str] = OrderedDict()
        self._unsaved: set[int] = set()
        """Members whose locale could not be written (the storage was full): the next interaction writes it."""

    async def remember(self, user_id: int, locale: str) -> None:
        """The locale of the member's latest interaction; written to the store only when it changed here. One
        Discord does not document is not kept: the member keeps the language known before."""
        if locale not in DISCORD_LOCALES:
            return
        unchanged = self._known.get(user_id) == locale and user_id not in self._unsaved
        self._keep(user_id, locale)
        if unchanged:
            return
        try:
            await self.store.set_user_locale(user_id, locale)
        except StorageFull:
            log.warning("a member's Discord language is kept in memory only: the bot's storage is full")
            self._unsaved.add(user_id)
        else:
            self._unsaved.discard(user_id)

    async def now_remembered(self, user_id: int) -> None:
        """The member just chose to be remembered (or resumed): the locale known here is kept from now on."""
        locale = self._known.get(user_id)
        if locale is not None:
            await self.store.set_user_locale(user_id, locale)

    async def locale_of(self, user_id: int) -> str | None:
        """The member's last known Discord locale: this process's, else the store's; None when neither knows.
        A locale read from the store is kept here too; a member known nowhere is asked of the store each time, so
        a locale another process records later is found."""
        locale = self._known.get(user_id)
        if locale is None:
            user = await self.store.get_user(user_id)
            locale = None if user is None or user.locale not in DISCORD_LOCALES else user.locale
        if locale is not None:
            self._keep(user_id, locale)
        return locale

    def _keep(self, user_id: int, locale: str) -> None:
        self._known[user_id] = locale
        self._known.move_to_end(user_id)
        while len(self._known) > self.kept:
            self._known.popitem(last=False)
