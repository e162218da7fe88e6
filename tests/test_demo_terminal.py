"""The demo's terminal: typed lines become the slash commands Discord would send, and what the bot sent is printed
as the member would read it, with numbered choices and forms (demo/terminal.py)."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from bot.memory.block import BudgetedBlock
from bot.store.models import FactRecord, TurnRecord
from demo.scripted import extraction_reply, respond
from demo.terminal import (
    Choice,
    Command,
    CommandError,
    Screen,
    embed_text,
    form_fields,
    parse_command,
    plain,
)
from standins.discord_gateway import FakeDiscord

ROOT = Path(__file__).resolve().parents[1]
STRING, BOOLEAN, INTEGER, SUBCOMMAND = 3, 5, 4, 1
T = 1_780_000_000.0


def subcommand(name: str, *options: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "type": SUBCOMMAND, "options": list(options)}


ITEM = {"name": "item", "type": STRING, "required": True, "autocomplete": True}
COMMANDS: list[dict[str, Any]] = [
    {"name": "call", "options": [{"name": "private", "type": BOOLEAN}]},
    {"name": "hangup"},
    {
        "name": "chat",
        "options": [
            {"name": "message", "type": STRING, "required": True},
            {"name": "public", "type": BOOLEAN},
            {"name": "private", "type": BOOLEAN},
        ],
    },
    {"name": "forget", "options": [subcommand("item", ITEM), subcommand("everything")]},
    {
        "name": "settings",
        "default_member_permissions": "32",
        "options": [
            subcommand("calls", {"name": "enabled", "type": BOOLEAN, "required": True}),
            subcommand("max-minutes", {"name": "minutes", "type": INTEGER, "required": True}),
        ],
    },
]


def test_typed_lines_become_the_commands_discord_sends() -> None:
    assert parse_command(COMMANDS, "call") == Command("call", None, {}, "0")
    assert parse_command(COMMANDS, "/call private") == Command("call", None, {"private": True}, "0")
    assert parse_command(COMMANDS, "chat I moved to Lisbon, finally") == Command(
        "chat", None, {"message": "I moved to Lisbon, finally"}, "0"
    )
    assert parse_command(COMMANDS, "chat public=yes hello") == Command(
        "chat", None, {"public": True, "message": "hello"}, "0"
    )
    assert parse_command(COMMANDS, "forget everything") == Command("forget", "everything", {}, "0")
    assert parse_command(COMMANDS, "settings calls off") == Command("settings", "calls", {"enabled": False}, "32")
    assert parse_command(COMMANDS, "settings max-minutes 10").options == {"minutes": 10}


@pytest.mark.parametrize(
    "text",
    [
        "what's my cat called?",
        "My daughter's birthday is on 4 May",
        'She said "see you" and left',
        '"unclosed',
        "it's 50% off — the 'new' one",
        "  spaced   out  ",
    ],
)
def test_free_text_is_taken_as_typed_with_its_apostrophes_and_quotes(text: str) -> None:
    assert parse_command(COMMANDS, f"chat {text}").options == {"message": text.strip()}
    assert parse_command(COMMANDS, f"chat public=yes {text}").options == {"public": True, "message": text.strip()}
    assert parse_command(COMMANDS, f"forget item {text}").search == ("item", text.strip())


def test_an_option_value_with_spaces_goes_in_quotes() -> None:
    persona = {"name": "persona", "type": STRING, "required": True}
    commands = [{"name": "settings", "options": [subcommand("persona", persona)]}]
    assert parse_command(commands, 'settings persona persona="A patient tutor" ').options == {
        "persona": "A patient tutor"
    }
    assert parse_command(commands, "settings persona You're a 'patient' tutor").options == {
        "persona": "You're a 'patient' tutor"
    }


def test_an_autocomplete_option_is_searched_not_filled() -> None:
    assert parse_command(COMMANDS, "forget item").search == ("item", "")
    searched = parse_command(COMMANDS, "forget item hiking trips")
    assert (searched.options, searched.search) == ({}, ("item", "hiking trips"))


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("dance", "there is no /dance"),
        ("forget", "/forget needs one of: item, everything"),
        ("chat", "/chat needs message"),
        ("settings max-minutes ten", "minutes must be a number"),
        ("settings calls maybe", "enabled is on or off"),
        ("hangup now", "/hangup takes no 'now'"),
        ("   ", "type a command"),
    ],
)
def test_what_the_bot_does_not_offer_is_explained(line: str, why: str) -> None:
    with pytest.raises(CommandError, match=why):
        parse_command(COMMANDS, line)


def test_discord_markup_reads_as_plain_text() -> None:
    when = int(datetime(2026, 3, 4, 12, 30).timestamp())
    assert plain(f"**Call ended.** *from a call, <t:{when}:d>* at <t:{when}:f>, 2*3*4 `/memory`") == (
        "Call ended. from a call, 2026-03-04 at 2026-03-04 12:30, 2*3*4 `/memory`"
    )
    embed = {"title": "Memory", "description": "Line one\nLine two", "fields": [{"name": "Facts", "value": "• a"}]}
    assert embed_text({**embed, "footer": {"text": "Page 1 of 1"}}) == [
        "MEMORY",
        "Line one",
        "Line two",
        "Facts:",
        "  • a",
        "— Page 1 of 1",
    ]


def bot_message(fake: FakeDiscord, message_id: str, components: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": message_id,
        "channel_id": fake.channel_id,
        "author": fake.bot_user(),
        "flags": 0,
        "content": f"message {message_id}",
        "embeds": [],
        "components": components,
    }


def test_buttons_and_menu_entries_are_numbered_and_renumbered_when_edited() -> None:
    fake, printed = FakeDiscord(), []
    screen = Screen(fake, printed.append)
    buttons = {
        "type": 1,
        "components": [
            {"type": 2, "custom_id": "yes", "label": "Remember me"},
            {"type": 2, "custom_id": "no", "label": "Not now", "disabled": True},
            {"type": 2, "url": "http://127.0.0.1:1/call/x", "label": "Open call page"},
        ],
    }
    menu = {"type": 1, "components": [{"type": 3, "custom_id": "pick", "options": [{"label": "A fact", "value": "7"}]}]}
    fake.messages["m1"] = bot_message(fake, "m1", [buttons, menu])
    assert screen.refresh() and not screen.refresh(), "a message is printed once until it changes"
    assert printed[-1].splitlines() == [
        "Bot (in #general):",
        "  message m1",
        "  [1] Remember me",
        "  [2] Not now (not available)",
        "  Open call page: http://127.0.0.1:1/call/x",
        "  Choose one:",
        "    [3] A fact",
    ]
    assert screen.choices == {
        1: Choice("m1", "yes", None),
        2: Choice("m1", "no", None),
        3: Choice("m1", "pick", ("7",)),
    }
    fake.messages["m1"]["content"] = "edited"
    fake.messages["m2"] = {**bot_message(fake, "m2", []), "flags": 1 << 7}  # still "thinking": not shown yet
    assert screen.refresh()
    assert printed[-1].startswith("Bot (in #general, updated):\n  edited\n  [4] Remember me")
    assert sorted(screen.choices) == [4, 5, 6], "the edited message's old numbers are gone"
    assert len(printed) == 2


def test_a_form_asks_each_field_and_keeps_what_enter_keeps() -> None:
    fake, printed = FakeDiscord(), []
    screen = Screen(fake, printed.append)
    fake.modals["fact:modal:1:9"] = {
        "title": "Edit what I remember",
        "custom_id": "fact:modal:1:9",
        "components": [
            {"type": 1, "components": [{"type": 4, "custom_id": "fact", "label": "Instead?", "value": "Old text"}]},
            {"type": 18, "label": "Why?", "component": {"type": 4, "custom_id": "why", "required": True}},
        ],
    }
    assert [f.label for f in form_fields(fake.modals["fact:modal:1:9"]["components"])] == ["Instead?", "Why?"]
    assert screen.refresh() and screen.form is not None
    assert printed[-1] == "Bot opened a form: Edit what I remember\n  Instead? (Enter keeps “Old text”), or cancel:"
    assert screen.answer("") is None, "Enter keeps the value shown"
    assert screen.answer("") is None and printed[-1] == "  Why? is needed; type it, or cancel:"
    assert screen.answer("It changed") == {"fact": "Old text", "why": "It changed"}
    assert screen.form is None and not screen.refresh(), "the same form is not asked again"


def test_the_scripted_llm_is_clearly_canned_and_quotes_only_the_members_lines() -> None:
    body = {"model": "m", "messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "Hi  there"}]}
    assert respond(body) == "(scripted reply, no real model) I heard: “Hi there” — my memory of you is empty so far"
    prompt = (
        "Existing facts (for duplicate_of and replaces only, NOT a source of facts):\n[4] You said: Hello.\n\n"
        "<transcript>\nASSISTANT: Hi! Good to hear from you.\nUSER: Hello.\nUSER: I teach chemistry.\n</transcript>"
    )
    reply = extraction_reply(prompt)
    assert '"duplicate_of": 4' in reply and '"evidence": "I teach chemistry."' in reply
    assert "Good to hear" not in reply


def test_the_scripted_agent_says_back_what_the_memory_message_holds() -> None:
    """The bot's own memory message (``bot.memory.block``), with quotes and apostrophes in what it holds."""
    block = BudgetedBlock(4000)
    block.add_fact(FactRecord(1, 7, 'Your cat is called "Miso".', None, None, T, T, T, 1))
    block.add_fact(FactRecord(2, 7, "You're learning Portuguese.", None, None, T, T, T + 1, 1))
    said = TurnRecord(9, 7, "c1", None, 1, "user", "My daughter's birthday is on 4 May.", T, "voice")
    body = {"messages": [{"role": "system", "content": block.render()}, {"role": "user", "content": "what's new?"}]}

    assert respond(body) == (
        "(scripted reply, no real model) I heard: “what's new?” — from my memory: “You're learning Portuguese.”; "
        '“Your cat is called "Miso".”'
    )
    lines_only = BudgetedBlock(4000)
    assert lines_only.add_turn(said)
    body["messages"][0]["content"] = lines_only.render()
    assert respond(body).endswith("— you told me before: “My daughter's birthday is on 4 May.”")


def test_demo_help_reads_as_plain_text() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "demo", "--help"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert "--port N" in shown and "--data DIR" in shown and "--no-setup" in shown
    assert "``" not in shown and "**" not in shown, shown
