"""/settings as admins and members meet it (SimCord runs the real command tree; store and Agora emulator are real).

Permission model tested here, as on Discord:
- `default_permissions=Manage Server` on the group hides the commands from members, and Discord (SimCord)
  refuses to deliver them (SetupError, reason default-member-permissions);
- an admin can still grant the command to a role without Manage Server under Server Settings → Integrations
  (a command permission override, `guild.set_command_permissions`), which bypasses the default: then the
  bot's own run-time check refuses with the Manage Server message.
"""

from __future__ import annotations

import re

import discord
import pytest
from discord import app_commands
from simcord import SetupError

from bot.calls.errors import CallsDisabled, QuotaReached
from bot.calls.settings import GuildSettingsService, InvalidSetting
from bot.i18n import english
from bot.store.models import GuildSettings
from standins.harness import CallWorld

SETTINGS_COMMANDS = {
    "settings show",
    "settings calls",
    "settings persona",
    "settings greeting",
    "settings language",
    "settings max-minutes",
    "settings daily-calls",
    "settings retention",
}


async def test_settings_are_hidden_from_members_and_refused_by_discord(simcord_env, server) -> None:
    _, channel, carol, alice = server
    assert set(carol.available_commands(channel)) >= SETTINGS_COMMANDS
    assert not any(name.startswith("settings") for name in alice.available_commands(channel))
    assert "call" in alice.available_commands(channel)
    with pytest.raises(SetupError, match="default-member-permissions"):
        await alice.slash(channel, "settings calls", enabled=False)
    assert not any(name.startswith("settings") for name in alice.user.available_commands())  # not in DMs either


async def test_runtime_check_refuses_a_role_granted_the_command_without_manage_server(
    simcord_env, simcord_bot, world: CallWorld, server
) -> None:
    guild, channel, _, _ = server
    helpers = guild.create_role("Helpers", permissions=discord.Permissions.none())
    dave = guild.add_member(simcord_env.create_user("dave"), roles=[helpers])
    command = next(c for c in await simcord_bot.tree.fetch_commands() if c.name == "settings")
    guild.set_command_permissions(command, {helpers: True})  # Server Settings → Integrations → allow Helpers
    assert "settings calls" in dave.available_commands(channel)

    result = await dave.slash(channel, "settings calls", enabled=False)
    assert result.ephemeral and result.response.content == english()("errors.needs_manage_server")
    assert isinstance(simcord_env.errors[-1], app_commands.MissingPermissions)
    assert (await world.store.get_guild_settings(guild.id)).calls_enabled is True


async def test_show_defaults_and_todays_usage(simcord_env, world: CallWorld, server) -> None:
    _, channel, carol, _ = server
    result = await carol.slash(channel, "settings show")
    text = result.response.content
    assert result.ephemeral
    assert "**Voice calls:** on" in text
    assert "default (30 min)" in text and "default (20)" in text
    assert "default (kept until members delete them)" in text
    assert "**Persona:** default:" in text and "Good to hear from you" in text  # the default greeting
    assert "0 calls started here, 0 active now" in text


async def test_persona_and_greeting_apply_to_the_next_call(simcord_env, world: CallWorld, server) -> None:
    guild, channel, carol, alice = server
    persona = "You are Captain Byte, a cheerful pirate who loves retro computers."
    done = await carol.slash(channel, "settings persona", text=persona)
    assert done.ephemeral and "Captain Byte" in done.response.content and "next call" in done.response.content
    greeting = await carol.slash(channel, "settings greeting", text="Ahoy, matey!")
    assert "Ahoy, matey!" in greeting.response.content

    await world.store.set_consent(alice.id, True, 0.0)
    started = await world.calls.start(user_id=alice.id, guild_id=guild.id)
    agent = world.emu.agent_by_label("call_id", started.call_id)
    assert agent.system_messages[0]["content"] == persona
    assert agent.llm["greeting_message"] == "Ahoy, matey!"
    await world.calls.hang_up(alice.id)

    shown = await carol.slash(channel, "settings show")
    assert "Captain Byte" in shown.response.content and "Ahoy, matey!" in shown.response.content

    reset = await carol.slash(channel, "settings persona", reset=True)
    assert "default persona" in reset.response.content
    await carol.slash(channel, "settings greeting", reset=True)
    assert await world.store.get_guild_settings(guild.id) == GuildSettings(guild_id=guild.id)
    started = await world.calls.start(user_id=alice.id, guild_id=guild.id)
    agent = world.emu.agent_by_label("call_id", started.call_id)
    assert agent.system_messages[0]["content"] == world.settings.memory.persona
    assert agent.llm["greeting_message"] == world.settings.agora.greeting


async def test_persona_or_greeting_without_text_shows_the_current_one_and_changes_nothing(
    simcord_env, world: CallWorld, server
) -> None:
    guild, channel, carol, _ = server
    await carol.slash(channel, "settings persona", text="You are Captain Byte, a cheerful pirate.")
    before = await world.store.get_guild_settings(guild.id)

    persona = await carol.slash(channel, "settings persona")
    greeting = await carol.slash(channel, "settings greeting")

    assert persona.ephemeral and "uses a **custom persona**" in persona.response.content
    assert "Captain Byte" in persona.response.content and "`reset:True`" in persona.response.content
    assert "the bot's **default greeting**" in greeting.response.content
    assert world.settings.agora.greeting in greeting.response.content
    assert await world.store.get_guild_settings(guild.id) == before


async def test_counts_read_as_words(simcord_env, world: CallWorld, server) -> None:
    guild, channel, carol, alice = server
    one_minute = await carol.slash(channel, "settings max-minutes", minutes=1)
    one_call = await carol.slash(channel, "settings daily-calls", count=1)
    one_day = await carol.slash(channel, "settings retention", days=1)
    await world.store.set_consent(alice.id, True, 0.0)
    await world.calls.start(user_id=alice.id, guild_id=guild.id)
    await world.calls.hang_up(alice.id)
    shown = await carol.slash(channel, "settings show")
    refused = await alice.slash(channel, "call")

    assert "**1 minute**" in one_minute.response.content
    assert "**1 call per day**" in one_call.response.content
    assert "deleted 1 day after" in one_day.response.content
    assert "1 call started here" in shown.response.content and "deleted after 1 day" in shown.response.content
    assert "limit of 1 call in this server" in refused.response.content
    everything = "\n".join([one_minute.response.content, one_call.response.content, shown.response.content])
    assert not re.search(r"\b1 (minutes|calls|days)\b", everything + refused.response.content)
    assert isinstance(simcord_env.errors[-1].original, QuotaReached)


async def test_persona_longer_than_the_limit_is_refused_by_discord(simcord_env, server) -> None:
    _, channel, carol, _ = server
    with pytest.raises(SetupError, match="at most 1500 characters"):
        await carol.slash(channel, "settings persona", text="x" * 1501)


async def test_turning_calls_off_and_on(simcord_env, world: CallWorld, server) -> None:
    _, channel, carol, alice = server
    await world.store.set_consent(alice.id, True, 0.0)
    off = await carol.slash(channel, "settings calls", enabled=False)
    assert off.ephemeral and "**off**" in off.response.content

    refused = await alice.slash(channel, "call")
    assert "turned off in this server" in refused.response.content
    assert isinstance(simcord_env.errors[-1].original, CallsDisabled)
    assert "**Voice calls:** off" in (await carol.slash(channel, "settings show")).response.content

    on = await carol.slash(channel, "settings calls", enabled=True)
    assert "**on**" in on.response.content
    card = await alice.slash(channel, "call")
    assert "Your call is ready" in card.response.content


async def test_daily_calls_limit_applies_to_the_next_call(simcord_env, world: CallWorld, server) -> None:
    _, channel, carol, alice = server
    await world.store.set_consent(alice.id, True, 0.0)
    done = await carol.slash(channel, "settings daily-calls", count=1)
    assert "**1 call per day**" in done.response.content

    first = await alice.slash(channel, "call")
    assert "Your call is ready" in first.response.content
    shown = await carol.slash(channel, "settings show")
    assert "**Calls per member per day:** 1" in shown.response.content
    assert "1 call started here, 1 active now" in shown.response.content
    await alice.slash(channel, "hangup")

    second = await alice.slash(channel, "call")
    assert "today's limit of 1 call in" in second.response.content
    assert isinstance(simcord_env.errors[-1].original, QuotaReached)


async def test_max_minutes_applies_to_the_next_call(simcord_env, world: CallWorld, server) -> None:
    _, channel, carol, alice = server
    done = await carol.slash(channel, "settings max-minutes", minutes=5)
    assert "at most **5 minutes**" in done.response.content
    with pytest.raises(SetupError):
        await carol.slash(channel, "settings max-minutes", minutes=241)
    await world.store.set_consent(alice.id, True, 0.0)
    card = await alice.slash(channel, "call")
    assert "up to 5 minutes" in card.response.content
    assert (await world.store.open_call_for_user(alice.id)).max_minutes == 5
    assert "**Longest call:** 5 min" in (await carol.slash(channel, "settings show")).response.content


async def test_retention_is_stored_and_explains_that_facts_stay(simcord_env, world: CallWorld, server) -> None:
    guild, channel, carol, _ = server
    done = await carol.slash(channel, "settings retention", days=30)
    assert "deleted 30 days after" in done.response.content and "/forget" in done.response.content
    assert await world.store.retention_policies() == [(guild.id, 30)]
    assert "deleted after 30 days" in (await carol.slash(channel, "settings show")).response.content

    keep = await carol.slash(channel, "settings retention", days=0)
    assert "kept until members delete them" in keep.response.content
    assert (await world.store.get_guild_settings(guild.id)).retention_days == 0
    assert await world.store.retention_policies() == []  # 0 = no automatic purge


async def test_settings_are_per_server_and_deleted_when_the_bot_leaves(
    simcord_env, simcord_bot, world: CallWorld, server
) -> None:
    guild, channel, carol, _ = server
    other = simcord_env.create_guild("Other")
    other_channel = other.create_text_channel("general")
    other_admin = other.add_member(
        simcord_env.create_user("olga"),
        roles=[other.create_role("Admins", permissions=discord.Permissions(manage_guild=True))],
    )
    await carol.slash(channel, "settings daily-calls", count=3)
    await other_admin.slash(other_channel, "settings daily-calls", count=7)
    shown = await other_admin.slash(other_channel, "settings show")
    assert "**Calls per member per day:** 7" in shown.response.content

    await simcord_bot.get_guild(guild.id).leave()  # DELETE /users/@me/guilds/{id} → GUILD_DELETE → on_guild_remove
    await simcord_env.settle()
    assert simcord_bot.get_guild(guild.id) is None
    assert await world.store.get_guild_settings(guild.id) == GuildSettings(guild_id=guild.id)
    assert (await world.store.get_guild_settings(other.id)).calls_per_member_per_day == 7


async def test_settings_service_validates_ranges_for_any_caller(world: CallWorld) -> None:
    service = GuildSettingsService(world.store, world.settings, world.calls)
    with pytest.raises(InvalidSetting):
        await service.set_max_minutes(1, 0)
    with pytest.raises(InvalidSetting):
        await service.set_daily_calls(1, 501)
    with pytest.raises(InvalidSetting):
        await service.set_retention(1, -1)
    with pytest.raises(InvalidSetting):
        await service.set_max_minutes(1, True)  # type: ignore[arg-type]
    with pytest.raises(InvalidSetting):
        await service.set_persona(1, "y" * 1501)
    assert (await service.set_persona(1, "   ")).persona is None
    assert (await service.set_greeting(1, "  Hello!  ")).greeting == "Hello!"
    overview = await service.overview(1)
    assert overview.max_minutes == world.settings.calls.max_minutes and overview.usage.calls_today == 0
