"""Call languages on every store: the member's choice, the server's default and each call's language are kept."""

from __future__ import annotations

import dataclasses

from bot.store.repository import Store
from standins.factories import make_call

ALICE, BOB = 42, 43
GUILD = 7


async def test_a_members_choice_is_kept_read_by_the_start_check_and_dropped(store: Store) -> None:
    chosen = await store.set_user_language(ALICE, "de", 1.0)
    assert chosen.language == "de"
    assert chosen.consent is None, "choosing a language is not consenting to memory"
    await store.set_consent(ALICE, True, 2.0)
    assert (await store.get_user(ALICE)).language == "de", "consent keeps the choice"  # type: ignore[union-attr]
    await store.update_guild_settings(GUILD, 3.0, language="fr")
    check = await store.call_start_check(ALICE, GUILD, 0.0)
    assert check.user is not None and check.user.language == "de"
    assert check.guild.language == "fr"
    assert (await store.set_user_language(ALICE, None, 4.0)).language is None
    assert (await store.get_user(BOB)) is None


async def test_a_call_keeps_its_language_and_calls_default_to_english(store: Store) -> None:
    spanish = dataclasses.replace(make_call(ALICE, state="active"), language="es")
    english = make_call(BOB, state="active")
    await store.create_call(spanish)
    await store.create_call(english)
    assert (await store.get_call(spanish.call_id)).language == "es"  # type: ignore[union-attr]
    assert (await store.get_call(english.call_id)).language == "en"  # type: ignore[union-attr]
    await store.set_user_language(ALICE, "es", 1.0)
    export = await store.export_user(ALICE)
    assert export["settings"]["language"] == "es"
    if "note" not in export:  # encrypted: a member with no key of their own has no calls that can be read
        assert [c["language"] for c in export["calls"]] == ["es"]


async def test_forgetting_everything_drops_the_choice(store: Store) -> None:
    await store.set_user_language(ALICE, "es", 1.0)
    await store.forget_user(ALICE)
    assert await store.get_user(ALICE) is None
