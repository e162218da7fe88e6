"""Each member's Discord locale (`bot.memory.locales`): kept in memory in front of the store, written only when it
changed, and only for members who chose to be remembered and have not paused."""

from __future__ import annotations

import pytest

from bot.memory.choices import MemberChoices
from bot.memory.locales import MemberLocales
from bot.store.models import UserRecord
from bot.store.repository import StorageFull
from bot.store.sqlite import SqliteStore

T0 = 1_780_000_000.0


class CountedStore:
    """The store, counting the locale writes that reach it."""

    def __init__(self, store: SqliteStore) -> None:
        self.store = store
        self.writes: list[tuple[int, str]] = []

    async def get_user(self, user_id: int) -> UserRecord | None:
        return await self.store.get_user(user_id)

    async def set_user_locale(self, user_id: int, locale: str) -> None:
        self.writes.append((user_id, locale))
        await self.store.set_user_locale(user_id, locale)


async def test_the_same_locale_again_writes_nothing_and_another_process_reads_it(sqlite_store: SqliteStore) -> None:
    await sqlite_store.set_consent(1, True, T0)
    counted = CountedStore(sqlite_store)
    locales = MemberLocales(counted)
    for _ in range(3):
        await locales.remember(1, "es-ES")
    await locales.remember(1, "de")
    assert counted.writes == [(1, "es-ES"), (1, "de")]

    after_a_restart = MemberLocales(counted)
    assert await after_a_restart.locale_of(1) == "de"
    assert await after_a_restart.locale_of(2) is None


async def test_only_a_remembered_member_who_has_not_paused_is_kept(sqlite_store: SqliteStore) -> None:
    await sqlite_store.set_consent(1, False, T0)  # without memory
    await sqlite_store.set_consent(2, True, T0)
    await sqlite_store.set_memory_enabled(2, False, T0)  # paused
    locales = MemberLocales(sqlite_store)
    for user_id in (1, 2, 3):  # 3 never chose: no row is created
        await locales.remember(user_id, "pt-BR")
        assert await locales.locale_of(user_id) == "pt-BR", "this process still knows it"
    assert [await sqlite_store.get_user(u) for u in (1, 2, 3)][2] is None
    assert [(await sqlite_store.get_user(u)).locale for u in (1, 2)] == [None, None]  # type: ignore[union-attr]


async def test_choosing_to_be_remembered_keeps_the_locale_known_before(sqlite_store: SqliteStore) -> None:
    locales = MemberLocales(sqlite_store)
    choices = MemberChoices(sqlite_store, locales=locales)
    await locales.remember(1, "es-419")
    await choices.choose(1, remember=True)
    assert (await sqlite_store.get_user(1)).locale == "es-419"  # type: ignore[union-attr]

    await locales.remember(2, "de")
    await sqlite_store.set_consent(2, True, T0)
    await choices.set_remembering(2, False)
    await choices.set_remembering(2, True)
    assert (await sqlite_store.get_user(2)).locale == "de"  # type: ignore[union-attr]


class FullOnce(CountedStore):
    """The store, full for the first locale write."""

    full = True

    async def set_user_locale(self, user_id: int, locale: str) -> None:
        if self.full:
            self.full = False
            raise StorageFull("disk full")
        await super().set_user_locale(user_id, locale)


async def test_a_locale_not_written_on_a_full_disk_is_written_at_the_next_interaction(
    sqlite_store: SqliteStore, caplog: pytest.LogCaptureFixture
) -> None:
    await sqlite_store.set_consent(1, True, T0)
    full_once = FullOnce(sqlite_store)
    locales = MemberLocales(full_once)
    await locales.remember(1, "es-ES")
    assert await locales.locale_of(1) == "es-ES"
    assert "storage is full" in caplog.text
    assert await MemberLocales(sqlite_store).locale_of(1) is None

    await locales.remember(1, "es-ES")
    assert full_once.writes == [(1, "es-ES")]
    assert await MemberLocales(sqlite_store).locale_of(1) == "es-ES"
    await locales.remember(1, "es-ES")
    assert full_once.writes == [(1, "es-ES")]
