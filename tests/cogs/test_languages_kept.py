"""A member's Discord language outlives the bot process: kept in the store for members who chose to be remembered,
so a direct message after a restart (which carries no locale) is answered in their language; it is in their export
and goes with ``/forget everything``."""

from __future__ import annotations

import json

from bot.app import Services
from bot.i18n import words_for
from standins.harness import CallWorld
from tests.cogs.test_buttons_survive_restart import restart


async def test_a_spanish_member_is_answered_in_spanish_after_a_restart_until_they_forget_everything(
    simcord_env, world: CallWorld, services: Services, member, discord_locales
) -> None:
    _, channel, alice = member
    discord_locales[alice.id] = "es-ES"
    panel = await alice.slash(channel, "memory")
    await alice.click(panel.response, label="Recuérdame")
    assert (await world.store.get_user(alice.id)).locale == "es-ES"

    bot = await restart(simcord_env, world, services)
    bot.services.chat = None  # a direct message's answer that is the bot's own words, not the language model's
    await alice.user.send_dm("Hola")
    assert alice.user.dm_channel.last_message.content == words_for("es-ES")("errors.chat_disabled")
    assert alice.user.dm_channel.last_message.content.startswith("El chat de texto no está activado")

    shown = await alice.slash(channel, "memory")
    [exported] = (await alice.click(shown.response, label="Exportar")).followups
    data = json.loads(await exported.attachments[0].read())
    assert data["settings"]["discord_locale"] == "es-ES"

    forget = await alice.slash(channel, "forget everything")
    await alice.click(forget.response, label="Olvidar todo")
    assert await world.store.get_user(alice.id) is None


async def test_a_member_who_chose_no_memory_keeps_their_language_only_in_the_process(
    simcord_env, world: CallWorld, services: Services, member, discord_locales
) -> None:
    _, channel, alice = member
    discord_locales[alice.id] = "de"
    await world.store.set_consent(alice.id, False, world.clock())
    await services.locales.remember(alice.id, "de")  # what their interaction does, awaited here
    panel = await alice.slash(channel, "memory")
    assert panel.response.embeds[0].title == "Was ich über dich weiß"
    assert (await world.store.get_user(alice.id)).locale is None

    bot = await restart(simcord_env, world, services)
    bot.services.chat = None
    await alice.user.send_dm("Hallo")
    assert alice.user.dm_channel.last_message.content == words_for("en-US")("errors.chat_disabled")


async def test_the_memory_panel_shows_the_call_language_in_the_members_language(
    simcord_env, world: CallWorld, member, discord_locales
) -> None:
    _, channel, alice = member
    discord_locales[alice.id] = "es-ES"
    panel = await alice.slash(channel, "memory")
    assert "🗣️ **Idioma de las llamadas:** Automático (tu idioma de Discord)" in panel.response.embeds[0].description

    await alice.slash(channel, "memory", language="de")
    panel = await alice.slash(channel, "memory")
    assert "🗣️ **Idioma de las llamadas:** Deutsch (alemán) · `/memoria idioma:`" in (
        panel.response.embeds[0].description
    )
