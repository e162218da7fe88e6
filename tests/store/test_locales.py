"""A member's Discord locale on every store (`AccountStore.set_user_locale`): kept only on the row of a member who
chose to be remembered and has not paused, exported with their settings, and dropped with everything."""

from __future__ import annotations

from bot.store.repository import Store

ALICE, BOB, CAROL = 42, 43, 44


async def test_a_remembered_members_locale_is_kept_exported_and_forgotten(store: Store) -> None:
    await store.set_consent(ALICE, True, 1.0)
    await store.set_user_locale(ALICE, "es-ES")
    await store.set_user_locale(ALICE, "es-ES")
    assert (await store.get_user(ALICE)).locale == "es-ES"  # type: ignore[union-attr]
    assert (await store.export_user(ALICE))["settings"]["discord_locale"] == "es-ES"
    await store.set_user_locale(ALICE, "de")
    assert (await store.get_user(ALICE)).locale == "de"  # type: ignore[union-attr]

    await store.forget_user(ALICE)
    assert await store.get_user(ALICE) is None


async def test_no_locale_is_kept_without_memory_paused_or_without_a_row(store: Store) -> None:
    await store.set_consent(ALICE, False, 1.0)
    await store.set_consent(BOB, True, 1.0)
    await store.set_memory_enabled(BOB, False, 2.0)
    for user_id in (ALICE, BOB, CAROL):
        await store.set_user_locale(user_id, "pt-BR")
    assert [(await store.get_user(u)).locale for u in (ALICE, BOB)] == [None, None]  # type: ignore[union-attr]
    assert await store.get_user(CAROL) is None
