"""/memory and /forget as a member meets them (SimCord runs the real command tree; the services and store are real).

Every test checks both what the member sees and what the store holds afterwards."""

from __future__ import annotations

import json
import logging

import pytest

from bot.memory.importer import Conversation, import_conversations
from bot.store.models import ChatRecord
from cogs._forget_ui import CONFIRM_SECONDS, PICKER_SECONDS
from cogs._memory_ui import MEMORY_VIEW_SECONDS
from standins.factories import extract, seed_fact, seed_summary
from standins.harness import CallWorld

DAY = 86400.0
T0 = 1_780_000_000.0
"""A fixed past instant, so Discord timestamps in replies can be asserted exactly."""


# ---- helpers ------------------------------------------------------------------------------------------------


def items(message) -> list[dict]:
    return [c for row in message.components for c in row["components"]]


def labels(message) -> list[str]:
    return [c["label"] for c in items(message) if c["type"] == 2]


def enabled(message, label: str) -> bool:
    return not next(c for c in items(message) if c.get("label") == label).get("disabled", False)


def text_of(embed) -> str:
    return "\n".join([embed.description or "", *(f"{f.name}\n{f.value}" for f in embed.fields)])


def stamp(ts: float) -> str:
    return f"<t:{int(ts)}:d>"


async def import_call(world: CallWorld, user_id: int, lines: list[tuple[str, str]], *, at: float) -> str:
    """A finished call, stored through the same merge path as a live call's history."""
    [call_id] = await import_conversations(world.store, world.memory, user_id, [Conversation(at, lines)])
    return call_id


async def add_chat(world: CallWorld, user_id: int, lines: list[tuple[str, str]], *, at: float) -> str:
    chat_id = f"chat-{user_id}-{int(at)}"
    await world.store.create_chat(ChatRecord(chat_id, user_id, None, False, at, at))
    for n, (role, content) in enumerate(lines):
        await world.store.append_chat_turn(chat_id, user_id, role, content, at + n)
    return chat_id


async def real_call(world: CallWorld, user_id: int, lines: list[tuple[str, str]]):
    """A call through Agora (the emulator): start, talk, hang up. Returns the agent."""
    started = await world.calls.start(user_id=user_id, guild_id=77)
    agent = world.emu.agent_by_label("call_id", started.call_id)
    world.emu.user_joined(agent.agent_id)
    world.emu.script(agent.agent_id, lines)
    await world.calls.hang_up(user_id)
    return started, agent


async def fact_texts(world: CallWorld, user_id: int) -> list[str]:
    return [f.text for f in await world.store.list_facts(user_id, include_superseded=True)]


@pytest.fixture
def members(simcord_env):
    guild = simcord_env.create_guild()
    channel = guild.create_text_channel("general")
    alice = guild.add_member(simcord_env.create_user("alice"))
    bob = guild.add_member(simcord_env.create_user("bob"))
    return channel, alice, bob


# ---- /memory ------------------------------------------------------------------------------------------------


async def test_empty_memory_says_how_it_builds_up(simcord_env, world: CallWorld, members) -> None:
    channel, alice, _ = members
    shown = await alice.slash(channel, "memory")
    assert shown.ephemeral
    embed = shown.response.embeds[0]
    assert "Start a `/call` or talk to me with `/chat` — what you tell me shows up here" in embed.description
    assert "Memory is **not on yet**: your next `/call` or `/chat` asks whether I may remember you" in (
        embed.description
    )
    assert embed.footer.text.startswith("Page 1 of 1")
    assert labels(shown.response) == ["◀", "▶", "Export", "Remember me", "Forget…"]
    assert not enabled(shown.response, "◀") and not enabled(shown.response, "▶")
    assert not enabled(shown.response, "Forget…")
    assert await world.store.count_facts(alice.id) == 0


async def test_memory_shows_facts_with_sources_history_and_conversations(
    simcord_env, world: CallWorld, members
) -> None:
    channel, alice, bob = members
    call_id = await import_call(
        world, alice.id, [("user", "I moved to Ghent last spring."), ("assistant", "Nice!")], at=T0
    )
    chat_id = await add_chat(
        world, alice.id, [("user", "Recommend a *cosy* book?"), ("assistant", "Sure.")], at=T0 + DAY
    )
    await seed_summary(world.store, "Book recommendations for winter.", chat_id=chat_id)
    old = await seed_fact(world.store, alice.id, "Lives in Antwerp", T0 - DAY, call_id=call_id)
    await seed_fact(world.store, alice.id, "Lives in Ghent", T0, call_id=call_id, replaces=[old.fact_id])
    await seed_fact(world.store, alice.id, "Likes cosy books", T0 + DAY, chat_id=chat_id)
    await seed_fact(world.store, bob.id, "Bob's secret hobby", T0)

    shown = await alice.slash(channel, "memory")
    text = text_of(shown.response.embeds[0])
    assert f"Lives in Ghent — *from a call, {stamp(T0)}*" in text
    assert f"Likes cosy books — *from a chat, {stamp(T0 + DAY)}*" in text
    assert f"~~Lives in Antwerp~~ → replaced on {stamp(T0)}" in text  # when the new fact was learned
    assert f"**Call** · {stamp(T0)} · 2 lines\n> I moved to Ghent last spring." in text
    assert f"**Chat** · {stamp(T0 + DAY)} · 2 lines\n> Book recommendations for winter." in text
    assert "Bob" not in text
    assert enabled(shown.response, "Forget…")


async def test_pages_move_with_the_arrow_buttons(simcord_env, world: CallWorld, members) -> None:
    channel, alice, _ = members
    for n in range(20):  # 8 per page: three pages, newest first
        await seed_fact(world.store, alice.id, f"Fact number {n:02d}", T0 + n)
    shown = await alice.slash(channel, "memory")
    first = shown.response.embeds[0]
    assert first.footer.text.startswith("Page 1 of 3") and "Fact number 19" in first.description
    assert not enabled(shown.response, "◀") and enabled(shown.response, "▶")

    await alice.click(shown.response, label="▶")
    second = shown.response.embeds[0]
    assert second.footer.text.startswith("Page 2 of 3")
    assert "Fact number 11" in second.description and "Fact number 19" not in second.description
    await alice.click(shown.response, label="▶")
    third = shown.response.embeds[0]
    assert third.footer.text.startswith("Page 3 of 3") and "Fact number 00" in third.description
    assert not enabled(shown.response, "▶") and enabled(shown.response, "◀")

    await alice.click(shown.response, label="◀")
    assert shown.response.embeds[0].footer.text.startswith("Page 2 of 3")
    assert await world.store.count_facts(alice.id) == 20


async def test_export_sends_the_json_file_privately(simcord_env, world: CallWorld, members) -> None:
    channel, alice, bob = members
    call_id = await import_call(world, alice.id, [("user", "My cat is called Miso.")], at=T0)
    await seed_fact(world.store, alice.id, "Has a cat called Miso", T0, call_id=call_id)
    await seed_fact(world.store, bob.id, "Bob's secret hobby", T0)
    shown = await alice.slash(channel, "memory")

    exported = await alice.click(shown.response, label="Export")
    [message] = exported.followups
    assert message.ephemeral and message.content.startswith("Here is everything I remember about you")
    [attachment] = message.attachments
    assert attachment.filename == f"memory-{alice.id}.json"
    data = json.loads(await attachment.read())
    assert data["user_id"] == str(alice.id)
    assert [f["text"] for f in data["facts"]] == ["Has a cat called Miso"]
    assert [c["id"] for c in data["calls"]] == [call_id]
    assert data["calls"][0]["turns"][0]["content"] == "My cat is called Miso."
    assert "Bob" not in json.dumps(data)


async def test_pause_then_resume_memory(simcord_env, world: CallWorld, members) -> None:
    channel, alice, _ = members
    await world.store.set_consent(alice.id, True, world.clock())
    await real_call(world, alice.id, [("user", "I only drink oat milk."), ("assistant", "Noted.")])
    shown = await alice.slash(channel, "memory")

    await alice.click(shown.response, label="Pause memory")
    assert (await world.store.get_user(alice.id)).memory_enabled is False
    assert "Memory is **paused**" in shown.response.embeds[0].description
    assert "Resume memory" in labels(shown.response) and "Pause memory" not in labels(shown.response)
    paused_call, agent = await real_call(world, alice.id, [("user", "Keep this one to yourself.")])
    assert len(agent.system_messages) == 1  # persona only: nothing injected
    assert "oat milk" not in json.dumps(agent.system_messages)
    assert await world.store.call_turns(paused_call.call_id) == []  # nothing remembered

    await alice.click(shown.response, label="Resume memory")
    assert (await world.store.get_user(alice.id)).memory_enabled is True
    assert "Memory is **on**" in shown.response.embeds[0].description
    assert "Pause memory" in labels(shown.response)
    _, agent = await real_call(world, alice.id, [("user", "Hello again.")])
    assert "I only drink oat milk." in agent.system_messages[1]["content"]


async def test_memory_panel_disables_its_buttons_when_it_times_out(simcord_env, world: CallWorld, members) -> None:
    channel, alice, _ = members
    await seed_fact(world.store, alice.id, "Plays the cello", T0)
    shown = await alice.slash(channel, "memory")
    await simcord_env.advance_time(MEMORY_VIEW_SECONDS + 1)
    assert all(c.get("disabled") for c in items(shown.response))
    assert "Plays the cello" in shown.response.embeds[0].description


async def test_a_panel_used_late_still_disables_itself_after_the_first_token_expired(
    simcord_env, world: CallWorld, members
) -> None:
    channel, alice, _ = members
    await seed_fact(world.store, alice.id, "Plays the cello", T0)
    shown = await alice.slash(channel, "memory")
    await simcord_env.advance_time(MEMORY_VIEW_SECONDS - 60)
    [picker] = (await alice.click(shown.response, label="Forget…")).followups
    await simcord_env.advance_time(PICKER_SECONDS + 1)
    assert all(c.get("disabled") for c in items(picker))
    assert enabled(shown.response, "Export")
    await simcord_env.advance_time(MEMORY_VIEW_SECONDS)  # the /memory token itself is long expired by now
    assert all(c.get("disabled") for c in items(shown.response))
    assert await world.store.count_facts(alice.id) == 1


async def test_long_and_markdown_heavy_memory_still_fits_one_embed(simcord_env, world: CallWorld, members) -> None:
    channel, alice, _ = members
    call_id = await import_call(world, alice.id, [("user", "*_~" * 400)] * 3, at=T0)
    for n in range(20):
        old = await seed_fact(world.store, alice.id, f"{n} " + "*_`|" * 300, T0 + n, call_id=call_id)
        replaces = [old.fact_id] if n < 10 else []
        await seed_fact(world.store, alice.id, f"{n} " + "~>" * 500, T0 + n, call_id=call_id, replaces=replaces)
    shown = await alice.slash(channel, "memory")
    embed = shown.response.embeds[0]
    assert len(embed.description) <= 4096 and len(embed) <= 6000
    assert all(len(f.value) <= 1024 for f in embed.fields)
    assert embed.footer.text.startswith("Page 1 of 4")


async def test_forget_button_picks_one_item_then_everything(simcord_env, world: CallWorld, members) -> None:
    channel, alice, bob = members
    call_id = await import_call(world, alice.id, [("user", "I love hiking in the Alps.")], at=T0)
    await seed_fact(world.store, alice.id, "Loves hiking", T0, call_id=call_id)
    await seed_fact(world.store, alice.id, "Plays the cello", T0 + 1, call_id=call_id)
    await seed_fact(world.store, bob.id, "Bob's secret hobby", T0)
    shown = await alice.slash(channel, "memory")

    [picker] = (await alice.click(shown.response, label="Forget…")).followups
    assert picker.ephemeral
    menu = next(c for c in items(picker) if c["type"] == 3)
    values = {o["label"]: o["value"] for o in menu["options"]}
    assert set(values) == {"Plays the cello", "Loves hiking", "Call of 2026-05-28 · 1 line"}
    asked = await alice.select(picker, [values["Plays the cello"]])
    assert asked.response.content == "**Forget “Plays the cello”?** It can't be undone."
    done = await alice.click(asked.response, label="Forget it")
    assert done.response.content == "Forgot 1 fact: “Plays the cello”" and done.response.components == []
    assert await fact_texts(world, alice.id) == ["Loves hiking"]
    assert "Plays the cello" not in shown.response.embeds[0].description  # the panel was refreshed

    [picker] = (await alice.click(shown.response, label="Forget…")).followups
    confirm = await alice.click(picker, label="Forget everything…")
    assert "Forget everything?" in confirm.response.content
    done = await alice.click(confirm.response, label="Forget everything")
    assert done.response.content.startswith("Forgot everything: 1 call, 0 chats, 1 line, 1 fact.")
    assert "Start a `/call`" in shown.response.embeds[0].description
    assert await world.store.count_facts(alice.id, include_superseded=True) == 0
    assert await world.store.get_call(call_id) is None
    assert await fact_texts(world, bob.id) == ["Bob's secret hobby"]


# ---- /forget item -------------------------------------------------------------------------------------------


async def test_forget_item_offers_only_your_current_facts(simcord_env, world: CallWorld, members, caplog) -> None:
    caplog.set_level(logging.INFO)
    channel, alice, bob = members
    old = await seed_fact(world.store, alice.id, "Likes tea", T0)
    new = await seed_fact(world.store, alice.id, "Likes oat milk lattes", T0 + 1, replaces=[old.fact_id])
    ghent = await seed_fact(world.store, alice.id, "Lives in Ghent " + "and talks a lot " * 10, T0 + 3)
    bobs = await seed_fact(world.store, bob.id, "Bob likes hidden things", T0)

    choices = await alice.autocomplete(channel, "forget item", "item", "")
    assert {c["value"] for c in choices} == {str(new.fact_id), str(ghent.fact_id)}
    assert all(len(c["name"]) <= 100 for c in choices)
    assert await alice.autocomplete(channel, "forget item", "item", "LIKES") == [
        {"name": "Likes oat milk lattes", "value": str(new.fact_id)}
    ]

    asked = await alice.slash(channel, "forget item", item=str(new.fact_id))
    assert asked.ephemeral
    done = await alice.click(asked.response, label="Forget it")
    assert done.response.content == "Forgot 1 fact: “Likes oat milk lattes”"
    assert await world.store.get_fact(new.fact_id) is None
    assert await world.store.get_fact(bobs.fact_id) is not None
    await world.memory.wait_scrubbed()
    assert "oat milk" not in caplog.text and "Ghent" not in caplog.text  # memory text never reaches the logs


async def test_autocomplete_lists_at_most_25(simcord_env, world: CallWorld, members) -> None:
    channel, alice, _ = members
    for n in range(30):
        await seed_fact(world.store, alice.id, f"Fact {n}", T0 + n)
    assert len(await alice.autocomplete(channel, "forget item", "item", "")) == 25
    assert [c["name"] for c in await alice.autocomplete(channel, "forget item", "item", "fact 2")] == [
        "Fact 29",
        "Fact 28",
        "Fact 27",
        "Fact 26",
        "Fact 25",
        "Fact 24",
        "Fact 23",
        "Fact 22",
        "Fact 21",
        "Fact 20",
        "Fact 2",
    ]


async def test_forged_ids_of_another_member_delete_nothing(simcord_env, world: CallWorld, members) -> None:
    channel, alice, bob = members
    bob_fact = await seed_fact(world.store, bob.id, "Bob's secret hobby", T0)
    bob_call = await import_call(world, bob.id, [("user", "Bob's private call")], at=T0)
    bob_chat = await add_chat(world, bob.id, [("user", "Bob's private chat")], at=T0)
    for command, option, value in [
        ("forget item", "item", str(bob_fact.fact_id)),
        ("forget item", "item", "not-a-number"),
        ("forget item", "item", "99999999999999999999999"),
        ("forget call", "call", f"call:{bob_call}"),
        ("forget call", "call", f"chat:{bob_chat}"),
        ("forget call", "call", "garbage"),
    ]:
        result = await alice.slash(channel, command, **{option: value})
        assert result.ephemeral
        assert result.response.content.startswith("I couldn't find that in your memory")
    assert await world.store.get_fact(bob_fact.fact_id) is not None
    assert len(await world.store.call_turns(bob_call)) == 1
    assert len(await world.store.chat_turns(bob_chat)) == 1
    assert await world.store.count_conversations(bob.id) == 2


# ---- /forget call -------------------------------------------------------------------------------------------


async def test_forget_call_removes_its_lines_and_the_facts_only_it_taught(
    simcord_env, world: CallWorld, members
) -> None:
    channel, alice, bob = members
    lines = [("user" if n % 2 == 0 else "assistant", f"Line {n} about gardening") for n in range(24)]
    first = await import_call(world, alice.id, lines, at=T0)
    second = await import_call(world, alice.id, [("user", "Tomatoes again!")], at=T0 + DAY)
    chat = await add_chat(world, alice.id, [("user", "Quick question about basil")], at=T0 + 2 * DAY)
    await seed_fact(world.store, alice.id, "Grows tomatoes", T0, call_id=first)
    await seed_fact(world.store, alice.id, "Has a balcony", T0, call_id=first)
    shared = await seed_fact(world.store, alice.id, "Loves gardening", T0, call_id=first)
    await extract(world.store, alice.id, T0 + DAY, call_id=second, confirmed=[shared.fact_id])
    await import_call(world, bob.id, [("user", "Bob's gardening call")], at=T0)

    choices = await alice.autocomplete(channel, "forget call", "call", "")
    assert [c["value"] for c in choices] == [f"chat:{chat}", f"call:{second}", f"call:{first}"]
    assert choices[2]["name"] == "Call 2026-05-28 · 24 lines · Line 0 about gardening / Line 2 about gardening"
    assert [c["value"] for c in await alice.autocomplete(channel, "forget call", "call", "basil")] == [f"chat:{chat}"]

    asked = await alice.slash(channel, "forget call", call=f"call:{first}")
    assert asked.ephemeral
    assert asked.response.content == (
        f"**Forget your call of {stamp(T0)}?**\n"
        "This deletes 24 lines and 2 facts that came only from it. It can't be undone."
    )
    assert labels(asked.response) == ["Forget this call", "Cancel"]
    assert len(await world.store.call_turns(first)) == 24, "nothing goes before the member confirms"
    await alice.click(asked.response, label="Forget this call")
    assert asked.response.content == f"Forgot your call of {stamp(T0)}: 24 lines and 2 facts that came only from it."
    assert asked.response.components == []
    assert await world.store.get_call(first) is None and await world.store.call_turns(first) == []
    assert await fact_texts(world, alice.id) == ["Loves gardening"]
    assert len(await world.store.call_turns(second)) == 1

    asked = await alice.slash(channel, "forget call", call=f"chat:{chat}")
    assert "This deletes 1 line. It can't be undone." in asked.response.content
    await alice.click(asked.response, label="Forget this chat")
    assert asked.response.content == f"Forgot your chat of {stamp(T0 + 2 * DAY)}: 1 line."
    assert await world.store.get_chat(chat) is None
    await world.memory.wait_scrubbed()
    assert await world.store.count_conversations(alice.id) == 1
    assert await world.store.count_conversations(bob.id) == 1


async def test_forget_call_cancelled_or_left_to_expire_keeps_everything(simcord_env, world: CallWorld, members) -> None:
    channel, alice, _ = members
    lines = [("user", "I keep bees."), ("assistant", "How many hives?"), ("user", "Three.")]
    call_id = await import_call(world, alice.id, lines, at=T0)
    await seed_fact(world.store, alice.id, "Keeps bees", T0, call_id=call_id)

    asked = await alice.slash(channel, "forget call", call=f"call:{call_id}")
    assert "This deletes 3 lines and 1 fact that came only from it." in asked.response.content
    await alice.click(asked.response, label="Cancel")
    assert asked.response.content == "Cancelled: nothing was forgotten." and asked.response.components == []

    asked = await alice.slash(channel, "forget call", call=f"call:{call_id}")
    await simcord_env.advance_time(CONFIRM_SECONDS + 1)
    assert asked.response.content.startswith("This confirmation expired, so nothing was forgotten.")
    assert all(c.get("disabled") for c in items(asked.response))
    assert len(await world.store.call_turns(call_id)) == 3
    assert await fact_texts(world, alice.id) == ["Keeps bees"]


async def test_the_picker_asks_before_forgetting_a_call(simcord_env, world: CallWorld, members) -> None:
    channel, alice, _ = members
    call_id = await import_call(world, alice.id, [("user", "I keep bees.")], at=T0)
    await seed_fact(world.store, alice.id, "Keeps bees", T0, call_id=call_id)
    shown = await alice.slash(channel, "memory")
    [picker] = (await alice.click(shown.response, label="Forget…")).followups
    menu = next(c for c in items(picker) if c["type"] == 3)
    [value] = [o["value"] for o in menu["options"] if o["value"].startswith("call:")]

    asked = await alice.select(picker, [value])
    assert asked.response.content.startswith(f"**Forget your call of {stamp(T0)}?**")
    assert len(await world.store.call_turns(call_id)) == 1
    await alice.click(asked.response, label="Forget this call")
    assert asked.response.content == f"Forgot your call of {stamp(T0)}: 1 line and 1 fact that came only from it."
    assert await world.store.get_call(call_id) is None and await fact_texts(world, alice.id) == []
    assert "📞" not in (shown.response.embeds[0].description or ""), "the panel was refreshed"
    assert "Your calls and chats" not in "".join(f.name for f in shown.response.embeds[0].fields)


async def test_a_running_call_cannot_be_forgotten_mid_call(simcord_env, world: CallWorld, members) -> None:
    channel, alice, _ = members
    await world.store.set_consent(alice.id, True, world.clock())
    started = await world.calls.start(user_id=alice.id, guild_id=77)
    result = await alice.slash(channel, "forget call", call=f"call:{started.call_id}")
    assert "still going" in result.response.content
    assert (await world.store.get_call(started.call_id)).state in ("starting", "active")


# ---- /forget everything -------------------------------------------------------------------------------------


async def seed_everything(world: CallWorld, alice, bob) -> None:
    calls = [
        await import_call(world, alice.id, [("user", f"Call {n} line {i}") for i in range(40)], at=T0 + n * DAY)
        for n in range(3)
    ]
    await add_chat(world, alice.id, [("user", "hi"), ("assistant", "hello")], at=T0 + 5 * DAY)
    for n in range(9):
        await seed_fact(world.store, alice.id, f"Alice fact {n}", T0 + n, call_id=calls[n % 3])
    await seed_fact(world.store, bob.id, "Bob's secret hobby", T0)


async def test_forget_everything_after_confirmation(simcord_env, world: CallWorld, members) -> None:
    channel, alice, bob = members
    await seed_everything(world, alice, bob)
    prompt = await alice.slash(channel, "forget everything")
    assert prompt.ephemeral
    assert "Forget everything?" in prompt.response.content
    assert "(9 facts, 4 calls and chats)" in prompt.response.content
    assert labels(prompt.response) == ["Forget everything", "Cancel"]

    await alice.click(prompt.response, label="Forget everything")
    assert prompt.response.content.startswith("Forgot everything: 3 calls, 1 chat, 122 lines, 9 facts.")
    assert prompt.response.components == []
    await world.memory.wait_scrubbed()
    assert await world.store.count_facts(alice.id, include_superseded=True) == 0
    assert await world.store.count_conversations(alice.id) == 0
    assert await world.store.count_turns(alice.id) == 0
    assert await world.store.get_user(alice.id) is None
    assert await fact_texts(world, bob.id) == ["Bob's secret hobby"]
    assert "your next `/call` asks again whether I may remember you" in prompt.response.content
    again = await alice.slash(channel, "memory")
    shown = again.response.embeds[0].description
    assert "Start a `/call`" in shown
    assert "Memory is **not on yet**: your next `/call` or `/chat` asks" in shown and "**on**:" not in shown
    await alice.click(again.response, label="Remember me")
    assert (await world.store.get_user(alice.id)).consent == "remember"
    assert "Memory is **on**" in again.response.embeds[0].description
    card = await alice.slash(channel, "call")
    assert "Your call is ready" in card.response.content, "chosen in /memory: the call does not ask again"


async def test_forget_everything_cancelled_keeps_everything(simcord_env, world: CallWorld, members) -> None:
    channel, alice, bob = members
    await seed_everything(world, alice, bob)
    prompt = await alice.slash(channel, "forget everything")
    await alice.click(prompt.response, label="Cancel")
    assert prompt.response.content == "Cancelled: nothing was forgotten."
    assert prompt.response.components == []
    assert await world.store.count_facts(alice.id) == 9
    assert await world.store.count_turns(alice.id) == 122


async def test_forget_everything_times_out_safely(simcord_env, world: CallWorld, members) -> None:
    channel, alice, bob = members
    await seed_everything(world, alice, bob)
    prompt = await alice.slash(channel, "forget everything")
    await simcord_env.advance_time(CONFIRM_SECONDS + 1)
    assert "expired, so nothing was forgotten" in prompt.response.content
    assert labels(prompt.response) == ["Forget everything", "Cancel"]
    assert all(c.get("disabled") for c in items(prompt.response))
    assert await world.store.count_facts(alice.id) == 9
    assert await world.store.count_conversations(alice.id) == 4


async def test_pause_pressed_during_a_running_call_stops_recording_it_at_once(
    simcord_env, world: CallWorld, members
) -> None:
    channel, alice, _ = members
    await world.store.set_consent(alice.id, True, world.clock())
    started = await world.calls.start(user_id=alice.id, guild_id=77)
    agent = world.emu.agent_by_label("call_id", started.call_id)
    world.emu.user_joined(agent.agent_id)
    world.emu.script(agent.agent_id, [("user", "I only drink oat milk."), ("assistant", "Noted.")])
    assert await world.calls.checkpoint(started.call_id)

    shown = await alice.slash(channel, "memory")
    await alice.click(shown.response, label="Pause memory")
    assert "Memory is **paused**" in shown.response.embeds[0].description
    world.emu.script(agent.agent_id, [("user", "My bank PIN is zqx9137."), ("assistant", "I won't keep that.")])
    assert await world.calls.checkpoint(started.call_id)
    await world.calls.hang_up(alice.id)
    await world.emu.wait_webhooks_idle()

    said = [t.content for t in await world.store.call_turns(started.call_id)]
    assert "I only drink oat milk." in said
    assert not [line for line in said if "zqx9137" in line or line == "I won't keep that."]
    assert "zqx9137" not in json.dumps(await world.memory.export(alice.id))


async def test_a_click_keeps_the_panel_alive_for_another_full_timeout(simcord_env, world: CallWorld, members) -> None:
    channel, alice, _ = members
    for n in range(10):
        await seed_fact(world.store, alice.id, f"Fact number {n:02d}", T0 + n)
    shown = await alice.slash(channel, "memory")
    await simcord_env.advance_time(MEMORY_VIEW_SECONDS - 60)

    await alice.click(shown.response, label="▶")
    await simcord_env.advance_time(120)  # past the first timeout, within the one the click started
    assert enabled(shown.response, "◀") and enabled(shown.response, "Export")

    await simcord_env.advance_time(MEMORY_VIEW_SECONDS)
    assert all(c.get("disabled") for c in items(shown.response))
