"""The fake Discord's user installs (issue 40): what each place sends, what is offered there, what the app cannot
do there (standins/discord_gateway/places.py), with the throwaway bot of test_fake_discord."""

from __future__ import annotations

import discord
import pytest

from standins.discord_gateway import FakeDiscord
from standins.discord_gateway.places import EXTERNAL_APP_PERMISSIONS, NotOffered
from tests.standins import test_fake_discord as basics
from tests.standins.test_fake_discord import ALICE, BOB, ThrowawayBot

throwaway_bot = basics.bot
"""The throwaway bot on the fake, as test_fake_discord starts it (its fixture under this name)."""


async def test_each_place_sends_its_context_owners_and_app_permissions(
    throwaway_bot: ThrowawayBot, fake: FakeDiscord
) -> None:
    for command in fake.commands["global"]:  # as the app registers a command for both installs, everywhere
        command["integration_types"], command["contexts"] = [0, 1], [0, 1, 2]
    fake.install_for_user(ALICE)
    expected = {
        "server": (0, {"0": fake.guild_id, "1": str(ALICE)}, fake.guild_id),
        "server without the bot": (0, {"1": str(ALICE)}, fake.server_without_bot_id),
        "dm": (1, {"0": "0", "1": str(ALICE)}, None),
        "group dm": (2, {"1": str(ALICE)}, None),
    }
    for place, (context, owners, guild_id) in expected.items():
        token = await fake.slash("call", ALICE, place=place)
        payload = fake.interactions[token]
        assert (payload["context"], payload["authorizing_integration_owners"]) == (context, owners), place
        assert payload.get("guild_id") == guild_id and ("member" in payload) == (guild_id is not None), place
        await fake.next_response(token)
    assert fake.interactions[token]["channel"]["type"] == 3  # a group DM
    assert fake.interactions[token]["app_permissions"] == EXTERNAL_APP_PERMISSIONS


async def test_a_command_is_offered_only_where_an_install_reaches_and_its_contexts_allow(
    throwaway_bot: ThrowawayBot, fake: FakeDiscord
) -> None:
    [call] = [c for c in fake.commands["global"] if c["name"] == "call"]
    call["integration_types"], call["contexts"] = [0], [0, 1]
    with pytest.raises(NotOffered, match="no install reaches it"):
        await fake.slash("call", BOB, place="server without the bot")  # no user install
    fake.install_for_user(BOB, member_of_server=False)
    with pytest.raises(NotOffered, match="no install reaches it"):
        await fake.slash("call", BOB, place="server without the bot")  # a server-install command
    with pytest.raises(NotOffered, match="not a member of the server"):
        await fake.slash("call", BOB)
    call["integration_types"] = [0, 1]
    with pytest.raises(NotOffered, match="not offered in a group dm"):
        await fake.slash("call", BOB, place="group dm")
    token = await fake.slash("call", BOB, place="server without the bot")
    assert fake.interactions[token]["authorizing_integration_owners"] == {"1": str(BOB)}
    await fake.next_response(token)


async def test_the_app_cannot_post_where_it_is_no_member(throwaway_bot: ThrowawayBot, fake: FakeDiscord) -> None:
    for channel_id in (fake.server_without_bot_channel_id, fake.group_dm_id):
        with pytest.raises(discord.Forbidden) as refused:
            await throwaway_bot.http.send_message(
                int(channel_id), params=discord.http.handle_message_parameters(content="hi")
            )
        assert (refused.value.status, refused.value.code) == (403, 50001)
    assert [r.operation for r in fake.invalid_requests] == ["POST /channels/{channel_id}/messages"] * 2
    assert fake.channel_messages == {}
    fake.invalid_requests.clear()  # seen; keep the teardown check for anything else
