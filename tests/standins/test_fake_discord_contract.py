"""The fake Discord holds a bot to Discord's documented rules beyond the schema's keywords: the first answer to every
kind of interaction within 3 seconds (autocomplete included), localizations only for Discord's locales, suggestion
values of at most 100 characters; and the schema's own lengths for descriptions and choices."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import discord
import pytest
import pytest_asyncio
from discord import app_commands
from discord.ext import commands

from standins.discord_gateway import FakeDiscord
from standins.discord_gateway.contract_rules import FIRST_ANSWER_SECONDS, available_locales

ALICE = 1_000_000_000_000_000_001
LATE = 0.4
"""The deadline these tests give the fake (Discord's is 3 s; shorter keeps the tests quick)."""


class SlowBot(commands.Bot):
    """Answers every interaction ``delay`` seconds late (a bot that reads a locked database first)."""

    def __init__(self) -> None:
        super().__init__(
            command_prefix=commands.when_mentioned, intents=discord.Intents(guilds=True), guild_ready_timeout=0.05
        )
        self.delay = 0.0
        self.suggestion_value = "apple"

    async def setup_hook(self) -> None:
        bot = self

        class Panel(discord.ui.View):
            def __init__(self) -> None:
                super().__init__(timeout=60)

            @discord.ui.button(label="Slow", custom_id="slow:click")
            async def slow(self, interaction: discord.Interaction, button: discord.ui.Button[Panel]) -> None:
                await asyncio.sleep(bot.delay)
                await interaction.response.defer()

        class Ask(discord.ui.Modal, title="Ask"):
            text: discord.ui.TextInput[Ask] = discord.ui.TextInput(label="Text", custom_id="ask:text")

            async def on_submit(self, interaction: discord.Interaction) -> None:
                await asyncio.sleep(bot.delay)
                await interaction.response.defer(ephemeral=True)

        @app_commands.command(name="slow", description="Answers late")
        async def slow(interaction: discord.Interaction) -> None:
            await asyncio.sleep(bot.delay)
            await interaction.response.defer(ephemeral=True)

        @app_commands.command(name="panel", description="A message with a button")
        async def panel(interaction: discord.Interaction) -> None:
            await interaction.response.send_message("Panel", view=Panel())

        @app_commands.command(name="ask", description="Opens a modal")
        async def ask(interaction: discord.Interaction) -> None:
            await interaction.response.send_modal(Ask(custom_id="ask"))

        @app_commands.command(name="find", description="Find a fruit")
        async def find(interaction: discord.Interaction, fruit: str) -> None:
            await interaction.response.send_message(fruit, ephemeral=True)

        @find.autocomplete("fruit")
        async def find_fruit(interaction: discord.Interaction, current: str) -> list[app_commands.Choice[str]]:
            await asyncio.sleep(bot.delay)
            return [app_commands.Choice(name="Apple", value=bot.suggestion_value)]

        for command in (slow, panel, ask, find):
            self.tree.add_command(command)
        await self.tree.sync()


@pytest_asyncio.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    f = FakeDiscord(first_answer_seconds=LATE)
    await f.start()
    f.patch(monkeypatch)
    yield f
    await f.stop()
    assert f.invalid_responses == [] and f.internal_errors == []


@pytest_asyncio.fixture
async def bot(fake: FakeDiscord) -> AsyncIterator[SlowBot]:
    b = SlowBot()
    task = asyncio.create_task(b.start("fake-token"))
    await asyncio.wait_for(b.wait_until_ready(), 10)
    yield b
    await b.close()
    await asyncio.wait_for(task, 5)


def test_discords_deadline_is_three_seconds_by_default() -> None:
    assert FIRST_ANSWER_SECONDS == 3.0 and FakeDiscord().first_answer_seconds == 3.0


async def test_every_kind_of_interaction_answered_late_is_unknown(bot: SlowBot, fake: FakeDiscord) -> None:
    """§4.3: past the deadline the token is invalidated and the first answer gets 404 ``10062 Unknown
    interaction``, for a command, a button, a modal submission and an autocomplete alike."""
    panel = await fake.slash("panel", ALICE)
    await fake.next_response(panel)
    opened = await fake.slash("ask", ALICE)
    await fake.next_response(opened)
    [message] = [m for m in fake.messages.values() if m["content"] == "Panel"]

    bot.delay = LATE + 0.3
    tokens = [
        await fake.slash("slow", ALICE),
        await fake.click(message, "slow:click", ALICE),
        await fake.submit_modal("ask", ALICE, {"ask:text": "hello"}),
        await fake.autocomplete("find", ALICE, "fruit", "ap"),
    ]
    await asyncio.sleep(bot.delay + 0.5)

    refused = [r for r in fake.invalid_requests if "/callback" in r.path]
    assert len(refused) == 4, [r.describe() for r in fake.invalid_requests]
    assert {r.status for r in refused} == {404} and all("past Discord's" in r.problems[0] for r in refused)
    assert all(fake.responses[token] == [] for token in tokens), "nothing late reaches the member"


async def test_an_answer_within_the_deadline_is_taken(bot: SlowBot, fake: FakeDiscord) -> None:
    bot.delay = LATE / 4
    token = await fake.autocomplete("find", ALICE, "fruit", "ap")
    kind, body = await fake.next_response(token)
    assert (kind, body["type"], body["data"]["choices"]) == ("callback", 8, [{"name": "Apple", "value": "apple"}])
    fake.assert_no_invalid_requests()


async def test_a_suggestion_value_longer_than_100_characters_is_refused(bot: SlowBot, fake: FakeDiscord) -> None:
    """discord-testing §2.2: suggestions have "values of at most 100 characters"."""
    bot.suggestion_value = "a" * 101
    await fake.autocomplete("find", ALICE, "fruit", "ap")
    await asyncio.sleep(0.3)
    [refused] = fake.invalid_requests
    assert refused.status == 400 and refused.errors["data"]["choices"]["0"]["value"]["_errors"][0]["code"] == (
        "BASE_TYPE_BAD_LENGTH"
    )


# ---- command sync ------------------------------------------------------------------------------------------


def command(**fields: Any) -> dict[str, Any]:
    option = {"type": 3, "name": "fruit", "description": "A fruit", "choices": [{"name": "Apple", "value": "apple"}]}
    return {"name": "pick", "type": 1, "description": "Pick a fruit", "options": [option], **fields}


async def sync(fake: FakeDiscord, body: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    url = f"{fake.base_url}/applications/{fake.application_id}/commands"
    headers = {"Authorization": "Bot fake-token"}
    async with aiohttp.ClientSession() as http, http.put(url, json=body, headers=headers) as response:
        return response.status, await response.json(content_type=None)


async def test_localizations_name_only_discords_locales(fake: FakeDiscord) -> None:
    assert len(available_locales()) == 34 and {"en-US", "es-ES", "pt-BR", "de", "hi", "th"} <= available_locales()
    assert (await sync(fake, [command(name_localizations={"es-ES": "elegir", "de": "waehlen"})]))[0] == 200

    for bad in ("es", "pt", "en", "xx", "es_ES"):
        status, answer = await sync(fake, [command(description_localizations={bad: "Elige una fruta"})])
        assert (status, answer["code"]) == (400, 50035), bad
        assert answer["errors"]["0"]["description_localizations"][bad]["_errors"][0]["code"] == "BASE_TYPE_CHOICES"

    choice = {"name": "Apple", "value": "apple", "name_localizations": {"portuguese": "Maçã"}}
    option = {"type": 3, "name": "fruit", "description": "A fruit", "choices": [choice]}
    status, answer = await sync(fake, [command(options=[option])])
    assert status == 400 and "portuguese" in answer["errors"]["0"]["options"]["0"]["choices"]["0"]["name_localizations"]
    assert len(fake.invalid_requests) == 6


@pytest.mark.parametrize(
    "body",
    [
        command(description="d" * 101),
        command(name_localizations={"de": "w" * 33}),
        command(options=[{"type": 3, "name": "fruit", "description": "f" * 101}]),
        command(
            options=[{"type": 3, "name": "fruit", "description": "A fruit", "choices": [{"name": "", "value": "a"}]}]
        ),
        command(
            options=[{"type": 3, "name": "fruit", "description": "A", "choices": [{"name": "n" * 101, "value": "a"}]}]
        ),
    ],
    ids=["description", "localized-name", "option-description", "empty-choice-name", "long-choice-name"],
)
async def test_descriptions_and_choices_longer_than_discord_takes_are_refused(
    fake: FakeDiscord, body: dict[str, Any]
) -> None:
    status, answer = await sync(fake, [body])
    assert (status, answer["code"]) == (400, 50035)
    assert fake.commands == {}, "nothing synced"


@pytest.mark.parametrize(
    ("body", "where"),
    [
        (command(name="Pick"), ["0", "name"]),
        (command(name="pick fruit"), ["0", "name"]),
        (command(name="pick!"), ["0", "name"]),
        (command(name_localizations={"de": "Wählen"}), ["0", "name_localizations", "de"]),
        (command(options=[{"type": 3, "name": "Fruit", "description": "A fruit"}]), ["0", "options", "0", "name"]),
    ],
    ids=["upper-case", "space", "punctuation", "localized-upper-case", "option-upper-case"],
)
async def test_slash_command_and_option_names_follow_discords_naming_rule(
    fake: FakeDiscord, body: dict[str, Any], where: list[str]
) -> None:
    """Discord's Application Command Naming: lower case where a letter has a lower case, letters, digits, - _ ' and
    Devanagari and Thai; what the bot's catalogues localize its commands to (/llamar, /erinnerungen, /ligar) passes."""
    status, answer = await sync(fake, [body])
    assert (status, answer["code"]) == (400, 50035)
    error = answer["errors"]
    for key in where:
        error = error[key]
    assert error["_errors"][0]["code"] == "APPLICATION_COMMAND_INVALID_NAME"
    assert fake.commands == {}, "nothing synced"
    fine = command(name="pick-fruit_2", name_localizations={"es-ES": "elegir", "hi": "चुनें", "th": "เลือก", "ja": "選ぶ"})
    assert (await sync(fake, [fine]))[0] == 200
