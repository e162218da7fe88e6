"""The bot's words in the member's own language, as members meet them: Discord sends each member's language with
every interaction (SimCord's locale set per member by ``discord_locales``), and the replies, buttons, menus and the
synced commands follow it; English members read what they always did."""

from __future__ import annotations

from typing import Any

import httpx

from bot.calls.errors import NoActiveCall
from bot.i18n import LANGUAGES, catalogues
from standins.factories import seed_fact
from standins.harness import CallWorld

SPANISH = ("es-ES", "es-419")


def items(message) -> list[dict]:
    return [c for row in message.components for c in row["components"]]


def labels(message) -> list[str]:
    return [c["label"] for c in items(message) if c["type"] == 2]


def link_of(message) -> str:
    return next(c["url"] for c in items(message) if c.get("url"))


async def test_a_spanish_member_calls_and_hangs_up_in_spanish(
    simcord_env, world: CallWorld, member, discord_locales
) -> None:
    _, channel, alice = member
    discord_locales[alice.id] = "es-ES"

    prompt = await alice.slash(channel, "call")
    assert prompt.response.content.startswith("**Antes de tu primera llamada: ¿puede recordarte el agente?**")
    assert "`/llamar privado:True`" in prompt.response.content
    assert labels(prompt.response) == ["Recuérdame", "Llamar sin memoria"]

    card = await alice.click(prompt.response, label="Recuérdame")
    assert card.response.content.startswith("**Tu llamada está lista.**")
    assert "las llamadas duran hasta 30 minutos" in card.response.content
    assert labels(card.response) == ["Abrir página de la llamada", "Colgar"]
    link = link_of(card.response)
    assert link.endswith("?lang=es"), link
    async with httpx.AsyncClient() as http:
        page = await http.get(link.replace(world.settings.web.public_url, world.web.url))
    assert page.status_code == 200 and '<html lang="es">' in page.text and ">Iniciar llamada</button>" in page.text

    ended = await alice.click(card.response, label="Colgar")
    assert ended.response.content.startswith("**Llamada terminada.** Se guardaron 0 líneas de la conversación.")


async def test_a_latin_american_spanish_member_gets_spanish_and_a_german_member_german(
    simcord_env, world: CallWorld, member, discord_locales
) -> None:
    guild, channel, alice = member
    bruno = guild.add_member(simcord_env.create_user("bruno"))
    discord_locales[alice.id] = "es-419"
    discord_locales[bruno.id] = "de"

    spanish = await alice.slash(channel, "hangup")
    assert spanish.response.content == "No tienes ninguna llamada en curso. Empieza una con `/llamar`."
    german = await bruno.slash(channel, "hangup")
    assert german.response.content == "Du hast keinen laufenden Anruf. Starte einen mit `/anrufen`."
    assert [type(error.original) for error in simcord_env.errors] == [NoActiveCall, NoActiveCall]

    refused = await bruno.slash(channel, "remember", text="Ich wohne in Köln")
    assert refused.response.content.startswith("Das habe ich nicht gespeichert: Du hast noch nicht gewählt")


async def test_a_german_member_reads_the_memory_panel_and_forgets_in_german(
    simcord_env, world: CallWorld, member, discord_locales
) -> None:
    _, channel, alice = member
    discord_locales[alice.id] = "de"
    await world.store.set_consent(alice.id, True, world.clock())
    await seed_fact(world.store, alice.id, "Lives in Cologne", world.clock())

    panel = await alice.slash(channel, "memory")
    embed = panel.response.embeds[0]
    assert embed.title == "Was ich über dich weiß"
    assert embed.description.startswith("🟢 Das Gedächtnis ist **an**")
    assert "**Was ich über dich weiß** (1)" in embed.description
    assert embed.footer.text == "Seite 1 von 1 · /vergessen entfernt eine Sache, einen Anruf oder alles"
    assert labels(panel.response) == ["◀", "▶", "Exportieren", "Gedächtnis pausieren", "Vergessen…"]

    picker = await alice.click(panel.response, label="Vergessen…")
    [followup] = picker.followups
    assert followup.content.startswith("**Was soll ich vergessen?**")
    everything = await alice.click(followup, label="Alles vergessen…")
    assert everything.response.content.startswith(
        "**Alles vergessen?**\nDas löscht alles, was ich über dich weiß (1 Fakt"
    )
    assert labels(everything.response) == ["Alles vergessen", "Abbrechen"]
    cancelled = await alice.click(everything.response, label="Abbrechen")
    assert cancelled.response.content == "Abgebrochen: Nichts wurde vergessen."


async def test_an_english_member_reads_what_they_always_did(simcord_env, world: CallWorld, member) -> None:
    _, channel, alice = member
    prompt = await alice.slash(channel, "call")
    assert prompt.response.content.startswith("**Before your first call: may the agent remember you?**")
    card = await alice.click(prompt.response, label="Remember me")
    assert "?lang=" not in link_of(card.response)


def localized(payload: dict[str, Any], locale: str) -> list[tuple[str, str, str | None]]:
    """Every name and description of a synced command, its options and sub-commands: (field, default, in locale)."""
    found = []
    for field in ("name", "description"):
        found.append((field, payload[field], (payload.get(f"{field}_localizations") or {}).get(locale)))
    for option in payload.get("options") or []:
        found += localized(option, locale)
    return found


async def test_the_synced_commands_carry_every_name_and_description_in_every_catalogue_language(
    simcord_env, world: CallWorld
) -> None:
    synced = {command["name"]: command for command in simcord_env.backend.commands[None].values()}
    assert set(synced) == {"call", "hangup", "chat", "memory", "remember", "forget", "settings", "member-data"}
    call = synced["call"]
    localized_names = [call["name_localizations"][locale] for locale in (*SPANISH, "de", "pt-BR")]
    assert localized_names == ["llamar", "llamar", "anrufen", "ligar"]
    assert (
        call["description_localizations"]["de"] == "Starte einen Sprachanruf mit dem Agenten, der sich an dich erinnert"
    )
    private = next(option for option in call["options"] if option["name"] == "private")
    assert private["name_localizations"]["es-ES"] == "privado"
    assert "en-US" not in call["name_localizations"], "English is the commands' own text"

    for locale in (*SPANISH, "de", "pt-BR"):
        missing = [
            (field, default)
            for command in synced.values()
            for field, default, text in localized(command, locale)
            if not text
        ]
        assert missing == [], locale


def test_every_command_text_is_in_the_english_catalogue_as_the_code_writes_it(simcord_env) -> None:
    """The English catalogue's ``command.*`` keys are the commands' own text: a command or option added without its
    keys, or changed in the code only, fails here (and so stays untranslated nowhere)."""
    english = catalogues()["en"].texts
    synced = list(simcord_env.backend.commands[None].values())
    defaults = {default for command in synced for _, default, _ in localized(command, "de")}
    catalogued = {text for key, text in english.items() if key.startswith("command.")}
    assert defaults == catalogued
    assert set(LANGUAGES) == {"en", "es", "de", "pt"}


async def test_direct_messages_follow_the_members_last_interaction(
    simcord_env, world: CallWorld, member, discord_locales
) -> None:
    """A direct message carries no locale: the bot answers in the language of the member's last interaction."""
    guild, channel, alice = member
    bruno = guild.add_member(simcord_env.create_user("bruno"))
    discord_locales[alice.id] = "de"
    await alice.slash(channel, "memory")

    await alice.user.send_dm("Hallo")
    assert alice.user.dm_channel.last_message.content.startswith(
        "**Bevor wir chatten: Darf sich der Agent an dich erinnern?**"
    )
    prompt = alice.user.dm_channel.last_message
    assert [button.label for row in prompt.components for button in row.children] == [
        "An mich erinnern",
        "Ohne Gedächtnis",
    ]
    await bruno.user.send_dm("Hello")
    assert bruno.user.dm_channel.last_message.content.startswith("**Before we chat: may the agent remember you?**")
