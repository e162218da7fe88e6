"""Buttons a member can still press keep working after the bot restarts (a new bot instance, new services over the
same database, and the messages the old one sent): Remember me, Hang up, the /memory panel and its Forget…
picker, Export, Cancel and the confirmations."""

from __future__ import annotations

import json
from types import SimpleNamespace

import discord
import pytest

from bot.app import Services
from bot.client import EXTENSIONS
from bot.i18n import english
from bot.memory.postcall import PostCallProcessor
from bot.store.models import FactRecord
from cogs._consent import ChoiceButton
from cogs._forget_ui import CancelButton, ConfirmEverythingButton
from cogs._own_words import EditButton, edit_menu
from cogs.calls import HangUpButton
from standins.factories import seed_fact
from standins.harness import CallWorld
from tests.cogs.conftest import SimBot

T0 = 1_780_000_000.0


def items(message) -> list[dict]:
    return [c for row in message.components for c in row["components"]]


async def restart(simcord_env, world: CallWorld, services: Services) -> SimBot:
    """What a restart leaves: the database and the messages on Discord. Everything in memory is new."""
    calls = await world.restart()
    fresh = Services(
        settings=services.settings,
        store=services.store,
        memory=services.memory,
        agora=services.agora,
        calls=calls,
        llm=services.llm,
        chat=services.chat,
        postcall=services.postcall,
    )
    bot = SimBot(fresh)
    bot.extensions_to_load = EXTENSIONS
    await simcord_env.restart_bot(bot)
    return bot


async def test_hang_up_on_a_card_sent_before_a_restart_ends_the_call(
    simcord_env, world: CallWorld, services: Services, member
) -> None:
    _, channel, alice = member
    await world.store.set_consent(alice.id, True, world.clock())
    card = (await alice.slash(channel, "call")).response
    assert "Your call is ready" in card.content
    call = await world.store.open_call_for_user(alice.id)
    assert call is not None and call.state == "active"

    await restart(simcord_env, world, services)
    await alice.click(card, label="Hang up")

    ended = await world.store.get_call(call.call_id)
    assert (ended.state, ended.end_reason) == ("ended", "hangup_button")
    assert world.emu.agent(call.agent_id).status == "STOPPED"
    assert card.content.startswith("**Call ended.**") and card.components == []


async def test_remember_me_pressed_after_a_restart_saves_the_choice_and_starts_the_call(
    simcord_env, world: CallWorld, services: Services, member
) -> None:
    _, channel, alice = member
    prompt = (await alice.slash(channel, "call")).response
    assert "may the agent remember you" in prompt.content
    assert await world.store.open_call_for_user(alice.id) is None

    await restart(simcord_env, world, services)
    await alice.click(prompt, label="Remember me")

    user = await world.store.get_user(alice.id)
    assert user is not None and user.consent == "remember"
    call = await world.store.open_call_for_user(alice.id)
    assert call is not None and call.state == "active" and not call.private
    assert "Your call is ready" in prompt.content


async def test_the_memory_panel_pages_and_exports_after_a_restart(
    simcord_env, world: CallWorld, services: Services, member
) -> None:
    _, channel, alice = member
    for n in range(12):
        await seed_fact(world.store, alice.id, f"Fact number {n:02d}", T0 + n)
    shown = await alice.slash(channel, "memory")

    await restart(simcord_env, world, services)
    await alice.click(shown.response, label="▶")
    assert shown.response.embeds[0].footer.text.startswith("Page 2 of 2")
    exported = await alice.click(shown.response, label="Export")

    [message] = exported.followups
    data = json.loads(await message.attachments[0].read())
    assert len(data["facts"]) == 12


async def test_forget_picker_and_confirmation_work_after_a_restart(
    simcord_env, world: CallWorld, services: Services, member
) -> None:
    _, channel, alice = member
    await seed_fact(world.store, alice.id, "Plays the cello", T0)
    await seed_fact(world.store, alice.id, "Grows tomatoes", T0 + 1)
    shown = await alice.slash(channel, "memory")
    [picker] = (await alice.click(shown.response, label="Forget…")).followups
    confirm = await alice.slash(channel, "forget everything")

    await restart(simcord_env, world, services)
    menu = next(c for c in items(picker) if c["type"] == 3)
    cello = next(o["value"] for o in menu["options"] if o["label"] == "Plays the cello")
    asked = await alice.select(picker, [cello])
    await restart(simcord_env, world, services)
    done = await alice.click(asked.response, label="Forget it")
    assert done.response.content == "Forgot 1 fact: “Plays the cello”"
    assert [f.text for f in await world.store.list_facts(alice.id)] == ["Grows tomatoes"]

    await alice.click(confirm.response, label="Cancel")
    assert confirm.response.content == "Cancelled: nothing was forgotten."
    assert await world.store.count_facts(alice.id) == 1

    again = await alice.slash(channel, "forget everything")
    await restart(simcord_env, world, services)
    await alice.click(again.response, label="Forget everything")
    assert again.response.content.startswith("Forgot everything")
    assert await world.store.count_facts(alice.id) == 0


async def test_forget_call_is_confirmed_after_a_restart(
    simcord_env, world: CallWorld, services: Services, member
) -> None:
    _, channel, alice = member
    await world.store.set_consent(alice.id, True, T0)
    call_id, _agent_id = await world.start_member_call(alice.id)
    await world.calls.hang_up(alice.id)
    asked = await alice.slash(channel, "forget call", call=f"call:{call_id}")
    assert "**Forget your call of" in asked.response.content

    await restart(simcord_env, world, services)
    await alice.click(asked.response, label="Forget this call")
    assert asked.response.content.startswith("Forgot your call of")
    assert await world.store.get_call(call_id) is None


async def test_a_fact_is_edited_from_a_panel_shown_before_a_restart(
    simcord_env, world: CallWorld, services: Services, member
) -> None:
    """No live panel holds the text: the menu reads the fact first, then an **Edit** button opens the modal."""
    _, channel, alice = member
    await world.store.set_consent(alice.id, True, T0)
    fact = await seed_fact(world.store, alice.id, "Lives in York", T0)
    shown = await alice.slash(channel, "memory")

    await restart(simcord_env, world, services)
    asked = await alice.select(shown.response, [str(fact.fact_id)])
    assert asked.ephemeral and asked.modal is None
    assert asked.response.content.startswith("**Edit “Lives in York”?**")
    await restart(simcord_env, world, services)
    again = await alice.click(asked.response, label="Edit")
    assert again.modal is None and again.response.content.startswith("**Edit “Lives in York”?**")
    opened = await alice.click(again.response, label="Edit")
    assert opened.modal is not None
    done = await alice.submit_modal(opened, {"fact": "Lives in Leeds"})

    assert done.response.content.startswith("Updated: “Lives in Leeds”.")
    assert [f.text for f in await world.store.list_facts(alice.id)] == ["Lives in Leeds"]
    assert [f.text for f in await world.store.list_facts(alice.id, superseded_only=True)] == ["Lives in York"]


class _Response:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bool]] = []

    async def send_message(self, content: str, *, ephemeral: bool = False) -> None:
        self.sent.append((content, ephemeral))


@pytest.mark.parametrize(
    "control",
    [
        HangUpButton.make("0" * 32, 1, english()),
        ChoiceButton.make(1, "call", remember=True, label="Remember me"),
        ConfirmEverythingButton.make(1, english()),
        CancelButton.make(1, english()),
        EditButton.make(1, 7, english()),
        edit_menu(1, [FactRecord(7, 1, "Lives in York", None, None, T0, T0, T0, 1)], english()),
    ],
)
async def test_a_control_answers_only_its_owner(control) -> None:
    """The custom_id carries the owner; anyone else is told so privately and nothing runs."""
    match = control.template.fullmatch(control.custom_id)
    rebuilt = await type(control).from_custom_id(None, control.item, match)  # type: ignore[arg-type]
    english_locale = discord.Locale.american_english
    stranger = SimpleNamespace(user=SimpleNamespace(id=2), response=_Response(), locale=english_locale)
    owner = SimpleNamespace(user=SimpleNamespace(id=1), response=_Response(), locale=english_locale)

    assert await rebuilt.interaction_check(stranger) is False
    assert stranger.response.sent and stranger.response.sent[0][1] is True
    assert "someone else" in stranger.response.sent[0][0]
    assert await rebuilt.interaction_check(owner) is True and owner.response.sent == []


async def test_a_chat_memory_choice_after_a_restart_is_saved_and_asks_for_the_message_again(
    simcord_env, world: CallWorld, services: Services, member
) -> None:
    _, channel, alice = member
    prompt = (await alice.slash(channel, "chat", message="Hello there")).response
    assert "may the agent remember you" in prompt.content

    await restart(simcord_env, world, services)
    await alice.click(prompt, label="Without memory")

    user = await world.store.get_user(alice.id)
    assert user is not None and user.consent == "no_memory"
    assert "please send your message again" in prompt.content and prompt.components == []


async def test_what_was_learned_reaches_a_card_shown_before_a_restart(
    simcord_env, world: CallWorld, services: Services, fake_llm, member
) -> None:
    """The post-call job may run in a restarted process (or another one): it still updates the member's card."""
    _, channel, alice = member
    await world.store.set_consent(alice.id, True, world.clock())
    card = (await alice.slash(channel, "call")).response
    call = await world.store.open_call_for_user(alice.id)
    world.emu.user_joined(call.agent_id)
    world.emu.script(call.agent_id, [("user", "I keep bees on my balcony."), ("assistant", "How lovely!")])
    await alice.click(card, label="Hang up")
    assert "will appear in `/memory` shortly" in card.content

    bot = await restart(simcord_env, world, services)
    postcall = PostCallProcessor(
        world.store, services.llm, clock=world.clock, on_processed=bot.services.notify_processed
    )
    fake_llm.queue_reply(
        json.dumps(
            {
                "summary": "The member talked about bees.",
                "facts": [
                    {
                        "text": "The user keeps bees on their balcony.",
                        "evidence": "I keep bees on my balcony",
                        "replaces": [],
                        "duplicate_of": None,
                    }
                ],
            }
        )
    )
    world.clock.advance(60)
    assert await postcall.run_once()
    await simcord_env.settle()
    assert "learned 1 new thing about you" in card.content
