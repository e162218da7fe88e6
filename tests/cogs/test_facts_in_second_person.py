"""A member reads what the bot remembers about them in the second person ("Your name is Noor"), not as notes about
a stranger ("The user's name is Noor"), wherever a command shows a fact: `/memory`, its **Forget…** picker and
**Edit a fact…** menu, `/forget item`'s suggestions and answers. What is stored, and what the agent reads, is
unchanged. SimCord runs the real command tree against the real store."""

from __future__ import annotations

import pytest

from bot.i18n import english
from standins.factories import seed_fact
from standins.harness import CallWorld

EDIT_PLACEHOLDER, UNCHANGED = english()("own.edit_placeholder"), english()("own.unchanged")

T0 = 1_780_000_000.0


def items(message) -> list[dict]:
    return [c for row in message.components for c in row["components"]]


def menu(message, placeholder: str) -> dict[str, str]:
    [select] = [c for c in items(message) if c["type"] == 3 and c.get("placeholder") == placeholder]
    return {o["label"]: o["value"] for o in select["options"]}


@pytest.fixture
def members(simcord_env):
    guild = simcord_env.create_guild()
    channel = guild.create_text_channel("general")
    alice = guild.add_member(simcord_env.create_user("alice"))
    return channel, alice


async def stored(world: CallWorld, user_id: int) -> list[str]:
    return sorted(f.text for f in await world.store.list_facts(user_id, include_superseded=True))


async def test_memory_shows_facts_in_the_second_person_and_stores_them_unchanged(
    simcord_env, world: CallWorld, members
) -> None:
    channel, alice = members
    await world.store.set_consent(alice.id, True, T0)
    old = await seed_fact(world.store, alice.id, "The user lives in Porto.", T0)
    await seed_fact(world.store, alice.id, "The user lives in Lisbon.", T0 + 1, replaces=[old.fact_id])
    await seed_fact(world.store, alice.id, "The user's name is Noor.", T0 + 2)
    await seed_fact(world.store, alice.id, "The user is learning Portuguese.", T0 + 3)
    await alice.slash(channel, "remember", text="They call me Noorie at work")

    panel = await alice.slash(channel, "memory")
    text = panel.response.embeds[0].description
    assert "• Your name is Noor. — *from a chat" in text
    assert "• You are learning Portuguese. — *from a chat" in text
    assert "• You live in Lisbon. — *from a chat" in text
    assert "• They call me Noorie at work — *told by you" in text, "a told fact reads as the member said it"
    assert "~~You live in Porto.~~ → replaced" in panel.response.embeds[0].fields[0].value
    assert "The user" not in text
    edit_labels = set(menu(panel.response, EDIT_PLACEHOLDER))
    assert edit_labels == {
        "Your name is Noor.",
        "You are learning Portuguese.",
        "You live in Lisbon.",
        "They call me Noorie at work",
    }

    [picker] = (await alice.click(panel.response, label="Forget…")).followups
    picked = menu(picker, "Choose one thing to forget")
    assert {"Your name is Noor.", "You live in Porto.", "They call me Noorie at work"} <= set(picked)
    assert not [label for label in picked if "The user" in label]

    assert await stored(world, alice.id) == [
        "The user is learning Portuguese.",
        "The user lives in Lisbon.",
        "The user lives in Porto.",
        "The user's name is Noor.",
        "They call me Noorie at work",
    ], "stored as the agent reads them"
    _call_id, agent_id = await world.start_member_call(alice.id)
    said_to_agent = "\n".join(m["content"] for m in world.emu.agent(agent_id).system_messages)
    assert "The user's name is Noor." in said_to_agent and "Your name is Noor" not in said_to_agent


async def test_forget_item_suggests_and_confirms_in_the_second_person(simcord_env, world: CallWorld, members) -> None:
    channel, alice = members
    name = await seed_fact(world.store, alice.id, "The user's name is Noor.", T0)
    await seed_fact(world.store, alice.id, "The user has a cat called Miso.", T0 + 1)

    choices = await alice.autocomplete(channel, "forget item", "item", "")
    assert [c["name"] for c in choices] == ["You have a cat called Miso.", "Your name is Noor."]
    assert await alice.autocomplete(channel, "forget item", "item", "your name") == [
        {"name": "Your name is Noor.", "value": str(name.fact_id)}
    ]
    assert [c["name"] for c in await alice.autocomplete(channel, "forget item", "item", "user's name")] == [
        "Your name is Noor."
    ], "the stored words still find it"

    asked = await alice.slash(channel, "forget item", item=str(name.fact_id))
    assert asked.response.content == "**Forget “Your name is Noor.”?** It can't be undone."
    done = await alice.click(asked.response, label="Forget it")
    assert done.response.content == "Forgot 1 fact: “Your name is Noor.”"
    assert await stored(world, alice.id) == ["The user has a cat called Miso."]


async def test_editing_a_fact_starts_from_the_second_person_and_sending_it_unchanged_keeps_it(
    simcord_env, world: CallWorld, members
) -> None:
    channel, alice = members
    await world.store.set_consent(alice.id, True, T0)
    await seed_fact(world.store, alice.id, "The user lives in Leeds.", T0)
    panel = await alice.slash(channel, "memory")

    opened = await alice.select(panel.response, [menu(panel.response, EDIT_PLACEHOLDER)["You live in Leeds."]])
    [field] = [c for row in opened.modal["components"] for c in row["components"]]
    assert field["value"] == "You live in Leeds."
    same = await alice.submit_modal(opened, {field["custom_id"]: "You live in Leeds."})
    assert same.response.content == UNCHANGED
    assert await stored(world, alice.id) == ["The user lives in Leeds."]

    opened = await alice.select(panel.response, [menu(panel.response, EDIT_PLACEHOLDER)["You live in Leeds."]])
    done = await alice.submit_modal(opened, {field["custom_id"]: "I moved to York in May"})
    assert done.response.content.startswith("Updated: “I moved to York in May”.")
    assert await stored(world, alice.id) == ["I moved to York in May", "The user lives in Leeds."]
    assert "~~You live in Leeds.~~ → replaced" in panel.response.embeds[0].fields[0].value
