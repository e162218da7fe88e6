"""Members' prepared greetings on every store (`GreetingStore`, migration 20): written behind the memory fence, read
with the call start in its one trip, sealed with member encryption, and gone in the same transaction as any line,
conversation or fact they drew on, the member's switch turned off, or the member forgotten."""

from __future__ import annotations

import time

from bot.keys.encrypted import EncryptedStore
from bot.store.models import NewTurn, PreparedGreeting
from bot.store.repository import Store
from standins.factories import make_call, seed_fact

ALICE, BOB = 42, 43
GUILD = 7


async def _ended_call_with_a_line(store: Store, user_id: int, text: str) -> str:
    call = make_call(user_id, guild_id=GUILD, state="active")
    await store.create_call(call)
    assert await store.apply_call_turns(
        call.call_id, user_id, [NewTurn("user", text, time.time(), 0)], [], anchored=True, checkpoint_at=time.time()
    )
    assert await store.transition_call(call.call_id, ["active"], "ended", ended_at=time.time())
    return call.call_id


async def _prepared(store: Store, user_id: int, **drawn: object) -> PreparedGreeting:
    greeting = PreparedGreeting(
        language="es", prepared_at=5.0, name="Ana", follow_up="¿Qué tal la entrevista?", **drawn
    )  # type: ignore[arg-type]
    assert await store.save_greeting(user_id, greeting, generation=await store.memory_generation(user_id))
    return greeting


async def test_a_greeting_is_kept_read_with_the_call_start_and_replaced(store: Store) -> None:
    await store.set_consent(ALICE, True, 1.0)
    first = await store.call_start_check(ALICE, GUILD, 0.0)
    assert first.greeting is None and not first.returning  # nothing remembered yet: a first call

    call_id = await _ended_call_with_a_line(store, ALICE, "I have a job interview on Friday")
    fact = await seed_fact(store, ALICE, "The user has a job interview on Friday.", 2.0, call_id=call_id)
    greeting = await _prepared(store, ALICE, call_id=call_id, fact_ids=(fact.fact_id,))
    assert await store.get_greeting(ALICE) == greeting
    check = await store.call_start_check(ALICE, GUILD, 0.0)
    assert check.greeting == greeting and check.returning
    assert check.user is not None and check.user.personal_greetings and check.guild.personal_greetings

    again = PreparedGreeting(language="en", prepared_at=6.0, name=None, follow_up=None)
    assert await store.save_greeting(ALICE, again, generation=await store.memory_generation(ALICE))
    assert await store.get_greeting(ALICE) == again
    assert (await store.call_start_check(BOB, GUILD, 0.0)).greeting is None  # one member's is theirs alone


async def test_a_greeting_prepared_before_a_forget_or_pause_is_refused(store: Store) -> None:
    await store.set_consent(ALICE, True, 1.0)
    call_id = await _ended_call_with_a_line(store, ALICE, "I have a job interview on Friday")
    before = await store.memory_generation(ALICE)
    assert await store.forget_call(ALICE, call_id) is not None
    stale = PreparedGreeting(language="en", prepared_at=5.0, name="Ana", follow_up="How did the interview go?")
    assert not await store.save_greeting(ALICE, stale, generation=before)
    assert await store.get_greeting(ALICE) is None

    paused_at = await store.memory_generation(ALICE)
    await store.set_memory_enabled(ALICE, False, 2.0)
    assert not await store.save_greeting(ALICE, stale, generation=paused_at)
    assert await store.get_greeting(ALICE) is None


async def test_a_greeting_goes_with_any_fact_line_or_conversation_it_drew_on(store: Store) -> None:
    await store.set_consent(ALICE, True, 1.0)
    call_id = await _ended_call_with_a_line(store, ALICE, "I have a job interview on Friday")
    other_call = await _ended_call_with_a_line(store, ALICE, "I like green tea")
    drawn = await seed_fact(store, ALICE, "The user has a job interview on Friday.", 2.0, call_id=call_id)
    unrelated = await seed_fact(store, ALICE, "The user likes green tea.", 2.0, call_id=other_call)

    await _prepared(store, ALICE, call_id=call_id, fact_ids=(drawn.fact_id,))
    assert await store.forget_fact(ALICE, unrelated.fact_id) is not None
    assert await store.get_greeting(ALICE) is not None  # a forget of what it did not draw on leaves it
    assert await store.forget_fact(ALICE, drawn.fact_id) is not None
    assert await store.get_greeting(ALICE) is None
    assert (await store.call_start_check(ALICE, GUILD, 0.0)).greeting is None

    told = await store.add_told_fact(ALICE, "My name is Ana", 3.0, generation=await store.memory_generation(ALICE))
    assert told is not None
    await _prepared(store, ALICE, call_id=call_id, fact_ids=(told,))
    assert await store.add_told_fact(ALICE, "My name is Anabel", 4.0, supersedes=[told]) is not None
    assert await store.get_greeting(ALICE) is None  # the name it said was corrected

    await _prepared(store, ALICE, call_id=call_id)
    assert await store.forget_call(ALICE, call_id) is not None
    assert await store.get_greeting(ALICE) is None

    await _prepared(store, ALICE, call_id=other_call)
    assert await store.purge_transcripts(guild_id=GUILD, older_than=time.time() + 60) > 0
    assert await store.get_greeting(ALICE) is None  # its conversation's lines were deleted by the retention


async def test_turning_greetings_off_or_forgetting_everything_deletes_it(store: Store) -> None:
    await store.set_consent(ALICE, True, 1.0)
    await _prepared(store, ALICE)
    user = await store.set_personal_greetings(ALICE, False, 2.0)
    assert not user.personal_greetings and await store.get_greeting(ALICE) is None
    assert not (await store.call_start_check(ALICE, GUILD, 0.0)).user.personal_greetings  # type: ignore[union-attr]
    assert (await store.set_personal_greetings(ALICE, True, 3.0)).personal_greetings

    await _prepared(store, ALICE)
    await store.forget_user(ALICE)
    assert await store.get_greeting(ALICE) is None
    await store.update_guild_settings(GUILD, 4.0, personal_greetings=False)
    assert not (await store.call_start_check(ALICE, GUILD, 0.0)).guild.personal_greetings


async def test_a_greeting_is_stored_sealed_with_member_encryption_and_exported(store: Store) -> None:
    await store.set_consent(ALICE, True, 1.0)
    await _prepared(store, ALICE)
    exported = await store.export_user(ALICE)
    assert exported["settings"]["personal_greetings"] is True
    assert exported["next_greeting"]["name"] == "Ana"
    assert exported["next_greeting"]["follow_up"] == "¿Qué tal la entrevista?"
    if not isinstance(store, EncryptedStore):
        assert (await store.get_greeting(ALICE)).follow_up == "¿Qué tal la entrevista?"  # type: ignore[union-attr]
        return
    raw = await store.backend.get_greeting(ALICE)
    assert raw is not None and raw.name not in (None, "Ana") and "entrevista" not in (raw.follow_up or "")
    assert (await store.call_start_check(ALICE, GUILD, 0.0)).greeting.name == "Ana"  # type: ignore[union-attr]
