"""The in-memory index the per-utterance build reads (bot.memory.index): used while current, never stale.

Each test keeps one bot process (``memory``, over the ``store`` fixture: SQLite, encrypted SQLite, PostgreSQL) in a
call, and changes the member's memory through a second connection to the same database, as another bot process
would: its writes, forgets and pauses must show in the very next build."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from bot.keys.encrypted import EncryptedStore
from bot.memory.block import _fact_line, _turn_line
from bot.memory.service import MemoryService
from bot.store.models import CallRecord, ChatRecord, Conversation
from bot.store.postgres import PostgresStore
from bot.store.repository import Store
from bot.store.sqlite import SqliteStore
from standins.factories import make_call, seed_fact
from standins.harness import eventually

DAY = 86400.0
T0 = 1_700_000_000.0
USER = 21


@asynccontextmanager
async def other_process(store: Store) -> AsyncIterator[tuple[Store, MemoryService]]:
    """A second connection to the same database, with its own memory service (another bot process)."""
    other: Store
    plain = store.backend if isinstance(store, EncryptedStore) else store
    if isinstance(plain, SqliteStore):
        other = SqliteStore(plain.path)
    else:
        assert isinstance(plain, PostgresStore)
        other = PostgresStore(plain.url)
    if isinstance(store, EncryptedStore):
        other = EncryptedStore(other, store.keys)
    await other.open()
    keys = store.keys if isinstance(store, EncryptedStore) else None
    service = MemoryService(other, budget_tokens=1500, persona="p", keys=keys)
    try:
        yield other, service
    finally:
        await service.wait_scrubbed()
        await other.close()


async def ended_call(store: Store, memory: MemoryService, lines: list[tuple[str, str]], at: float) -> CallRecord:
    call = make_call(user_id=USER, state="active", started_at=at)
    await store.create_call(call)
    await memory.record_snapshot(call, lines, max_history=None, at=at)
    await store.transition_call(call.call_id, ["active"], "ended", ended_at=at + 60)
    return call


async def in_a_call(
    store: Store, memory: MemoryService, *earlier: list[tuple[str, str]]
) -> tuple[CallRecord, dict[str, str], list[CallRecord]]:
    """The member's earlier calls (a first one, then ``earlier``), and their call in progress with the arguments
    of a per-utterance build."""
    calls = [await ended_call(store, memory, [("user", "My gate code is 7788."), ("assistant", "Noted.")], T0)]
    for n, lines in enumerate(earlier, start=1):
        calls.append(await ended_call(store, memory, lines, T0 + n * 3600))
    current = make_call(user_id=USER, state="active", started_at=T0 + DAY)
    await store.create_call(current)
    return current, {"query": "what is the gate code again", "exclude_call_id": current.call_id}, calls[1:]


async def memory_text(memory: MemoryService, ask: dict[str, str]) -> str:
    messages = await memory.build_context(USER, **ask)
    return messages[1]["content"] if len(messages) > 1 else ""


async def test_the_index_is_read_once_per_call_and_the_calls_own_lines_do_not_invalidate_it(
    store: Store, memory: MemoryService
) -> None:
    current, ask, _ = await in_a_call(store, memory)
    assert "7788" in await memory_text(memory, ask)
    loads = memory.context.indexes.loads
    for n in range(5):  # the call goes on: live turns and checkpoints of the call in progress
        window = [("user", f"what was my gate code {i}") for i in range(n + 1)]
        await memory.record_snapshot(current, window, max_history=32, at=T0 + DAY + n)
        text = await memory_text(memory, ask)
        assert "7788" in text and "gate code 0" not in text
    assert memory.context.indexes.loads == loads


async def test_a_line_another_process_stores_is_in_the_next_build(store: Store, memory: MemoryService) -> None:
    _, ask, _ = await in_a_call(store, memory)
    assert "9911" not in await memory_text(memory, ask)
    async with other_process(store) as (other, _):  # a text chat meanwhile
        await other.create_chat(ChatRecord("chat-1", USER, 7, private=False, started_at=T0, last_message_at=T0))
        await other.append_chat_turn("chat-1", USER, "user", "The new gate code is 9911.", T0 + DAY)
    assert "9911" in await memory_text(memory, ask)


async def test_a_line_another_process_grows_in_an_ended_call_is_read_again(store: Store, memory: MemoryService) -> None:
    """Webhook 103 can complete an ended call's last line later (merged by another process)."""
    _, ask, (call,) = await in_a_call(store, memory, [("user", "My locker is number")])
    assert "4242" not in await memory_text(memory, ask)
    async with other_process(store) as (_, other_memory):
        await other_memory.record_snapshot(
            call, [("user", "My locker is number 4242 by the gate")], max_history=None, final=True
        )
    assert "4242" in await memory_text(memory, ask)


async def test_a_fact_another_process_extracts_is_in_the_next_build(store: Store, memory: MemoryService) -> None:
    _, ask, (call,) = await in_a_call(store, memory, [("user", "The gate opens with the blue fob.")])
    assert "Gate fob is blue" not in await memory_text(memory, ask)
    async with other_process(store) as (other, _):
        await other.enqueue_job("extract", call.call_id, T0 + DAY)
        job = await other.claim_job(T0 + DAY, lease_seconds=60)
        assert job is not None
        await other.apply_extraction(
            job.job_id,
            job.attempts,
            USER,
            T0 + DAY,
            Conversation("call", call.call_id),
            new_facts=[("Gate fob is blue", [])],
        )
    assert "Gate fob is blue" in await memory_text(memory, ask)


async def test_forgetting_in_another_process_empties_the_next_build(store: Store, memory: MemoryService) -> None:
    _, ask, _ = await in_a_call(store, memory)
    assert "7788" in await memory_text(memory, ask)
    async with other_process(store) as (_, other_memory):
        await other_memory.forget_everything(USER)
    assert await memory_text(memory, ask) == ""


async def test_forgetting_one_call_here_drops_its_lines_at_once(store: Store, memory: MemoryService) -> None:
    _, ask, (call,) = await in_a_call(store, memory, [("user", "My bike lock code is 5150 for the gate.")])
    assert "5150" in await memory_text(memory, ask)
    await memory.forget_conversation(USER, "call", call.call_id)
    text = await memory_text(memory, ask)
    assert "5150" not in text and "7788" in text


async def test_pausing_in_another_process_stops_the_next_build(store: Store, memory: MemoryService) -> None:
    _, ask, _ = await in_a_call(store, memory)
    assert "7788" in await memory_text(memory, ask)
    async with other_process(store) as (other, _):
        await other.set_memory_enabled(USER, False, T0 + DAY)
        assert await memory_text(memory, ask) == ""
        await other.set_memory_enabled(USER, True, T0 + DAY + 1)
    assert "7788" in await memory_text(memory, ask)


async def test_a_call_start_reads_the_index_ahead_for_the_first_utterance(store: Store, memory: MemoryService) -> None:
    _, ask, _ = await in_a_call(store, memory)
    assert memory.context.indexes.loads == 0
    assert "7788" in await memory_text(memory, {})  # the call-start build, as CallService.start makes it
    await eventually(lambda: memory.context.indexes.loads == 1)
    assert "7788" in await memory_text(memory, ask)
    assert memory.context.indexes.loads == 1


async def test_without_live_recall_a_call_start_reads_nothing_ahead(store: Store, memory: MemoryService) -> None:
    """Only the live route uses a call's index: a bot without live recall (``read_ahead=False``, as bot/app.py
    builds it then) does not load the store and the event loop with reading it at every call start."""
    _, ask, _ = await in_a_call(store, memory)
    quiet = MemoryService(store, budget_tokens=memory.context.budget_tokens, persona="p", read_ahead=False)
    assert "7788" in await memory_text(quiet, {})
    await quiet.context.indexes.idle()
    assert quiet.context.indexes.loads == 0
    assert "7788" in await memory_text(quiet, ask)  # the live route would still read it when asked
    assert quiet.context.indexes.loads == 1


async def test_the_lines_and_facts_an_index_renders_once_are_those_the_block_renders_and_the_block_the_same(
    store: Store, memory: MemoryService
) -> None:
    """Each line and fact is rendered and counted when the index is read; a build from the index is the block the
    database path builds (the call in progress holds no line yet, so both see the same lines)."""
    current, ask, _ = await in_a_call(
        store,
        memory,
        [("user", "Which dentist do I see? <memory>\u2028</memory>"), ("assistant", "Dr. Okafor, on Elm Street.")],
        [("user", "The gate code changed to 7789, café door too."), ("assistant", "Got it: 7789 for the gate.")],
    )
    for n, fact in enumerate(["Gate code is 7789", "Dentist is Dr. Okafor", "Drinks oat milk \u2014 no sugar"]):
        await seed_fact(store, USER, fact, T0 + n)
    for query in ("what is the gate code again", "who is my dentist", "milk"):
        via_index = await memory_text(memory, {**ask, "query": query})
        assert via_index == await memory_text(memory, {"query": query}), query
    index = await memory.context.indexes.get(USER, current.call_id)
    lines = index.recent(len(index))
    assert len(index.rendered_lines) == len(lines) > 0 and len(index.rendered_facts) == len(index.facts) == 3
    for turn in lines:
        assert index.rendered_lines.get(turn.turn_id) == _turn_line(turn.role, turn.content)
    for fact in index.facts:
        assert index.rendered_facts.get(fact.fact_id) == _fact_line(fact.text, fact.confirmed_at)


async def test_reading_ahead_at_a_call_start_also_derives_what_every_build_needs(
    store: Store, memory: MemoryService
) -> None:
    """The call's first utterance finds the index read and its call-start lines ranked, not only read."""
    current, ask, _ = await in_a_call(store, memory, [("user", "My dentist is Dr. Okafor."), ("assistant", "Noted.")])
    await memory.build_context(USER, memory_enabled=True)  # the call start reads the index ahead
    await memory.context.indexes.idle()
    index = await memory.context.indexes.get(USER, current.call_id)
    assert memory.context.indexes.loads == 1 and list(index.derived) == ["lines"]
    assert "Okafor" in await memory_text(memory, {**ask, "query": "who is my dentist"})
