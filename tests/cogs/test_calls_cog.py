"""/call and /hangup as a member meets them (SimCord runs the real command tree; the services are real)."""

from __future__ import annotations

import asyncio
import json

import httpx

from bot.calls.errors import CallAlreadyActive, CallsDisabled, NoActiveCall, QuotaReached, VoiceUnavailable
from bot.calls.model import CallEnded
from standins.harness import CallWorld


def buttons(message) -> list[dict]:
    return [c for row in message.components for c in row["components"]]


def link_of(message) -> str:
    return next(b["url"] for b in buttons(message) if b.get("url"))


async def remembered_call(simcord_env, world: CallWorld, channel, alice):
    first = await alice.slash(channel, "call")
    return await alice.click(first.response, label="Remember me")


async def test_first_call_asks_for_consent_before_anything_is_stored(simcord_env, world: CallWorld, member) -> None:
    _, channel, alice = member
    result = await alice.slash(channel, "call")
    assert result.ephemeral
    assert "may the agent remember you" in result.response.content
    assert "/forget" in result.response.content and "/memory" in result.response.content
    assert [b["label"] for b in buttons(result.response)] == ["Remember me", "Call without memory"]
    assert await world.store.get_user(alice.id) is None
    assert world.emu.agents == {}


async def test_remember_me_starts_the_call_and_shows_the_card(simcord_env, world: CallWorld, member) -> None:
    _, channel, alice = member
    card = await remembered_call(simcord_env, world, channel, alice)
    assert card.response.ephemeral
    assert "Your call is ready" in card.response.content
    assert [b["label"] for b in buttons(card.response)] == ["Open call page", "Hang up"]
    assert (await world.store.get_user(alice.id)).consent == "remember"
    call = await world.store.open_call_for_user(alice.id)
    assert call.state == "active" and not call.private
    async with httpx.AsyncClient() as http:
        page = await http.get(link_of(card.response).replace(world.settings.web.public_url, world.web.url))
    assert page.status_code == 200 and call.channel in page.text


async def test_call_without_memory_says_it_lasts_and_how_to_undo_it(simcord_env, world, member) -> None:
    _, channel, alice = member
    first = await alice.slash(channel, "call")
    prompt = first.response.content
    assert "• **Call without memory**: this call and your later calls and chats are not remembered" in prompt
    assert "To change your mind, press **Resume memory** in `/memory`." in prompt
    assert "Just this once without memory: `/call private:True`." in prompt
    card = await alice.click(first.response, label="Call without memory")
    assert "You chose **Call without memory**: this call and your later ones are not remembered." in (
        card.response.content
    )
    assert "press **Resume memory** in `/memory`" in card.response.content
    assert (await world.store.get_user(alice.id)).consent == "no_memory"
    assert (await world.store.open_call_for_user(alice.id)).private
    await alice.click(card.response, label="Hang up")

    later = await alice.slash(channel, "call")
    assert "Your memory is **paused**" in later.response.content, "not asked again: the choice lasts"
    assert (await world.store.open_call_for_user(alice.id)).private
    await alice.click(later.response, label="Hang up")

    panel = await alice.slash(channel, "memory")
    assert "Memory is **paused**" in panel.response.embeds[0].description
    await alice.click(panel.response, label="Resume memory")
    assert (await world.store.get_user(alice.id)).consent == "remember"
    assert "Memory is **on**" in panel.response.embeds[0].description
    remembered = await alice.slash(channel, "call")
    assert "This call will be remembered, so the agent can pick up from it next time." in remembered.response.content
    assert not (await world.store.open_call_for_user(alice.id)).private


async def test_call_with_memory_paused_says_paused_not_private(simcord_env, world: CallWorld, member) -> None:
    _, channel, alice = member
    card = await remembered_call(simcord_env, world, channel, alice)
    await alice.click(card.response, label="Hang up")
    await world.store.set_memory_enabled(alice.id, False, world.clock())
    card = await alice.slash(channel, "call")
    assert "paused" in card.response.content and "/memory" in card.response.content
    assert "private" not in card.response.content
    call = await world.store.open_call_for_user(alice.id)
    assert call.private
    world.emu.user_joined(call.agent_id)
    world.emu.script(call.agent_id, [("user", "My cat is called Miso.")])
    await alice.click(card.response, label="Hang up")
    assert "Nothing from it was kept" in card.response.content and "private" not in card.response.content
    assert await world.store.call_turns(call.call_id) == []


async def test_hang_up_button_ends_the_call_and_the_card_says_so(simcord_env, world: CallWorld, member) -> None:
    _, channel, alice = member
    card = await remembered_call(simcord_env, world, channel, alice)
    call = await world.store.open_call_for_user(alice.id)
    world.emu.user_joined(call.agent_id)
    world.emu.script(call.agent_id, [("user", "Please remember I'm vegetarian."), ("assistant", "Noted!")])
    await alice.click(card.response, label="Hang up")
    assert "Call ended" in card.response.content and "3 lines" in card.response.content
    assert card.response.components == []
    assert (await world.store.get_call(call.call_id)).state == "ended"
    assert len(await world.store.call_turns(call.call_id)) == 3


async def test_card_is_updated_when_the_call_ends_elsewhere(simcord_env, world: CallWorld, member) -> None:
    _, channel, alice = member
    card = await remembered_call(simcord_env, world, channel, alice)
    token = link_of(card.response).rsplit("/", 1)[1]
    async with httpx.AsyncClient() as http:
        await http.post(f"{world.web.url}/api/calls/{token}/hangup", content=b"beacon")
    await simcord_env.settle()
    assert "Call ended" in card.response.content


async def test_hangup_command_and_hangup_without_a_call(simcord_env, world: CallWorld, member) -> None:
    _, channel, alice = member
    await remembered_call(simcord_env, world, channel, alice)
    done = await alice.slash(channel, "hangup")
    assert done.ephemeral and "Call ended" in done.response.content
    again = await alice.slash(channel, "hangup")
    assert "You don't have a call running" in again.response.content
    assert isinstance(simcord_env.errors[-1].original, NoActiveCall)


async def test_call_while_a_call_is_active(simcord_env, world: CallWorld, member) -> None:
    _, channel, alice = member
    await remembered_call(simcord_env, world, channel, alice)
    second = await alice.slash(channel, "call")
    assert second.ephemeral and "already have a call running" in second.response.content
    assert isinstance(simcord_env.errors[-1].original, CallAlreadyActive)
    assert len(world.emu.agents) == 1


async def test_calls_disabled_in_this_server(simcord_env, world: CallWorld, member) -> None:
    guild, channel, alice = member
    await world.store.update_guild_settings(guild.id, 0.0, calls_enabled=False)
    await world.store.set_consent(alice.id, True, 0.0)
    result = await alice.slash(channel, "call")
    assert "turned off in this server" in result.response.content
    assert isinstance(simcord_env.errors[-1].original, CallsDisabled)


async def test_daily_quota(simcord_env, world: CallWorld, member) -> None:
    guild, channel, alice = member
    await world.store.update_guild_settings(guild.id, 0.0, calls_per_member_per_day=1)
    await remembered_call(simcord_env, world, channel, alice)
    await alice.slash(channel, "hangup")
    again = await alice.slash(channel, "call")
    assert "today's limit of 1 call in" in again.response.content and "<t:" in again.response.content
    assert isinstance(simcord_env.errors[-1].original, QuotaReached)


async def test_agora_down_gives_a_clear_message_and_leaves_nothing(simcord_env, world: CallWorld, member) -> None:
    _, channel, alice = member
    await world.store.set_consent(alice.id, True, 0.0)
    world.emu.fail_next(10, 503, operation="join")
    result = await alice.slash(channel, "call")
    assert result.ephemeral and "not available right now" in result.response.content
    assert "503" not in result.response.content
    assert isinstance(simcord_env.errors[-1].original, VoiceUnavailable)
    assert await world.store.open_call_for_user(alice.id) is None


async def test_card_reports_what_was_learned_once_processing_finishes(
    simcord_env, world: CallWorld, services, fake_llm, member
) -> None:
    _, channel, alice = member
    card = await remembered_call(simcord_env, world, channel, alice)
    call = await world.store.open_call_for_user(alice.id)
    world.emu.user_joined(call.agent_id)
    world.emu.script(call.agent_id, [("user", "I play the cello in a community orchestra."), ("assistant", "Lovely!")])
    await alice.click(card.response, label="Hang up")
    assert "will appear in `/memory` shortly" in card.response.content
    fake_llm.queue_reply(
        json.dumps(
            {
                "summary": "The member talked about music.",
                "facts": [
                    {
                        "text": "The user plays the cello in a community orchestra.",
                        "evidence": "I play the cello in a community orchestra",
                        "replaces": [],
                        "duplicate_of": None,
                    }
                ],
            }
        )
    )
    world.clock.advance(60)
    assert await services.postcall.run_once()
    await simcord_env.settle()
    assert "learned 1 new thing about you" in card.response.content
    assert [f.text for f in await world.store.list_facts(alice.id)] == [
        "The user plays the cello in a community orchestra."
    ]


async def test_unanswered_memory_choice_expires_and_starts_nothing(simcord_env, world: CallWorld, member) -> None:
    _, channel, alice = member
    prompt = await alice.slash(channel, "call")
    await simcord_env.advance_time(5 * 60 + 1)
    assert "no call was started" in prompt.response.content and prompt.response.components == []
    assert await world.store.get_user(alice.id) is None
    assert world.emu.agents == {}


async def test_hangup_on_a_full_disk_stops_the_agent_and_says_so_plainly(simcord_env, world: CallWorld, member) -> None:
    from tests.calls.test_disk_full import fill_the_disk, free_space, long_lines

    _, channel, alice = member
    await remembered_call(simcord_env, world, channel, alice)
    call = await world.store.open_call_for_user(alice.id)
    world.emu.user_joined(call.agent_id)
    world.emu.script(call.agent_id, long_lines(4))
    await fill_the_disk(world)

    done = await alice.slash(channel, "hangup")

    assert done.ephemeral and "storage is full" in done.response.content
    assert "went wrong" not in done.response.content.lower()
    assert world.emu.agent(call.agent_id).status == "STOPPED"
    await free_space(world)
    assert await world.calls.save_unsaved() == 1
    assert len(await world.store.call_turns(call.call_id)) == 5


async def test_a_card_is_edited_once_when_processing_ends_while_the_end_is_being_shown(
    simcord_env, world: CallWorld, member, monkeypatch
) -> None:
    """Without an LLM nothing is learned: the card says the call ended, once, even when the call's post-call job
    reports while that edit is still on its way to Discord (a race seen with three processes)."""
    _, channel, alice = member
    await remembered_call(simcord_env, world, channel, alice)
    call = await world.store.open_call_for_user(alice.id)
    cog = simcord_env.bot.get_cog("Calls")
    monkeypatch.setattr(type(cog), "learning", property(lambda self: False))  # no LLM: nothing is learned
    edits: list[str] = []
    editing = asyncio.Event()
    release = asyncio.Event()

    async def slow_edit(interaction, content: str) -> None:
        edits.append(content)
        if len(edits) == 1:  # the end, still on its way to Discord
            editing.set()
            await release.wait()

    monkeypatch.setattr(type(cog), "_edit_card", staticmethod(slow_edit))
    ended = CallEnded(call.call_id, alice.id, None, "hangup_button", turns_stored=3, private=False)
    shown = asyncio.create_task(cog.call_ended(ended))
    await editing.wait()
    await cog.call_processed("post_call", call.call_id, 0)
    release.set()
    await shown
    assert len(edits) == 1 and "Call ended" in edits[0] and "learned" not in edits[0], edits
