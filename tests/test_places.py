"""Where a member used a command (bot.places), from what Discord sends with the interaction."""

from __future__ import annotations

import pytest

from bot.places import Place, Where, place_of, refused_place

SERVER = 42


@pytest.mark.parametrize(
    ("guild_id", "private_channel", "server_installed", "user_installed", "where"),
    [
        (SERVER, False, True, False, Where.SERVER),  # the server's install
        (SERVER, False, True, True, Where.SERVER),  # both: the server's settings apply
        (SERVER, False, False, True, Where.SERVER_WITHOUT_BOT),  # only the member's own install
        (SERVER, False, False, False, Where.SERVER),  # no owners sent: not a user install, so the server's
        (None, False, True, False, Where.BOT_DM),
        (None, False, False, True, Where.BOT_DM),
        (None, True, False, True, Where.PRIVATE_CHANNEL),
    ],
)
def test_where_a_command_was_used(
    guild_id: int | None, private_channel: bool, server_installed: bool, user_installed: bool, where: Where
) -> None:
    place = place_of(
        guild_id=guild_id,
        private_channel=private_channel,
        server_installed=server_installed,
        user_installed=user_installed,
    )
    assert place == Place(where, guild_id)


def test_only_a_server_that_added_the_bot_has_settings_and_shows_answers_to_others() -> None:
    added, without = Place(Where.SERVER, SERVER), Place(Where.SERVER_WITHOUT_BOT, SERVER)
    assert (added.settings_guild, without.settings_guild) == (SERVER, None)
    assert added.can_post and Place(Where.BOT_DM, None).can_post
    assert not without.can_post and not Place(Where.PRIVATE_CHANNEL, None).can_post


def test_with_user_installs_off_only_places_a_user_install_reaches_are_refused() -> None:
    for where in Where:
        place = Place(where, SERVER if where in (Where.SERVER, Where.SERVER_WITHOUT_BOT) else None)
        refused = where in (Where.SERVER_WITHOUT_BOT, Where.PRIVATE_CHANNEL)
        assert refused_place(place, user_installs_offered=False) is refused
        assert refused_place(place, user_installs_offered=True) is False
