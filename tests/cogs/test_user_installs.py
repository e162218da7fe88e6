"""Issue 40: members who add the bot to their own account (a user install) use it where no server added it.

On the loopback fake Discord, which sends each place's interactions as Discord documents them (``context``,
``authorizing_integration_owners``, ``app_permissions``: standins/discord_gateway/places.py), offers a command only
where an install of the member's reaches, and refuses a channel message where the app is no member (the ``bot``
fixture fails on any refused request)."""

from __future__ import annotations

from typing import Any

import discord
import pytest
from simcord import SetupError

from bot.app import Services
from bot.calls.errors import CallsDisabled, QuotaReached
from bot.client import COMMANDS_HASH_KEY, EXTENSIONS, MemoryBot, commands_hash
from bot.i18n import english
from standins.discord_gateway import (
    DEFERRED_CHANNEL_MESSAGE,
    DEFERRED_UPDATE,
    EPHEMERAL,
    UPDATE_MESSAGE,
    FakeDiscord,
)
from standins.discord_gateway.places import EXTERNAL_APP_PERMISSIONS, NotOffered
from standins.harness import CallWorld
from standins.llm_server import FakeLLM
from tests.cogs.conftest import SimBot, SimcordInstalls

ALICE = 7001
"""Only the user install: she is in no server that added the bot."""
BOB = 7002
"""A member of the server that added the bot, who also installed it to his own account."""
ADMIN = 7003
MANAGE_SERVER = "32"
WORDS = english()
PERSONAL = ("call", "chat", "forget", "hangup", "memory", "remember")


async def answers(fake: FakeDiscord, token: str, count: int = 1) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Discord's first answer to the interaction (its callback) and the bodies of the ``count`` answers after it
    (follow-ups and edits)."""
    kind, callback = await fake.next_response(token, timeout=20)
    assert kind == "callback", (kind, callback)
    return callback, [(await fake.next_response(token, timeout=20))[1] for _ in range(count)]


def seen_only_by(fake: FakeDiscord, token: str, user: int) -> None:
    shown = fake.messages_of(token)
    assert shown, "the bot showed nothing"
    for message in shown:
        assert message["flags"] & EPHEMERAL and fake.ephemeral_recipient(message["id"]) == str(user), message


async def test_the_synced_commands_carry_the_documented_installs_and_contexts(bot: SimBot, fake: FakeDiscord) -> None:
    synced = {c["name"]: c for c in fake.commands["global"]}
    for name in PERSONAL:
        assert synced[name]["integration_types"] == [0, 1], name  # GUILD_INSTALL, USER_INSTALL
        assert synced[name]["contexts"] == [0, 1, 2], name  # GUILD, BOT_DM, PRIVATE_CHANNEL
    settings = synced["settings"]
    assert (settings["integration_types"], settings["contexts"]) == ([0], [0])
    assert settings["default_member_permissions"] == 32 and settings["dm_permission"] is False


async def test_a_member_with_only_the_user_install_calls_from_the_apps_dm_and_a_server_without_the_bot(
    bot: SimBot, fake: FakeDiscord, world: CallWorld
) -> None:
    fake.install_for_user(ALICE, member_of_server=False)
    store = world.store

    # the app's DM: the first call asks the memory choice, then starts
    asked = await fake.slash("call", ALICE, place="dm")
    payload = fake.interactions[asked]
    assert (payload["context"], payload["authorizing_integration_owners"]) == (1, {"1": str(ALICE)})
    callback, [prompt] = await answers(fake, asked)
    assert callback["type"] == DEFERRED_CHANNEL_MESSAGE and callback["data"]["flags"] & EPHEMERAL
    assert prompt["content"] == WORDS("calls.consent")
    [shown] = fake.messages_of(asked)
    chosen = await fake.click(shown, f"consent:remember:call:{ALICE}", ALICE)
    callback, [card] = await answers(fake, chosen)
    assert callback["type"] == UPDATE_MESSAGE and "**Your call is ready.**" in card["content"]
    seen_only_by(fake, asked, ALICE)
    first = await store.open_call_for_user(ALICE)
    assert first is not None and first.guild_id is None
    world.emu.user_joined(first.agent_id)
    world.emu.script(first.agent_id, [("user", "My sister Ana lives in Porto."), ("assistant", "Porto, lovely!")])
    hung_up = await fake.click(fake.messages[shown["id"]], f"call:hangup:{first.call_id}:{ALICE}", ALICE)
    callback, [ended] = await answers(fake, hung_up)
    assert callback["type"] == DEFERRED_UPDATE and "**Call ended.**" in ended["content"]

    # a server that never added the bot: the call knows what she said in the DM
    there = await fake.slash("call", ALICE, place="server without the bot")
    payload = fake.interactions[there]
    assert payload["guild_id"] == fake.server_without_bot_id
    assert payload["authorizing_integration_owners"] == {"1": str(ALICE)}
    assert payload["app_permissions"] == EXTERNAL_APP_PERMISSIONS
    callback, [card] = await answers(fake, there)
    assert callback["data"]["flags"] & EPHEMERAL and "**Your call is ready.**" in card["content"]
    seen_only_by(fake, there, ALICE)
    second = await store.open_call_for_user(ALICE)
    assert second is not None and second.guild_id is None, "no server settings or limits of a server without the bot"
    agent = world.emu.agent(second.agent_id)
    assert "My sister Ana lives in Porto." in "\n".join(m["content"] for m in agent.system_messages)
    world.emu.user_joined(second.agent_id)
    world.emu.script(second.agent_id, [("user", "I'm visiting her in June."), ("assistant", "Have fun!")])
    hangup = await fake.slash("hangup", ALICE, place="server without the bot")
    _, [ended] = await answers(fake, hangup)
    assert "**Call ended.**" in ended["content"]
    seen_only_by(fake, hangup, ALICE)

    # the same memory wherever she looks
    for place in ("server without the bot", "dm", "group dm"):
        panel = await fake.slash("memory", ALICE, place=place)
        callback, [shown_panel] = await answers(fake, panel)
        assert callback["data"]["flags"] & EPHEMERAL, place
        [embed] = shown_panel["embeds"]
        assert WORDS("memory.conversations", count=2) in str(embed), (place, embed)
        seen_only_by(fake, panel, ALICE)
    for call in (first, second):
        stored = await store.get_call(call.call_id)
        assert stored is not None and stored.state == "ended" and stored.guild_id is None
    said = [t.content for t in await store.call_turns(second.call_id)]
    assert said[-2:] == ["I'm visiting her in June.", "Have fun!"]
    assert fake.channel_messages == {}, "nothing was posted to a channel"


async def test_memory_replies_in_a_group_dm_are_seen_by_the_member_alone(
    bot: SimBot, fake: FakeDiscord, world: CallWorld
) -> None:
    fake.install_for_user(ALICE, member_of_server=False)
    await world.store.set_consent(ALICE, True, 1_780_000_000.0)
    told = await fake.slash("remember", ALICE, {"text": "I sing in a choir"}, place="group dm")
    assert fake.interactions[told]["context"] == 2
    callback, [said] = await answers(fake, told)
    assert callback["data"]["flags"] & EPHEMERAL and "I sing in a choir" in said["content"]
    seen_only_by(fake, told, ALICE)
    panel = await fake.slash("memory", ALICE, place="group dm")
    _, [shown] = await answers(fake, panel)
    assert "I sing in a choir" in str(shown["embeds"])
    seen_only_by(fake, panel, ALICE)
    asked = await fake.slash("forget", ALICE, subcommand="everything", place="group dm")
    _, [question] = await answers(fake, asked)
    assert "**Forget everything?**" in question["content"]
    seen_only_by(fake, asked, ALICE)
    assert [f.text for f in await world.store.list_facts(ALICE)] == ["I sing in a choir"]


@pytest.mark.parametrize("place", ["server without the bot", "group dm"])
async def test_public_chat_where_the_bot_cannot_post_answers_the_member_alone_and_says_why(
    bot: SimBot, fake: FakeDiscord, world: CallWorld, fake_llm: FakeLLM, place: str
) -> None:
    fake.install_for_user(ALICE, member_of_server=False)
    fake_llm.queue_reply("Tides follow the moon.")
    token = await fake.slash("chat", ALICE, {"message": "Why are there tides?", "public": True}, place=place)
    callback, [answer] = await answers(fake, token)
    assert callback["type"] == DEFERRED_CHANNEL_MESSAGE and callback["data"]["flags"] & EPHEMERAL
    while answer.get("content") != "Tides follow the moon.":
        _, answer = await fake.next_response(token, timeout=20)
    kind, why = await fake.next_response(token, timeout=20)
    assert (kind, why["content"]) == ("followup", WORDS("chat.public_cannot_post"))
    seen_only_by(fake, token, ALICE)
    assert fake.channel_messages == {}
    assert await world.store.get_user(ALICE) is None, "a public answer remembers nothing"


async def test_public_chat_in_a_server_that_added_the_bot_still_posts_for_everyone(
    bot: SimBot, fake: FakeDiscord, fake_llm: FakeLLM
) -> None:
    fake.install_for_user(BOB)
    fake_llm.queue_reply("Hello, everyone.")
    token = await fake.slash("chat", BOB, {"message": "Say hi to all", "public": True})
    assert fake.interactions[token]["authorizing_integration_owners"] == {"0": fake.guild_id, "1": str(BOB)}
    callback, _ = await answers(fake, token)
    assert not callback.get("data", {}).get("flags", 0) & EPHEMERAL
    _, note = await fake.next_response(token, timeout=20)
    while note.get("content") != WORDS("chat.public_not_remembered"):
        _, note = await fake.next_response(token, timeout=20)
    answer, _note = fake.messages_of(token)
    assert answer["content"] == "Hello, everyone." and fake.ephemeral_recipient(answer["id"]) is None


async def test_calls_off_in_a_server_that_added_the_bot_hold_for_a_members_own_install(
    bot: SimBot, fake: FakeDiscord, world: CallWorld
) -> None:
    fake.install_for_user(BOB)
    await world.store.set_consent(BOB, True, 1_780_000_000.0)
    off = await fake.slash("settings", ADMIN, {"enabled": False}, "calls", MANAGE_SERVER)
    await answers(fake, off)

    token = await fake.slash("call", BOB)
    assert fake.interactions[token]["authorizing_integration_owners"] == {"0": fake.guild_id, "1": str(BOB)}
    _, [refused] = await answers(fake, token)
    assert refused["content"] == WORDS("errors.calls_disabled")
    assert await world.store.open_call_for_user(BOB) is None

    elsewhere = await fake.slash("call", BOB, place="server without the bot")
    _, [card] = await answers(fake, elsewhere)
    assert "**Your call is ready.**" in card["content"], "that server's settings apply in that server only"


async def test_settings_are_not_offered_to_a_user_install(bot: SimBot, fake: FakeDiscord, world: CallWorld) -> None:
    fake.install_for_user(ALICE, member_of_server=False)
    for place in ("server without the bot", "dm", "group dm"):
        with pytest.raises(NotOffered):
            await fake.slash("settings", ALICE, subcommand="show", permissions=MANAGE_SERVER, place=place)
    shown = await fake.slash("settings", ADMIN, subcommand="show", permissions=MANAGE_SERVER)
    _, [overview] = await answers(fake, shown)
    assert "**Bot settings for this server**" in overview["content"]


async def test_a_server_command_used_where_the_server_never_added_the_bot_changes_nothing(
    bot: SimBot, fake: FakeDiscord, world: CallWorld
) -> None:
    """Discord does not offer /settings there; a registration from before (integration types 0 and 1) would."""
    fake.install_for_user(ALICE, member_of_server=False)
    [registered] = [c for c in fake.commands["global"] if c["name"] == "settings"]
    registered["integration_types"] = [0, 1]
    token = await fake.slash(
        "settings", ALICE, {"enabled": False}, "calls", MANAGE_SERVER, place="server without the bot"
    )
    refused, [] = await answers(fake, token, 0)
    assert refused["data"]["content"] == WORDS("errors.server_without_bot") and refused["data"]["flags"] == EPHEMERAL
    assert (await world.store.get_guild_settings(int(fake.server_without_bot_id))).calls_enabled


@pytest.mark.call_world(discord={"user_installs": False})
async def test_with_user_installs_off_the_commands_are_for_servers_and_a_stale_registration_is_refused(
    bot: SimBot, fake: FakeDiscord, world: CallWorld
) -> None:
    synced = {c["name"]: c for c in fake.commands["global"]}
    for name in PERSONAL:
        assert (synced[name]["integration_types"], synced[name]["contexts"]) == ([0], [0, 1]), name
    fake.install_for_user(ALICE, member_of_server=False)
    with pytest.raises(NotOffered):
        await fake.slash("memory", ALICE, place="server without the bot")

    for command in fake.commands["global"]:  # as registered before the owner switched user installs off
        command["integration_types"], command["contexts"] = [0, 1], [0, 1, 2]
    token = await fake.slash("call", ALICE, place="server without the bot")
    callback, [] = await answers(fake, token, 0)
    assert callback["type"] == 4 and callback["data"]["flags"] == EPHEMERAL
    assert callback["data"]["content"] == WORDS("errors.user_installs_off")
    assert await world.store.open_call_for_user(ALICE) is None

    bob_token = await fake.slash("call", BOB, place="dm")
    _, [asked] = await answers(fake, bob_token)
    assert asked["content"] == WORDS("calls.consent"), "the server install still works in the app's DMs"


async def test_switching_user_installs_syncs_the_commands_again(
    bot: SimBot, fake: FakeDiscord, world: CallWorld
) -> None:
    """The sync hash covers integration types and contexts: a bot last run with user installs off syncs again."""
    off = world.settings.model_copy(
        update={"discord": world.settings.discord.model_copy(update={"user_installs": False})}
    )
    before = MemoryBot(Services(settings=off, store=world.store, memory=world.memory))
    await before.translate_commands()
    for extension in EXTENSIONS:
        await before.load_extension(extension)
    off_hash = await commands_hash(before.tree)
    assert off_hash != await commands_hash(bot.tree)
    await world.store.set_meta(COMMANDS_HASH_KEY, off_hash)
    fake.commands.clear()

    assert await bot.sync_if_changed()
    synced = {c["name"]: c for c in fake.commands["global"]}
    assert all(synced[name]["integration_types"] == [0, 1] for name in PERSONAL)
    assert not await bot.sync_if_changed()
    await before.close()


# ---- the same rules driven by SimCord (tests.cogs.conftest.SimcordInstalls) --------------------------------


async def test_simcord_a_members_own_install_where_the_server_never_added_the_bot(
    simcord_env, world: CallWorld, fake_llm: FakeLLM, user_installs: SimcordInstalls
) -> None:
    friends = simcord_env.create_guild("Friends")
    channel = friends.create_text_channel("general")
    admins = friends.create_role("Admins", permissions=discord.Permissions(manage_guild=True))
    alice = friends.add_member(simcord_env.create_user("alice"), roles=[admins])  # she runs that server
    user_installs.install_for(alice, member_of_server=False)
    user_installs.never_added(friends)

    assert "settings show" not in alice.available_commands(channel)
    with pytest.raises(SetupError, match="integration-types"):
        await alice.slash(channel, "settings show")

    prompt = await alice.slash(channel, "call")
    assert prompt.ephemeral and prompt.response.content == WORDS("calls.consent")
    card = await alice.click(prompt.response, label="Remember me")
    assert "**Your call is ready.**" in card.response.content
    call = await world.store.open_call_for_user(alice.id)
    assert call is not None and call.guild_id is None

    fake_llm.queue_reply("Hello there.")
    said = await alice.slash(channel, "chat", message="Say hi to everyone", public=True)
    assert said.ephemeral and said.response.content == "Hello there."
    assert said.followups[-1].ephemeral and said.followups[-1].content == WORDS("chat.public_cannot_post")
    assert channel.history() == [], "nothing anyone else sees"


@pytest.mark.call_world(calls={"calls_per_member_per_day": 1})
async def test_simcord_the_members_own_daily_limit_holds_wherever_no_server_added_the_bot(
    simcord_env, world: CallWorld, user_installs: SimcordInstalls
) -> None:
    friends = simcord_env.create_guild("Friends")
    channel = friends.create_text_channel("general")
    user = simcord_env.create_user("alice")
    alice = friends.add_member(user)
    user_installs.install_for(alice, member_of_server=False)
    user_installs.never_added(friends)
    await world.store.set_consent(alice.id, True, 0.0)

    first = await user.slash("call")  # in her DMs with the bot
    assert "**Your call is ready.**" in first.response.content
    await user.slash("hangup")
    again = await alice.slash(channel, "call")
    assert again.ephemeral and "today's limit of 1 call" in again.response.content
    assert isinstance(simcord_env.errors[-1].original, QuotaReached)
    assert await world.store.open_call_for_user(alice.id) is None


async def test_simcord_a_server_that_added_the_bot_keeps_calls_off_for_a_members_own_install(
    simcord_env, world: CallWorld, member, user_installs: SimcordInstalls
) -> None:
    guild, channel, alice = member
    user_installs.install_for(alice)
    await world.store.set_consent(alice.id, True, 0.0)
    await world.store.update_guild_settings(guild.id, 0.0, calls_enabled=False)
    refused = await alice.slash(channel, "call")
    assert refused.ephemeral and refused.response.content == WORDS("errors.calls_disabled")
    assert isinstance(simcord_env.errors[-1].original, CallsDisabled)
