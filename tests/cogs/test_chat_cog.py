"""/chat and direct messages as a member meets them: SimCord runs the real command tree and gateway events; the
store, the Agora emulator and an OpenAI-compatible fake LLM (scripted replies, loopback) are real."""

from __future__ import annotations

from bot.app import Services
from bot.config import DEFAULT_PERSONA
from bot.i18n import english
from bot.llm.errors import LLMUnavailable
from bot.memory.chat import ChatDisabled, ChatService
from bot.store.models import TurnRecord
from cogs.chat import MESSAGE_LIMIT, StreamedAnswer, split_point
from standins.harness import CallWorld
from standins.llm_server import FakeLLM

CONSENT_EXPIRED, EMPTY_ANSWER = english()("chat.consent_expired"), english()("chat.empty_answer")

PERSONA = DEFAULT_PERSONA  # the bot-wide persona the conftest services use
LONG_ANSWER = " ".join(f"word{i:04d}" for i in range(350)) + "\n" + "z" * 2100
"""5250 chars: cut after a space (page 1), at the line break (page 2), then hard inside the run of z (pages 3, 4)."""


def buttons(message) -> list[dict]:
    return [c for row in message.components for c in row["components"]]


def system_text(request: dict) -> str:
    return "\n".join(m["content"] for m in request["messages"] if m["role"] == "system")


async def stored_chat_turns(world: CallWorld, user_id: int) -> list[TurnRecord]:
    chat = await world.store.open_chat_for_user(user_id)
    return [] if chat is None else await world.store.chat_turns(chat.chat_id)


async def earlier_voice_call(world: CallWorld, user_id: int, guild_id: int) -> None:
    """A remembered voice call in which the member said they are vegetarian."""
    await world.store.set_consent(user_id, True, 0.0)
    started = await world.calls.start(user_id=user_id, guild_id=guild_id)
    call = await world.store.get_call(started.call_id)
    world.emu.user_joined(call.agent_id)
    world.emu.script(call.agent_id, [("user", "I'm vegetarian and I love spicy food."), ("assistant", "Noted!")])
    await world.calls.hang_up(user_id)


# ---- /chat ---------------------------------------------------------------------------------------------


async def test_voice_memory_reaches_chat_and_chat_turns_are_stored_as_text(
    simcord_env, world: CallWorld, fake_llm: FakeLLM, member
) -> None:
    guild, channel, alice = member
    await earlier_voice_call(world, alice.id, guild.id)
    fake_llm.queue_reply("How about a spicy chickpea curry?")

    result = await alice.slash(channel, "chat", message="What should I cook tonight?")

    assert result.ephemeral and result.response.content == "How about a spicy chickpea curry?"
    assert result.followups == []
    request = fake_llm.last_request
    assert request["stream"] is True
    system = system_text(request)
    assert system.startswith(PERSONA) and "vegetarian" in system
    assert request["messages"][-1] == {"role": "user", "content": "What should I cook tonight?"}
    turns = await stored_chat_turns(world, alice.id)
    assert [(t.role, t.content, t.source) for t in turns] == [
        ("user", "What should I cook tonight?", "text"),
        ("assistant", "How about a spicy chickpea curry?", "text"),
    ]
    assert (await world.store.open_chat_for_user(alice.id)).guild_id == guild.id


async def test_first_chat_asks_for_the_memory_choice_then_answers(
    simcord_env, world: CallWorld, fake_llm: FakeLLM, member
) -> None:
    _, channel, alice = member
    prompt = await alice.slash(channel, "chat", message="Hi, I'm Ana.")
    assert prompt.ephemeral and "may the agent remember you" in prompt.response.content
    assert "/memory" in prompt.response.content and "/forget" in prompt.response.content
    assert [b["label"] for b in buttons(prompt.response)] == ["Remember me", "Without memory"]
    assert fake_llm.requests == [] and await world.store.get_user(alice.id) is None

    fake_llm.queue_reply("Nice to meet you, Ana!")
    clicked = await alice.click(prompt.response, label="Remember me")
    assert "Remember me" in clicked.response.content and clicked.response.components == []
    assert [m.content for m in clicked.followups] == ["Nice to meet you, Ana!"]
    assert all(m.ephemeral for m in clicked.followups)
    assert (await world.store.get_user(alice.id)).consent == "remember"
    assert [t.content for t in await stored_chat_turns(world, alice.id)] == ["Hi, I'm Ana.", "Nice to meet you, Ana!"]

    fake_llm.queue_reply("Still here.")
    again = await alice.slash(channel, "chat", message="Are you there?")  # chosen once: no second prompt
    assert again.response.content == "Still here."


async def test_without_memory_choice_is_kept_and_nothing_is_stored(
    simcord_env, world: CallWorld, fake_llm: FakeLLM, member
) -> None:
    _, channel, alice = member
    prompt = await alice.slash(channel, "chat", message="My PIN is 1234.")
    assert "• **Without memory**: this chat and your later chats and calls are not remembered" in (
        prompt.response.content
    )
    assert "To change your mind, press **Resume memory** in `/memory`." in prompt.response.content
    fake_llm.queue_reply("I won't keep that.")
    clicked = await alice.click(prompt.response, label="Without memory")
    assert prompt.response.content.endswith("now or later, until you press **Resume memory** in `/memory`.")
    assert [m.content for m in clicked.followups] == ["I won't keep that."]
    assert (await world.store.get_user(alice.id)).consent == "no_memory"

    fake_llm.queue_reply("Okay.")
    later = await alice.slash(channel, "chat", message="Another thing.")
    assert later.response.content == "Okay."
    assert [system_text(r) for r in fake_llm.requests] == [PERSONA, PERSONA]
    assert await world.store.open_chat_for_user(alice.id) is None
    assert await world.store.count_turns(alice.id) == 0


async def test_unanswered_memory_choice_expires_and_nothing_is_sent(
    simcord_env, world: CallWorld, fake_llm: FakeLLM, member
) -> None:
    _, channel, alice = member
    prompt = await alice.slash(channel, "chat", message="Hello?")
    await simcord_env.advance_time(11 * 60)
    assert prompt.response.content == CONSENT_EXPIRED and prompt.response.components == []
    assert fake_llm.requests == [] and await world.store.get_user(alice.id) is None


async def test_paused_memory_answers_without_reading_or_storing(
    simcord_env, world: CallWorld, fake_llm: FakeLLM, member
) -> None:
    guild, channel, alice = member
    await earlier_voice_call(world, alice.id, guild.id)
    await world.store.set_memory_enabled(alice.id, False, 1.0)
    turns_before = await world.store.count_turns(alice.id)
    fake_llm.queue_reply("Sure, tell me more.")

    result = await alice.slash(channel, "chat", message="Remember that I moved to Lisbon.")

    assert result.response.content == "Sure, tell me more."
    assert system_text(fake_llm.last_request) == PERSONA  # no memory block
    assert await world.store.open_chat_for_user(alice.id) is None
    assert await world.store.count_turns(alice.id) == turns_before


async def test_private_chat_needs_no_choice_and_keeps_nothing(simcord_env, world: CallWorld, fake_llm, member) -> None:
    _, channel, alice = member
    fake_llm.queue_reply("Just between us.")
    result = await alice.slash(channel, "chat", message="Secret question", private=True)
    assert result.ephemeral and result.response.content == "Just between us."
    assert await world.store.get_user(alice.id) is None
    assert await world.store.count_turns(alice.id) == 0


async def test_public_answer_is_posted_without_memory_or_mentions(
    simcord_env, world: CallWorld, fake_llm: FakeLLM, member
) -> None:
    guild, channel, alice = member
    await earlier_voice_call(world, alice.id, guild.id)
    fake_llm.queue_reply("Hello @everyone, here is a haiku.")

    result = await alice.slash(channel, "chat", message="Write a haiku for the channel", public=True)

    assert not result.ephemeral and result.response.content == "Hello @everyone, here is a haiku."
    [hint] = result.followups
    assert hint.ephemeral and "public answers never use or add to your memory" in hint.content
    assert "use `/chat` without `public`" in hint.content
    assert system_text(fake_llm.last_request) == PERSONA  # memory never surfaces in a channel
    assert await world.store.open_chat_for_user(alice.id) is None
    edits = [r for r in simcord_env.http_requests if r.method == "PATCH" and "/webhooks/" in r.path]
    assert edits and all(r.json["allowed_mentions"] == {"parse": []} for r in edits)


async def test_long_answer_streams_with_few_edits_and_is_split_at_2000_chars(
    simcord_env, world: CallWorld, fake_llm: FakeLLM, member
) -> None:
    _, channel, alice = member
    await world.store.set_consent(alice.id, True, 0.0)
    fake_llm.queue_reply(LONG_ANSWER)
    cursor = len(simcord_env.http_requests)

    result = await alice.slash(channel, "chat", message="Tell me everything.")

    parts = [result.response.content, *(m.content for m in result.followups)]
    assert [len(p) for p in parts] == [1998, 1152, 2000, 100]
    assert "".join(parts) == LONG_ANSWER
    assert parts[0].endswith("word0221 ") and parts[1].endswith("word0349\n")
    assert all(m.ephemeral for m in result.followups)
    writes = [r for r in simcord_env.http_requests[cursor:] if r.method in ("PATCH", "POST") and "/webhooks/" in r.path]
    assert len(writes) < 30  # ~660 streamed deltas, shown every 400 characters
    stored = await stored_chat_turns(world, alice.id)
    assert stored[-1].content == LONG_ANSWER


async def test_chat_disabled_without_an_llm(simcord_env, world: CallWorld, services: Services, member) -> None:
    _, channel, alice = member
    services.chat = ChatService(world.store, world.memory, None, idle_minutes=30, persona=PERSONA)
    result = await alice.slash(channel, "chat", message="Hello", public=True)
    assert result.ephemeral  # refused before deferring, so never posted in the channel
    assert "Text chat is not enabled" in result.response.content
    assert isinstance(simcord_env.errors[-1].original, ChatDisabled)


async def test_llm_failure_goes_through_the_error_funnel(simcord_env, world: CallWorld, fake_llm, member) -> None:
    _, channel, alice = member
    await world.store.set_consent(alice.id, True, 0.0)
    fake_llm.fail_next(1, 503)
    result = await alice.slash(channel, "chat", message="Hello")
    assert result.ephemeral and "language model did not respond" in result.response.content
    assert isinstance(simcord_env.errors[-1].original, LLMUnavailable)
    assert [t.role for t in await stored_chat_turns(world, alice.id)] == ["user"]  # no partial answer is kept


# ---- direct messages -----------------------------------------------------------------------------------


async def test_direct_message_is_answered_with_memory_and_stored(
    simcord_env, world: CallWorld, fake_llm: FakeLLM, member
) -> None:
    guild, _, alice = member
    await earlier_voice_call(world, alice.id, guild.id)
    fake_llm.queue_reply(LONG_ANSWER)
    cursor = len(simcord_env.http_requests)

    sent = await alice.user.send_dm("Do you remember what I eat?")

    dm = alice.user.dm_channel
    replies = [m for m in dm.history() if m.id > sent.id]
    assert all(m.author.id == simcord_env.bot.user.id for m in replies)
    assert len(replies) == 4 and "".join(m.content for m in replies) == LONG_ANSWER
    assert all(len(m.content) <= MESSAGE_LIMIT for m in replies)
    assert any(r.method == "POST" and r.path.endswith("/typing") for r in simcord_env.http_requests[cursor:])
    assert "vegetarian" in system_text(fake_llm.last_request)
    chat = await world.store.open_chat_for_user(alice.id)
    assert chat.guild_id is None
    turns = await world.store.chat_turns(chat.chat_id)
    assert [(t.role, t.source) for t in turns] == [("user", "text"), ("assistant", "text")]
    assert turns[0].content == "Do you remember what I eat?"


async def test_a_direct_message_is_answered_when_the_typing_indicator_fails(
    simcord_env, world: CallWorld, fake_llm: FakeLLM, member
) -> None:
    _, _, alice = member
    await world.store.set_consent(alice.id, True, 0.0)
    simcord_env.inject_error("POST", "/channels/*/typing", status=403, code=50013, message="Missing Permissions")
    fake_llm.queue_reply("Still answering you.")

    sent = await alice.user.send_dm("Are you there?")

    replies = [m.content for m in alice.user.dm_channel.history() if m.id > sent.id]
    assert replies == ["Still answering you."]
    assert not [r for r in replies if "Something went wrong" in r]
    chat = await world.store.open_chat_for_user(alice.id)
    assert [t.content for t in await world.store.chat_turns(chat.chat_id)] == ["Are you there?", "Still answering you."]
    assert (await world.monitor.report())["counters"]["errors"] == {}


async def test_first_direct_message_asks_for_the_memory_choice(
    simcord_env, world: CallWorld, fake_llm: FakeLLM, member
) -> None:
    _, _, alice = member
    await alice.user.send_dm("Hello bot")
    prompt = alice.user.dm_channel.last_message
    assert prompt.author.id == simcord_env.bot.user.id and "may the agent remember you" in prompt.content
    assert fake_llm.requests == []

    fake_llm.queue_reply("Hello Alice!")
    await alice.user.click(prompt, label="Remember me")
    assert alice.user.dm_channel.last_message.content == "Hello Alice!"
    assert [t.content for t in await stored_chat_turns(world, alice.id)] == ["Hello bot", "Hello Alice!"]


async def test_direct_message_when_chat_is_disabled(simcord_env, world: CallWorld, services: Services, member) -> None:
    _, _, alice = member
    await world.store.set_consent(alice.id, True, 0.0)
    services.chat = None
    await alice.user.send_dm("Hello?")
    assert "Text chat is not enabled" in alice.user.dm_channel.last_message.content


async def test_chat_command_also_works_in_the_bots_dms(simcord_env, world: CallWorld, fake_llm, member) -> None:
    _, _, alice = member
    await world.store.set_consent(alice.id, True, 0.0)
    fake_llm.queue_reply("Hi from your DMs.")
    result = await alice.user.slash("chat", message="Hello from DMs")
    assert result.response.content == "Hi from your DMs."
    assert (await world.store.open_chat_for_user(alice.id)).guild_id is None


async def test_server_messages_are_never_read(simcord_env, world: CallWorld, fake_llm: FakeLLM, member) -> None:
    _, channel, alice = member
    await world.store.set_consent(alice.id, True, 0.0)
    await alice.send(channel, "hello bot, are you listening?")
    assert fake_llm.requests == []
    assert [m.author.id for m in channel.history()] == [alice.id]


# ---- the streaming renderer on its own -----------------------------------------------------------------


async def test_streamed_answer_throttles_edits_and_skips_blank_text() -> None:
    log: list[tuple[str, str]] = []
    now = [0.0]

    async def open_page(text: str):
        log.append(("open", text))

        async def edit(new: str) -> None:
            log.append(("edit", new))

        return edit

    answer = StreamedAnswer(
        open_page, open_page, empty_text=EMPTY_ANSWER, limit=20, interval=1.0, chars=10, clock=lambda: now[0]
    )
    await answer.feed("  ")  # whitespace alone opens nothing
    await answer.feed("Hi")
    await answer.feed(" there")  # < 10 new chars and < 1 s: no edit
    now[0] = 2.0
    await answer.feed("!")  # 1 s passed: edit
    await answer.feed(" This sentence is long")  # over 20 chars: first page closes between words
    await answer.finish()
    assert log == [
        ("open", "  Hi"),
        ("edit", "  Hi there!"),
        ("edit", "  Hi there! This "),
        ("open", "sentence is long"),
    ]
    assert answer.pages == ["  Hi there! This ", "sentence is long"]


async def test_empty_answer_gets_a_placeholder_and_split_point_prefers_breaks() -> None:
    shown: list[str] = []

    async def open_page(text: str):
        shown.append(text)
        return lambda new: shown.append(new)

    answer = StreamedAnswer(open_page, open_page, empty_text=EMPTY_ANSWER)
    await answer.finish()
    assert shown == [EMPTY_ANSWER]
    assert split_point("a" * 10, 20) == 10
    assert split_point("aaaaaaaaaaaaaaaaaa\nbb cc", 20) == 19
    assert split_point("a" * 30, 20) == 20
