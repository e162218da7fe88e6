"""Tests of the loopback fake Discord itself, driven by a throwaway discord.py bot (not the product bot).

The bot runs the real ``bot.start(token)`` path over HTTP and a WebSocket on 127.0.0.1; every request body it
sends is validated against Discord's OpenAPI description by the fake.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import discord
import pytest
import pytest_asyncio
from discord import app_commands
from discord.ext import commands

from standins.discord_gateway import (
    OPENAPI_FILE,
    SCHEMA_ALLOWANCES,
    FakeDiscord,
    OpenAPI,
    SchemaAllowance,
    openapi,
)
from standins.discord_gateway.fake import run_until_ready
from standins.discord_gateway.schema_errors import collect_errors

ALICE = 1_000_000_000_000_000_001
BOB = 1_000_000_000_000_000_002
MANAGE_GUILD = str(1 << 5)
REPORT_BYTES = b"memory report\nline two\n"
CALL_URL = "https://calls.example.test/room/abc"
FRUITS = ["apple", "apricot", "banana", "blackberry", "cherry"]


# ----------------------------------------------------------------------------------------------------------
# The throwaway bot
# ----------------------------------------------------------------------------------------------------------


class CallView(discord.ui.View):
    """A link button plus a custom_id button that ends the call by editing the message (callback type 7)."""

    def __init__(self) -> None:
        super().__init__(timeout=60)
        self.add_item(discord.ui.Button(label="Join call", url=CALL_URL))

    @discord.ui.button(label="End call", custom_id="call:end", style=discord.ButtonStyle.danger)
    async def end(self, interaction: discord.Interaction, button: discord.ui.Button[CallView]) -> None:
        await interaction.response.edit_message(content="Call ended.", view=None)


class FeedbackModal(discord.ui.Modal, title="Feedback"):
    text: discord.ui.TextInput[FeedbackModal] = discord.ui.TextInput(
        label="Your feedback", custom_id="feedback:text", max_length=200
    )

    async def on_submit(self, interaction: discord.Interaction) -> None:
        await interaction.response.send_message(f"Thanks: {self.text.value}", ephemeral=True)


@app_commands.command(name="call", description="Start a voice call")
async def call_command(interaction: discord.Interaction) -> None:
    await interaction.response.defer(ephemeral=True, thinking=True)
    await interaction.followup.send("Your agent is ready.", view=CallView(), ephemeral=True)


@app_commands.command(name="pick", description="Pick a fruit")
@app_commands.describe(fruit="The fruit")
async def pick_command(interaction: discord.Interaction, fruit: str) -> None:
    await interaction.response.send_message(f"You picked {fruit}", ephemeral=True)


@pick_command.autocomplete("fruit")
async def pick_autocomplete(interaction: discord.Interaction, current: str) -> list[app_commands.Choice[str]]:
    return [app_commands.Choice(name=f, value=f) for f in FRUITS if f.startswith(current.lower())]


@app_commands.command(name="report", description="Get your memory report as a file")
async def report_command(interaction: discord.Interaction) -> None:
    await interaction.response.defer(ephemeral=True)
    report = discord.File(io.BytesIO(REPORT_BYTES), filename="report.txt")
    await interaction.followup.send("Your report", file=report, ephemeral=True)


@app_commands.command(name="dm-me", description="Send me a DM")
async def dm_me_command(interaction: discord.Interaction) -> None:
    await interaction.user.send("Hello in private")
    await interaction.response.send_message("Sent you a DM", ephemeral=True)


@app_commands.command(name="feedback", description="Leave feedback")
async def feedback_command(interaction: discord.Interaction) -> None:
    await interaction.response.send_modal(FeedbackModal(custom_id="feedback"))


@app_commands.command(name="long", description="Tries a followup that is too long")
async def long_command(interaction: discord.Interaction) -> None:
    await interaction.response.defer(ephemeral=True)
    try:
        await interaction.followup.send("x" * 2001, ephemeral=True)  # discord.py does not check the length
    except discord.HTTPException as exc:
        bot = interaction.client
        assert isinstance(bot, ThrowawayBot)
        bot.http_errors.append(exc)
        await interaction.followup.send("That was too long.", ephemeral=True)


@app_commands.command(name="count", description="Counts by editing, then deletes the answer")
async def count_command(interaction: discord.Interaction) -> None:
    await interaction.response.send_message("1")
    original = await interaction.original_response()
    await original.edit(content=f"{int(original.content) + 1}")
    await interaction.delete_original_response()


admin_group = app_commands.Group(
    name="admin",
    description="Server settings",
    default_permissions=discord.Permissions(manage_guild=True),
    guild_only=True,
)


@admin_group.command(name="set-voice", description="Choose the agent voice")
@app_commands.choices(
    voice=[app_commands.Choice(name="Alloy", value="alloy"), app_commands.Choice(name="Verse", value="verse")]
)
async def set_voice_command(interaction: discord.Interaction, voice: app_commands.Choice[str]) -> None:
    await interaction.response.send_message(f"Voice set to {voice.value}", ephemeral=True)


class RecordingTree(app_commands.CommandTree):
    async def on_error(self, interaction: discord.Interaction, error: app_commands.AppCommandError) -> None:
        bot = interaction.client
        assert isinstance(bot, ThrowawayBot)
        bot.errors.append(error)


class ThrowawayBot(commands.Bot):
    def __init__(self) -> None:
        super().__init__(
            command_prefix=commands.when_mentioned,
            tree_cls=RecordingTree,
            intents=discord.Intents(guilds=True, dm_messages=True),
            guild_ready_timeout=0.05,
        )
        self.errors: list[BaseException] = []
        self.http_errors: list[discord.HTTPException] = []

    async def setup_hook(self) -> None:
        for command in (
            call_command,
            pick_command,
            report_command,
            dm_me_command,
            feedback_command,
            long_command,
            count_command,
            admin_group,
        ):
            self.tree.add_command(command)
        await self.tree.sync()

    async def on_message(self, message: discord.Message) -> None:
        if message.guild is None and self.user is not None and message.author.id != self.user.id:
            if message.content.startswith("slowly "):  # as the product bot answers a DM: typing, then edits
                await message.channel.typing()
                sent = await message.channel.send("…")
                await sent.edit(content=f"echo: {message.content}")
                return
            await message.channel.send(f"echo: {message.content}")


# ----------------------------------------------------------------------------------------------------------
# Fixtures
# ----------------------------------------------------------------------------------------------------------


@pytest_asyncio.fixture
async def bot(fake: FakeDiscord) -> AsyncIterator[ThrowawayBot]:
    b = ThrowawayBot()
    task = await run_until_ready(b)
    yield b
    await b.close()
    await asyncio.wait_for(task, 5)
    assert b.errors == []
    fake.assert_no_invalid_requests()


def _components(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for row in message["components"] for c in row["components"]]


# ----------------------------------------------------------------------------------------------------------
# Startup and command sync
# ----------------------------------------------------------------------------------------------------------


async def test_bot_starts_and_syncs_commands(bot: ThrowawayBot, fake: FakeDiscord) -> None:
    assert bot.user is not None and str(bot.user.id) == fake.bot_user_id
    assert bot.application_id is not None and str(bot.application_id) == fake.application_id
    guild = bot.get_guild(int(fake.guild_id))
    assert guild is not None and guild.name == "Test Guild"
    assert [c.id for c in guild.text_channels] == [int(fake.channel_id)]
    assert guild.me is not None

    synced = {c["name"]: c for c in fake.commands["global"]}
    assert set(synced) == {"call", "pick", "report", "dm-me", "feedback", "long", "count", "admin"}
    pick = synced["pick"]["options"][0]
    assert (pick["name"], pick["type"], pick["autocomplete"], pick["required"]) == ("fruit", 3, True, True)
    admin = synced["admin"]
    assert admin["default_member_permissions"] == 32  # an int, not a string (spec gotcha 5)
    assert admin["dm_permission"] is False and admin["contexts"] is None
    sub = admin["options"][0]
    assert (sub["name"], sub["type"]) == ("set-voice", 1)
    assert [c["value"] for c in sub["options"][0]["choices"]] == ["alloy", "verse"]


async def test_resync_keeps_command_ids(bot: ThrowawayBot, fake: FakeDiscord) -> None:
    before = {c["name"]: c["id"] for c in fake.commands["global"]}
    returned = await bot.tree.sync()
    assert {c.name: str(c.id) for c in returned} == before
    assert {c.name: c.default_member_permissions for c in returned}["admin"] == discord.Permissions(32)


# ----------------------------------------------------------------------------------------------------------
# Interactions
# ----------------------------------------------------------------------------------------------------------


async def test_slash_defers_then_sends_ephemeral_followup_with_buttons(bot: ThrowawayBot, fake: FakeDiscord) -> None:
    token = await fake.slash("call", ALICE)

    kind, body = await fake.next_response(token)
    assert (kind, body["type"], body["data"]["flags"]) == ("callback", 5, 64)
    kind, body = await fake.next_response(token)
    assert kind == "followup" and body["flags"] & 64 and body["content"] == "Your agent is ready."
    buttons = {b.get("custom_id") or b["url"]: b for b in body["components"][0]["components"]}
    assert buttons[CALL_URL]["style"] == 5 and "custom_id" not in buttons[CALL_URL]
    assert buttons["call:end"]["style"] == 4

    # The first followup after a defer edits the loading message instead of creating another one.
    (message,) = fake.messages.values()
    assert message["flags"] == 64 and message["content"] == "Your agent is ready."
    assert all("id" in c for c in _components(message))


async def test_click_updates_the_message(bot: ThrowawayBot, fake: FakeDiscord) -> None:
    token = await fake.slash("call", ALICE)
    await fake.next_response(token)
    await fake.next_response(token)
    (message,) = fake.messages.values()

    with pytest.raises(PermissionError):  # ephemeral: Bob cannot see, so cannot click, Alice's message
        await fake.click(message, "call:end", BOB)
    with pytest.raises(LookupError):
        await fake.click(message, "call:nope", ALICE)

    click = await fake.click(message, "call:end", ALICE)
    kind, body = await fake.next_response(click)
    assert (kind, body["type"], body["data"]["content"], body["data"]["components"]) == (
        "callback",
        7,
        "Call ended.",
        [],
    )
    assert fake.messages[message["id"]]["content"] == "Call ended."


async def test_edit_and_delete_original_response(bot: ThrowawayBot, fake: FakeDiscord) -> None:
    token = await fake.slash("count", ALICE)
    kind, body = await fake.next_response(token)
    assert (kind, body["type"], body["data"]["content"]) == ("callback", 4, "1")
    message_id = next(iter(fake.messages))
    kind, body = await fake.next_response(token)
    assert (kind, body["content"]) == (
        "edit",
        "2",
    )  # discord.py also sends "tts": false, unknown to the schema
    assert fake.messages[message_id]["edited_timestamp"] is not None
    assert await fake.next_response(token) == ("delete", None)
    assert message_id not in fake.messages


async def test_autocomplete(bot: ThrowawayBot, fake: FakeDiscord) -> None:
    token = await fake.autocomplete("pick", ALICE, "fruit", "ap")
    kind, body = await fake.next_response(token)
    assert (kind, body["type"]) == ("callback", 8)
    assert body["data"]["choices"] == [
        {"name": "apple", "value": "apple"},
        {"name": "apricot", "value": "apricot"},
    ]

    token = await fake.slash("pick", ALICE, options={"fruit": "apple"})
    kind, body = await fake.next_response(token)
    assert (body["type"], body["data"]["content"]) == (4, "You picked apple")


async def test_file_followup_exposes_bytes(bot: ThrowawayBot, fake: FakeDiscord) -> None:
    token = await fake.slash("report", ALICE)
    assert (await fake.next_response(token))[1]["type"] == 5
    kind, body = await fake.next_response(token)
    assert kind == "followup" and body["attachments"] == [{"id": 0, "filename": "report.txt"}]

    (uploaded,) = fake.files[token]
    assert (uploaded.filename, uploaded.data) == ("report.txt", REPORT_BYTES)
    message = fake.messages[uploaded.message_id or ""]
    (attachment,) = message["attachments"]
    assert attachment["size"] == len(REPORT_BYTES) and fake.files[message["id"]] == [uploaded]
    async with aiohttp.ClientSession() as session, session.get(attachment["url"]) as resp:
        assert await resp.read() == REPORT_BYTES


async def test_dm_reply_and_bot_initiated_dm(bot: ThrowawayBot, fake: FakeDiscord) -> None:
    sent = await fake.send_dm(ALICE, "hello bot")
    reply = await fake.next_channel_message(sent["channel_id"])
    assert reply["content"] == "echo: hello bot"

    token = await fake.slash("dm-me", ALICE)
    kind, body = await fake.next_response(token)
    assert (kind, body["data"]["content"]) == ("callback", "Sent you a DM")
    dm_bodies = fake.channel_messages[fake.dm_channel_id(ALICE)]
    assert [b["content"] for b in dm_bodies] == ["echo: hello bot", "Hello in private"]


async def test_dm_answer_shows_typing_then_edits_its_message(bot: ThrowawayBot, fake: FakeDiscord) -> None:
    sent = await fake.send_dm(ALICE, "slowly hello")
    channel = sent["channel_id"]
    assert (await fake.next_channel_message(channel))["content"] == "…"
    for _ in range(100):
        if fake.channel_message_edits.get(channel):
            break
        await asyncio.sleep(0.02)
    assert fake.typing == [channel]
    assert [edit["content"] for edit in fake.channel_message_edits[channel]] == ["echo: slowly hello"]
    answer = next(m for m in fake.messages.values() if m["channel_id"] == channel and m["author"].get("bot"))
    assert answer["content"] == "echo: slowly hello" and answer["edited_timestamp"] is not None
    fake.assert_no_invalid_requests()

    own = bot.get_partial_messageable(int(channel)).get_partial_message(int(sent["id"]))
    with pytest.raises(discord.Forbidden, match="authored by another user"):
        await own.edit(content="rewritten by the bot")
    assert fake.messages[sent["id"]]["content"] == "slowly hello"
    with pytest.raises(discord.NotFound):
        await bot.get_partial_messageable(123).typing()
    assert [(r.operation, r.status) for r in fake.invalid_requests] == [
        ("PATCH /channels/{channel_id}/messages/{message_id}", 403),
        ("POST /channels/{channel_id}/typing", 404),
    ]
    fake.invalid_requests.clear()


async def test_modal_roundtrip(bot: ThrowawayBot, fake: FakeDiscord) -> None:
    token = await fake.slash("feedback", ALICE)
    kind, body = await fake.next_response(token)
    assert (kind, body["type"], body["data"]["custom_id"]) == ("callback", 9, "feedback")

    with pytest.raises(PermissionError):
        await fake.submit_modal("feedback", BOB, {"feedback:text": "hi"})
    submitted = await fake.submit_modal("feedback", ALICE, {"feedback:text": "great bot"})
    kind, body = await fake.next_response(submitted)
    assert (body["type"], body["data"]["content"], body["data"]["flags"]) == (4, "Thanks: great bot", 64)


async def test_admin_subcommand_needs_manage_guild(bot: ThrowawayBot, fake: FakeDiscord) -> None:
    with pytest.raises(PermissionError):
        await fake.slash("admin", ALICE, subcommand="set-voice", options={"voice": "alloy"})
    with pytest.raises(ValueError, match="only accepts"):
        await fake.slash("admin", ALICE, {"voice": "robot"}, "set-voice", permissions=MANAGE_GUILD)
    with pytest.raises(LookupError, match="never synced"):
        await fake.slash("nope", ALICE)

    token = await fake.slash("admin", ALICE, {"voice": "verse"}, "set-voice", permissions=MANAGE_GUILD)
    _, body = await fake.next_response(token)
    assert (body["type"], body["data"]["content"]) == (4, "Voice set to verse")


# ----------------------------------------------------------------------------------------------------------
# Validation and Discord rules
# ----------------------------------------------------------------------------------------------------------


async def test_too_long_followup_is_rejected_and_recorded(bot: ThrowawayBot, fake: FakeDiscord) -> None:
    token = await fake.slash("long", ALICE)
    assert (await fake.next_response(token))[1]["type"] == 5
    kind, body = await fake.next_response(token)  # the rejected one is never delivered
    assert (kind, body["content"]) == ("followup", "That was too long.")

    (error,) = bot.http_errors
    assert (error.status, error.code) == (400, 50035) and "In content: Must be 2000 or fewer" in error.text
    (invalid,) = fake.invalid_requests
    assert invalid.method == "POST" and invalid.operation == "POST /webhooks/{webhook_id}/{webhook_token}"
    assert invalid.errors == {
        "content": {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}]}
    }
    with pytest.raises(AssertionError, match="content: Must be 2000 or fewer"):
        fake.assert_no_invalid_requests()
    fake.invalid_requests.clear()  # seen; keep the teardown check for anything else


async def test_too_long_button_label_is_rejected(bot: ThrowawayBot, fake: FakeDiscord) -> None:
    channel = bot.get_channel(int(fake.channel_id))
    assert isinstance(channel, discord.TextChannel)
    view = discord.ui.View()
    view.add_item(discord.ui.Button(label="x" * 81, custom_id="too-long"))  # discord.py does not check it

    with pytest.raises(discord.HTTPException) as caught:
        await channel.send("hi", view=view)
    assert caught.value.code == 50035 and "In components.0.components.0.label: Must be 80" in caught.value.text
    (invalid,) = fake.invalid_requests
    assert invalid.operation == "POST /channels/{channel_id}/messages"
    fake.invalid_requests.clear()

    ok = discord.ui.View()
    ok.add_item(discord.ui.Button(label="fine", custom_id="fine"))
    message = await channel.send("hi", view=ok)
    assert fake.channel_messages[fake.channel_id][-1]["content"] == "hi"
    assert fake.messages[str(message.id)]["components"][0]["components"][0]["label"] == "fine"


async def test_unimplemented_route_raises_not_found(bot: ThrowawayBot, fake: FakeDiscord) -> None:
    with pytest.raises(discord.NotFound, match="not implemented"):
        await bot.fetch_guild(int(fake.guild_id))
    assert fake.unimplemented_requests == [f"GET /guilds/{fake.guild_id}"]
    assert fake.invalid_requests == []


async def test_second_acknowledgement_and_bad_query_are_rejected(bot: ThrowawayBot, fake: FakeDiscord) -> None:
    token = await fake.slash("pick", ALICE, options={"fruit": "cherry"})
    await fake.next_response(token)
    interaction_id = fake.interactions[token]["id"]
    url = f"{fake.base_url}/interactions/{interaction_id}/{token}/callback"
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json={"type": 4, "data": {"content": "again"}}) as resp:
            assert resp.status == 400 and (await resp.json())["code"] == 40060
        async with session.post(url + "?with_response=maybe", json={"type": 4}) as resp:
            payload = await resp.json()
            assert resp.status == 400 and "with_response" in payload["errors"]
        async with session.post(f"{fake.base_url}/webhooks/{fake.application_id}/tok-unknown", json={}) as resp:
            assert resp.status == 404 and (await resp.json())["code"] == 10015
    assert [r.status for r in fake.invalid_requests] == [400, 400, 404]
    fake.invalid_requests.clear()


async def test_wire_details(fake: FakeDiscord) -> None:
    """Content-Type exactly application/json (spec gotcha 1), bot auth, 404 shape for unknown routes."""
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{fake.base_url}/users/@me") as resp:
            assert resp.status == 401
        headers = {"Authorization": "Bot fake-token"}
        async with session.get(f"{fake.base_url}/users/@me", headers=headers) as resp:
            assert resp.status == 200 and resp.headers["Content-Type"] == "application/json"
            assert (await resp.json())["id"] == fake.bot_user_id
        async with session.delete(f"{fake.base_url}/channels/1/messages/2", headers=headers) as resp:
            assert resp.status == 404 and resp.headers["Content-Type"] == "application/json"
            assert await resp.json() == {
                "message": "fake discord: DELETE /channels/1/messages/2 not implemented",
                "code": 0,
            }


async def test_auto_sharded_bot_gets_its_shard_echoed(fake: FakeDiscord) -> None:
    sharded = commands.AutoShardedBot(
        command_prefix=commands.when_mentioned,
        intents=discord.Intents(guilds=True),
        guild_ready_timeout=0.05,
    )
    task = await run_until_ready(sharded)
    try:
        assert sharded.shard_count == 1 and fake.identify_payloads[0]["shard"] == [0, 1]
        assert sharded.get_guild(int(fake.guild_id)) is not None
    finally:
        await sharded.close()
        await asyncio.wait_for(task, 5)
    fake.assert_no_invalid_requests()


# ----------------------------------------------------------------------------------------------------------
# The OpenAPI document
# ----------------------------------------------------------------------------------------------------------


async def test_fake_checks_its_own_answers_against_the_documented_responses(fake: FakeDiscord) -> None:
    api = openapi()
    matched = api.match("POST", "/interactions/1/tok/callback")
    assert matched is not None
    fake._validate_response(api, matched[0], 200, {"interaction": {"id": "1"}})  # "type" is missing
    (invalid,) = fake.invalid_responses
    assert invalid.problems[0].startswith("interaction.type: This field is required")
    fake.invalid_responses.clear()


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # UPDATE_MESSAGE: judged by the branch whose "type" matches, not the first branch that fails deep.
        ({"type": 7, "data": {"content": "x" * 2001}}, {"data.content": "BASE_TYPE_MAX_LENGTH"}),
        ({"type": 4, "data": {"flags": "64"}}, {"data.flags": "FAKE_SCHEMA_TYPE"}),
        (
            {"type": 8, "data": {"choices": [{"name": "", "value": "a"}]}},
            {"data.choices.0.name": "BASE_TYPE_MIN_LENGTH"},
        ),
        (
            {"type": 9, "data": {"custom_id": "m", "components": []}},
            {
                "data.title": "BASE_TYPE_REQUIRED",
                "data.components": "BASE_TYPE_MIN_LENGTH",
            },
        ),
        ({"type": 42}, {"type": "FAKE_SCHEMA_ENUM"}),
        (
            {
                "type": 4,
                "data": {"components": [{"type": 1, "components": [{"type": 2, "style": 1, "label": "x" * 81}]}]},
            },
            {"data.components.0.components.0.label": "BASE_TYPE_MAX_LENGTH"},
        ),
    ],
)
def test_union_errors_point_at_the_intended_branch(body: dict[str, Any], expected: dict[str, str]) -> None:
    api = openapi()
    matched = api.match("POST", "/interactions/1/tok/callback")
    assert matched is not None
    pointer = api.request_body_pointer(matched[0], "application/json")
    assert pointer is not None
    shaped, _ = collect_errors(api.validator(pointer).iter_errors(body))

    def flatten(node: dict[str, Any], prefix: str = "") -> dict[str, str]:
        found = {prefix.rstrip("."): item["code"] for item in node.get("_errors", [])}
        for key, child in node.items():
            if key != "_errors":
                found |= flatten(child, f"{prefix}{key}.")
        return found

    assert flatten(shaped) == expected


def test_every_handled_route_is_a_documented_operation(fake: FakeDiscord) -> None:
    document = openapi().document
    for route in fake.handled_routes:
        method, template = route.split(" ", 1)
        assert method.lower() in document["paths"].get(template, {}), route


@pytest.mark.parametrize("allowance", SCHEMA_ALLOWANCES, ids=lambda a: a.pointer.rsplit("/", 3)[-3])
def test_each_schema_allowance_is_still_needed(allowance: SchemaAllowance) -> None:
    api = openapi()
    assert not api.validator(api.original_pointer(allowance)).is_valid(allowance.witness), (
        "the published schema now accepts what discord.py sends: drop this allowance"
    )
    assert api.validator(allowance.pointer).is_valid(allowance.witness)
    assert allowance.reason


def test_openapi_is_loaded_once_and_cheap() -> None:
    assert openapi() is openapi()
    started = time.perf_counter()
    fresh = OpenAPI(json.loads(OPENAPI_FILE.read_text(encoding="utf-8")))  # what the first test pays
    matched = fresh.match("POST", "/webhooks/1/tok")
    assert matched is not None
    pointer = fresh.request_body_pointer(matched[0], "application/json")
    assert pointer is not None and fresh.validator(pointer).is_valid({"content": "hi"})
    assert time.perf_counter() - started < 2.0
