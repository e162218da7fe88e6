"""A member's Discord language is kept only when it is one Discord documents (issue 38 item 6): the locale of an
interaction is stored for what reaches the member outside one, so a forged or broken value (5,000 characters, a
NUL) is not stored, and what reaches the member outside an interaction stays in the language they had."""

from __future__ import annotations

import pytest

from bot.calls.errors import NoActiveCall
from bot.memory.locales import DISCORD_LOCALES
from standins.harness import CallWorld


@pytest.mark.parametrize(
    "odd", ["x" * 5000, "de\x00", "DE", "de-DE"], ids=["5000-chars", "nul", "upper", "undocumented"]
)
async def test_a_locale_discord_does_not_document_is_not_stored(
    simcord_env, world: CallWorld, member, discord_locales, odd: str
) -> None:
    _, channel, alice = member
    await world.store.set_consent(alice.id, True, world.clock())
    discord_locales[alice.id] = "de"
    german = await alice.slash(channel, "hangup")
    assert german.response.content == "Du hast keinen laufenden Anruf. Starte einen mit `/anrufen`."
    user = await world.store.get_user(alice.id)
    assert user is not None and user.locale == "de"

    discord_locales[alice.id] = odd
    await alice.slash(channel, "hangup")
    user = await world.store.get_user(alice.id)
    assert user is not None and user.locale == "de", "the member's last documented language stays"
    assert [type(error.original) for error in simcord_env.errors] == [NoActiveCall, NoActiveCall]


def test_the_documented_locales_are_discords() -> None:
    """The list in the code is the one in Discord's published OpenAPI document (AvailableLocalesEnum)."""
    import json
    from pathlib import Path

    spec = json.loads((Path(__file__).parents[2] / "standins" / "discord_openapi.json").read_text())
    documented = {o["const"] for o in spec["components"]["schemas"]["AvailableLocalesEnum"]["oneOf"]}
    assert documented == DISCORD_LOCALES
