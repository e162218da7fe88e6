"""The memory choice and pause as rules of their own (`bot.memory.choices`), on a pinned clock: what /call, /chat,
direct messages and the /memory panel ask and save."""

from __future__ import annotations

from bot.memory.choices import MemberChoices, chat_privately
from bot.store.models import UserRecord
from bot.store.sqlite import SqliteStore
from standins.harness import FakeClock

T0 = 1_780_000_000.0


def member(*, consent: str | None, enabled: bool = True) -> UserRecord:
    return UserRecord(1, enabled, consent, None if consent is None else T0, T0)  # type: ignore[arg-type]


def test_a_chat_asks_first_only_a_member_who_never_chose() -> None:
    assert chat_privately(None) is None
    assert chat_privately(member(consent=None)) is None
    assert chat_privately(member(consent="remember")) is False
    assert chat_privately(member(consent="no_memory")) is True
    assert chat_privately(member(consent="remember", enabled=False)) is False  # paused: the chat service stores nothing


async def test_the_choice_is_saved_with_the_injected_clock(sqlite_store: SqliteStore) -> None:
    clock = FakeClock(T0)
    choices = MemberChoices(sqlite_store, clock=clock)
    assert await choices.must_ask(7) and await choices.chat_privately(7) is None

    await choices.choose(7, remember=False)
    saved = await sqlite_store.get_user(7)
    assert saved is not None and (saved.consent, saved.consent_at, saved.memory_enabled) == ("no_memory", T0, False)
    assert not await choices.must_ask(7)
    assert await choices.chat_privately(7) is False  # memory off: the chat service neither reads nor stores

    clock.advance(60)
    await choices.choose(7, remember=True)
    saved = await sqlite_store.get_user(7)
    assert saved is not None and (saved.consent, saved.consent_at) == ("remember", T0 + 60)
    assert await choices.chat_privately(7) is False


async def test_pausing_keeps_the_choice_and_resuming_chooses_remember_me_again(sqlite_store: SqliteStore) -> None:
    clock = FakeClock(T0)
    choices = MemberChoices(sqlite_store, clock=clock)
    await choices.choose(7, remember=True)

    clock.advance(10)
    await choices.set_remembering(7, False)
    paused = await sqlite_store.get_user(7)
    assert paused is not None and not paused.memory_enabled
    assert (paused.consent, paused.consent_at) == ("remember", T0)  # the choice stays as made
    assert not await choices.must_ask(7)

    clock.advance(10)
    await choices.set_remembering(7, True)
    resumed = await sqlite_store.get_user(7)
    assert resumed is not None and resumed.memory_enabled
    assert (resumed.consent, resumed.consent_at) == ("remember", T0 + 20)


async def test_resuming_after_choosing_no_memory_is_choosing_remember_me(sqlite_store: SqliteStore) -> None:
    choices = MemberChoices(sqlite_store, clock=FakeClock(T0))
    await choices.choose(7, remember=False)
    await choices.set_remembering(7, True)
    user = await sqlite_store.get_user(7)
    assert user is not None and user.consent == "remember" and user.memory_enabled
