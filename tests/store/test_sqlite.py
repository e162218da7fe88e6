"""The SQLite store: migrations, pragmas, conditional transitions, queue, export and real deletion."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest

from bot.memory.service import MemoryService
from bot.store.live_plan import LivePlanNeeds, LiveWrite
from bot.store.migrations import LATEST_VERSION, MIGRATIONS
from bot.store.models import (
    ChatRecord,
    Conversation,
    ForgetResult,
    NewTurn,
    TurnRecord,
    TurnsWrite,
)
from bot.store.repository import SchemaTooNew, Store, TurnsChanged
from bot.store.sqlite import SqliteStore, _split_sql
from standins.factories import extract, make_call, seed_fact, seed_summary
from standins.harness import eventually, settled


async def test_fresh_database_is_migrated_with_safe_pragmas(sqlite_store: SqliteStore) -> None:
    store = sqlite_store
    assert await store.schema_version() == LATEST_VERSION
    async with store.db.execute("PRAGMA journal_mode") as cur:
        assert (await cur.fetchone())[0] == "wal"
    async with store.db.execute("PRAGMA foreign_keys") as cur:
        assert (await cur.fetchone())[0] == 1
    async with store.db.execute("PRAGMA secure_delete") as cur:
        assert (await cur.fetchone())[0] == 1


async def test_reopening_does_not_migrate_twice(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    for _ in range(2):
        s = SqliteStore(path)
        await s.open()
        await s.close()
    rows = sqlite3.connect(path).execute("SELECT version FROM schema_migrations").fetchall()
    assert rows == [(v,) for v in range(1, LATEST_VERSION + 1)]


async def test_database_newer_than_the_code_is_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    s = SqliteStore(path)
    await s.open()
    await s.close()
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO schema_migrations VALUES (?, 'from the future', 0)", (LATEST_VERSION + 1,))
    with pytest.raises(SchemaTooNew, match="upgrade the bot"):
        await SqliteStore(path).open()


async def test_only_one_of_two_racing_transitions_wins(store: SqliteStore) -> None:
    call = make_call()
    await store.create_call(call)
    first = await store.transition_call(call.call_id, ["active"], "ending", end_reason="hangup")
    second = await store.transition_call(call.call_id, ["active"], "ending", end_reason="idle")
    assert (first, second) == (True, False)
    assert (await store.get_call(call.call_id)).end_reason == "hangup"


async def test_job_queue_is_durable_once_per_ref_and_leases_expire(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    s = SqliteStore(path)
    await s.open()
    assert await s.enqueue_job("extract", "call-1", 1.0)
    assert not await s.enqueue_job("extract", "call-1", 2.0)
    job = await s.claim_job(10.0, lease_seconds=60)
    assert job is not None and job.attempts == 1
    assert await s.claim_job(11.0, lease_seconds=60) is None
    await s.close()  # the worker "crashes" holding the job
    s = SqliteStore(path)
    await s.open()
    again = await s.claim_job(100.0, lease_seconds=60)
    assert again is not None and again.ref_id == "call-1" and again.attempts == 2
    await s.finish_job(again.job_id, 101.0)
    assert await s.job_state("extract", "call-1") == "done"
    assert await s.claim_job(1000.0, lease_seconds=60) is None
    await s.close()


async def test_notice_ids_are_remembered_once(store: SqliteStore) -> None:
    assert await store.remember_notice("n-1", time.time())
    assert not await store.remember_notice("n-1", time.time())


async def test_full_text_search_is_scoped_to_the_user(store: SqliteStore, memory: MemoryService) -> None:
    mine, theirs = make_call(user_id=1), make_call(user_id=2)
    for call in (mine, theirs):
        await store.create_call(call)
        await memory.record_snapshot(call, [("user", "my dog is called Biscuit")], max_history=32)
    hits = await store.search_turns(1, "biscuit dog", 10)
    assert [t.user_id for t in hits] == [1]
    assert await store.search_turns(1, '" OR * NEAR(', 10) == []


async def test_search_stems_words_and_can_leave_out_the_current_call(store: SqliteStore, memory) -> None:
    earlier, current = make_call(user_id=1, state="ended"), make_call(user_id=1)
    for call, line in ((earlier, "I renewed the library card"), (current, "renewal of my card, please")):
        await store.create_call(call)
        await memory.record_snapshot(call, [("user", line)], max_history=32)
    ranked = await store.rank_turns(1, "renewing", 10)
    assert sorted(t.content for t, _ in ranked) == ["I renewed the library card", "renewal of my card, please"]
    assert all(score > 0 for _, score in ranked)
    assert [t.call_id for t in await store.search_turns(1, "renew", 10, exclude_call_id=current.call_id)] == [
        earlier.call_id
    ]


async def test_fact_ranking_is_scoped_to_the_member_and_to_current_facts(store: SqliteStore) -> None:
    mine = await seed_fact(store, 1, "Drinks green tea every morning", 1.0)
    old = await seed_fact(store, 1, "Drinks black tea", 1.0)
    newer = await seed_fact(store, 1, "Switched from black tea to coffee", 2.0, replaces=[old.fact_id])
    await seed_fact(store, 2, "Drinks tea", 1.0)
    ranked = await store.rank_facts(1, "which teas", 10)
    assert {f.fact_id for f, _ in ranked} == {mine.fact_id, newer.fact_id}
    assert all(f.user_id == 1 and score > 0 for f, score in ranked)


async def test_migration_3_rebuilds_the_full_text_indexes_with_stemming(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL)")
    for statement in _split_sql(MIGRATIONS[0][2]):
        db.execute(statement)
    db.execute("INSERT INTO schema_migrations VALUES (1, 'initial schema', 0)")
    db.execute(
        "INSERT INTO chats (chat_id, user_id, started_at, last_message_at) VALUES ('c1', 7, 0, 0)",
    )
    db.execute(
        "INSERT INTO turns (user_id, chat_id, seq, role, content, spoken_at, source) "
        "VALUES (7, 'c1', 0, 'user', 'We booked the flights', 0, 'text')"
    )
    db.execute(
        "INSERT INTO facts (user_id, text, created_at, updated_at, confirmed_at) VALUES (7, 'Owns cats', 0, 0, 0)"
    )
    db.commit()
    assert db.execute("SELECT rowid FROM turns_fts WHERE turns_fts MATCH 'flight'").fetchall() == []
    db.close()
    s = SqliteStore(path)
    await s.open()
    try:
        assert await s.schema_version() == LATEST_VERSION
        assert [t.content for t in await s.search_turns(7, "flight booking", 5)] == ["We booked the flights"]
        assert [f.text for f in await s.search_facts(7, "cat", 5)] == ["Owns cats"]
    finally:
        await s.close()


async def test_retention_purges_old_transcripts_of_that_server_only(store: SqliteStore, memory) -> None:
    old = make_call(guild_id=5, state="ended", started_at=time.time() - 40 * 86400)
    recent = make_call(guild_id=5, state="ended")
    elsewhere = make_call(guild_id=6, state="ended", started_at=time.time() - 40 * 86400)
    for call in (old, recent, elsewhere):
        await store.create_call(call)
        await memory.record_snapshot(call, [("user", f"said in {call.call_id}")], max_history=32)
    fact = await seed_fact(store, 42, "Likes tea", time.time(), call_id=old.call_id)
    removed = await memory.purge_expired(5, retention_days=30)
    assert removed == 1
    assert await store.call_turns(old.call_id) == []
    assert len(await store.call_turns(recent.call_id)) == 1
    assert len(await store.call_turns(elsewhere.call_id)) == 1
    assert (await store.get_fact(fact.fact_id)) is not None, "facts stay until forgotten"


async def test_forgetting_a_call_removes_facts_that_came_only_from_it(store: SqliteStore, memory) -> None:
    a, b = make_call(state="ended"), make_call(state="ended")
    for call in (a, b):
        await store.create_call(call)
    only_a = await seed_fact(store, 42, "Has a cat named Miso", 1.0, call_id=a.call_id)
    both = await seed_fact(store, 42, "Lives in Lyon", 1.0, call_id=a.call_id)
    await extract(store, 42, 2.0, call_id=b.call_id, confirmed=[both.fact_id])
    result = await memory.forget_conversation(42, "call", a.call_id)
    assert result is not None and result.facts == 1 and result.calls == 1
    assert await store.get_fact(only_a.fact_id) is None
    assert await store.get_fact(both.fact_id) is not None
    assert await memory.forget_conversation(99, "call", b.call_id) is None, "another user's call is untouchable"


async def test_what_forgetting_a_conversation_removes_is_counted_first_without_deleting_anything(
    store: SqliteStore, memory
) -> None:
    """``forget_preview``, on every store: the lines and the facts that came only from the call or chat, as
    forgetting it then removes them."""
    await store.set_consent(42, True, 1.0)
    a, b = make_call(42, state="active"), make_call(42, state="ended")
    for call in (a, b):
        await store.create_call(call)
    lines = [NewTurn("user", "My cat is Miso", 10.0, 0), NewTurn("assistant", "Lovely name", 11.0, 1)]
    await store.apply_call_turns(a.call_id, 42, lines, [], anchored=True, checkpoint_at=11.0)
    await store.transition_call(a.call_id, ["active"], "ended", ended_at=20.0)
    await seed_fact(store, 42, "Has a cat named Miso", 1.0, call_id=a.call_id)
    await seed_fact(store, 42, "Works nights", 1.0, call_id=a.call_id)
    both = await seed_fact(store, 42, "Lives in Lyon", 1.0, call_id=a.call_id)
    await extract(store, 42, 2.0, call_id=b.call_id, confirmed=[both.fact_id])
    await store.create_chat(ChatRecord("chat-42", 42, None, False, 3.0, 3.0, ended_at=4.0))
    await store.append_chat_turn("chat-42", 42, "user", "Any tips for tea?", 3.0)
    await seed_fact(store, 42, "Likes tea", 3.0, chat_id="chat-42")

    call_preview = await store.forget_preview(Conversation("call", a.call_id))
    chat_preview = await store.forget_preview(Conversation("chat", "chat-42"))
    assert (call_preview.turns, call_preview.facts, call_preview.calls, call_preview.chats) == (2, 2, 1, 0)
    assert (chat_preview.turns, chat_preview.facts, chat_preview.calls, chat_preview.chats) == (1, 1, 0, 1)
    assert await store.forget_preview(Conversation("call", "no-such-call")) == ForgetResult()
    assert await store.count_facts(42) == 4 and await store.count_turns(42) == 3, "a preview deletes nothing"

    assert await memory.forget_conversation(42, "call", a.call_id) == call_preview
    assert await memory.forget_conversation(42, "chat", "chat-42") == chat_preview
    assert [f.text for f in await store.list_facts(42)] == ["Lives in Lyon"]


async def test_forget_all_leaves_no_trace_in_any_page_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "forget.db"
    store = SqliteStore(path)
    await store.open()
    memory = MemoryService(store, budget_tokens=1500, persona="p")
    markers = ["zqxmarkeralpha", "zqxmarkerbravo", "zqxmarkercharlie"]
    call = make_call(user_id=77, state="ended")
    await store.create_call(call)
    await memory.record_snapshot(
        call,
        [("user", f"my secret word is {markers[0]}"), ("assistant", f"noted {markers[1]}")],
        max_history=32,
    )
    await seed_fact(store, 77, f"Secret word is {markers[2]}", 1.0, call_id=call.call_id)
    await seed_summary(store, f"Talked about {markers[0]}", call_id=call.call_id)
    keeper = make_call(user_id=78, state="ended")
    await store.create_call(keeper)
    await memory.record_snapshot(keeper, [("user", "zqxkeepme stays")], max_history=32)
    await store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def file_bytes() -> bytes:
        data = path.read_bytes()
        wal = path.with_name(path.name + "-wal")
        return data + (wal.read_bytes() if wal.exists() else b"")

    assert all(m.encode() in file_bytes() for m in markers), "the markers were written (the check can fail)"
    result = await memory.forget_everything(77)
    await memory.wait_scrubbed()
    assert result.turns == 2 and result.facts == 1 and result.calls == 1
    raw = file_bytes()
    assert [m for m in markers if m.encode() in raw] == []
    assert b"zqxkeepme" in raw
    export = await memory.export(77)
    assert export["facts"] == [] and export["calls"] == [] and export["settings"] is None
    await store.close()


async def test_export_contains_everything_stored_about_the_user(store: SqliteStore, memory) -> None:
    call = make_call(user_id=5, state="ended")
    await store.create_call(call)
    await store.set_consent(5, True, 1.0)
    await memory.record_snapshot(call, [("assistant", "Hi"), ("user", "I'm Ada")], max_history=32)
    await seed_fact(store, 5, "Name is Ada", 2.0, call_id=call.call_id)
    await seed_summary(store, "Introductions.", call_id=call.call_id)
    export = await memory.export(5)
    assert export["user_id"] == "5"
    assert export["settings"]["consent"] == "remember"
    assert [f["text"] for f in export["facts"]] == ["Name is Ada"]
    assert export["calls"][0]["summary"] == "Introductions."
    assert [t["content"] for t in export["calls"][0]["turns"]] == ["Hi", "I'm Ada"]


async def test_memory_page_is_paginated_with_counts(store: SqliteStore, memory) -> None:
    for i in range(20):
        await seed_fact(store, 9, f"fact number {i}", float(i))
    first = await memory.page(9, page=0, facts_per_page=8)
    third = await memory.page(9, page=2, facts_per_page=8)
    assert first.fact_count == 20
    assert [f.text for f in first.facts][:2] == ["fact number 19", "fact number 18"]
    assert len(third.facts) == 4


async def test_the_memory_fence_refuses_writes_started_before_a_forget_or_pause(store: SqliteStore) -> None:
    from bot.store.models import NewTurn

    call = make_call(user_id=5)
    await store.create_call(call)
    chat = ChatRecord("chat-fence", 5, None, False, 1.0, 1.0)
    await store.create_chat(chat)
    line = [NewTurn("user", "hello", 1.0, 0, 0, False, 0)]
    before = await store.memory_generation(5)
    assert await store.apply_call_turns(call.call_id, 5, line, [], anchored=True, checkpoint_at=1.0, generation=before)

    await store.forget_fact(5, (await seed_fact(store, 5, "a fact", 1.0)).fact_id)  # any forget moves the fence
    assert await store.memory_generation(5) == before + 1
    late = [NewTurn("user", "late", 2.0, 1, 0, False, 0)]
    assert not await store.apply_call_turns(
        call.call_id, 5, late, [], anchored=True, checkpoint_at=2.0, generation=before
    )
    assert await store.append_chat_turn(chat.chat_id, 5, "user", "late", 2.0, generation=before) is None
    now = await store.memory_generation(5)
    assert await store.append_chat_turn(chat.chat_id, 5, "user", "fresh", 2.0, generation=now)

    await store.set_memory_enabled(5, False, 3.0)  # a pause moves it too, and stops writes while paused
    assert await store.memory_generation(5) == now + 1
    assert not await store.apply_call_turns(call.call_id, 5, late, [], anchored=True, checkpoint_at=3.0)
    assert [t.content for t in await store.call_turns(call.call_id)] == ["hello"]
    assert await store.count_turns(6) == 0


async def test_a_stale_turns_version_is_refused_and_leases_work_on_every_store(store: SqliteStore) -> None:
    """Run on each backend and behind the encrypting layer: the version check and the call leases reach the
    backend unchanged, and the stored line reads back as written."""
    call = make_call(42, state="active")
    await store.create_call(call)
    line = [NewTurn("user", "my sister Maren lives in Tromsø", 10.0, 0)]
    assert await store.apply_call_turns(
        call.call_id, 42, line, [], anchored=True, checkpoint_at=10.0, expected_version=0
    )
    with pytest.raises(TurnsChanged):
        await store.apply_call_turns(call.call_id, 42, line, [], anchored=True, checkpoint_at=11.0, expected_version=0)
    assert [t.content for t in await store.call_turns(call.call_id)] == ["my sister Maren lives in Tromsø"]
    assert await store.take_call_lease(call.call_id, "process-a", 100.0, 130.0)
    assert not await store.take_call_lease(call.call_id, "process-b", 110.0, 140.0)
    await store.release_call_leases("process-a")
    assert await store.take_call_lease(call.call_id, "process-b", 110.0, 140.0)


async def generation_and_enabled(store: SqliteStore, user_id: int) -> tuple[int, bool]:
    """The member's memory generation, and whether their memory is on (no user row yet: on)."""
    user = await store.get_user(user_id)
    return await store.memory_generation(user_id), user is None or user.memory_enabled


async def test_a_live_turn_key_is_stored_with_its_line_or_not_at_all_on_every_store(store: SqliteStore) -> None:
    """Live recall writes a line and its turn key in one transaction: both land, or (fence, stale version)
    neither does."""
    assert await generation_and_enabled(store, 43) == (0, True)  # no user row yet: memory on
    call = make_call(43, state="active")
    await store.create_call(call)
    await store.set_consent(43, True, 1.0)
    generation, enabled = await generation_and_enabled(store, 43)
    assert enabled
    line = [NewTurn("user", "the vet is Dr. Okafor", 10.0, 0)]
    assert await store.apply_call_turns(
        call.call_id, 43, line, [], anchored=True, checkpoint_at=10.0, generation=generation, live_key="1:user"
    )
    assert await live_key_stored(store, call.call_id, "1:user")

    stale = [NewTurn("assistant", "noted", 11.0, 1)]
    with pytest.raises(TurnsChanged):
        await store.apply_call_turns(
            call.call_id, 43, stale, [], anchored=True, checkpoint_at=11.0, expected_version=0, live_key="1:assistant"
        )
    assert not await live_key_stored(store, call.call_id, "1:assistant")

    await store.set_memory_enabled(43, False, 12.0)
    assert await generation_and_enabled(store, 43) == (generation + 1, False)
    assert not await store.apply_call_turns(
        call.call_id, 43, stale, [], anchored=True, checkpoint_at=12.0, generation=generation, live_key="2:user"
    )
    assert not await live_key_stored(store, call.call_id, "2:user")
    assert [t.content for t in await store.call_turns(call.call_id)] == ["the vet is Dr. Okafor"]


async def live_key_stored(store: Store, call_id: str, turn_key: str) -> bool:
    """Whether live recall's turn key is in the database (read there: no store operation answers only that)."""
    backend = getattr(store, "backend", store)
    if isinstance(backend, SqliteStore):
        async with backend.db.execute(
            "SELECT 1 FROM live_turns WHERE call_id = ? AND turn_key = ?", (call_id, turn_key)
        ) as cur:
            return await cur.fetchone() is not None
    sql = "SELECT 1 FROM live_turns WHERE call_id = $1 AND turn_key = $2"
    return await backend.pool.fetchval(sql, call_id, turn_key) is not None


async def test_a_live_write_reads_the_tail_asks_its_plan_and_writes_line_and_key_together_on_every_store(
    store: SqliteStore,
) -> None:
    """`write_live_turn`: the plan sees the call's last lines (every one when it asks), its write lands with the
    turn key in the same transaction, a retry is SEEN without asking the plan, and a fenced write is REFUSED."""
    call = make_call(44, state="active")
    await store.create_call(call)
    await store.set_consent(44, True, 1.0)
    lines = [NewTurn("user" if i % 2 == 0 else "assistant", f"line {i}", 10.0 + i, i) for i in range(6)]
    assert await store.apply_call_turns(call.call_id, 44, lines, [], anchored=False, checkpoint_at=16.0)
    generation = await store.memory_generation(44)
    seen: list[tuple[list[str], bool, bool]] = []

    def plan(stored: list[TurnRecord], whole: bool, anchored: bool) -> TurnsWrite | LivePlanNeeds | None:
        seen.append(([t.content for t in stored], whole, anchored))
        if not whole:
            return LivePlanNeeds.WHOLE_CALL
        return TurnsWrite([NewTurn("user", "the vet is Dr. Okafor", 20.0, len(stored))], [], True)

    assert (
        await store.write_live_turn(
            call.call_id, 44, "7:user", tail=3, plan=plan, checkpoint_at=20.0, generation=generation
        )
        is LiveWrite.WRITTEN
    )
    assert seen == [(["line 3", "line 4", "line 5"], False, False), ([f"line {i}" for i in range(6)], True, False)]
    stored = await store.call_turns(call.call_id)
    assert [t.content for t in stored][-2:] == ["line 5", "the vet is Dr. Okafor"]
    assert (await store.get_call(call.call_id)).history_anchored  # type: ignore[union-attr]
    assert await live_key_stored(store, call.call_id, "7:user")

    def not_asked(stored: list[TurnRecord], whole: bool, anchored: bool) -> TurnsWrite | LivePlanNeeds | None:
        raise AssertionError("a retried turn's plan was asked")

    assert (
        await store.write_live_turn(
            call.call_id, 44, "7:user", tail=3, plan=not_asked, checkpoint_at=20.5, generation=generation
        )
        is LiveWrite.SEEN
    )

    def nothing_new(stored: list[TurnRecord], whole: bool, anchored: bool) -> TurnsWrite | LivePlanNeeds | None:
        assert anchored and not whole and stored[-1].content == "the vet is Dr. Okafor"
        return None

    assert (
        await store.write_live_turn(
            call.call_id, 44, "8:user", tail=3, plan=nothing_new, checkpoint_at=21.0, generation=generation
        )
        is LiveWrite.UNCHANGED
    )
    assert await live_key_stored(store, call.call_id, "8:user")
    assert len(await store.call_turns(call.call_id)) == 7

    await store.set_memory_enabled(44, False, 22.0)
    assert (
        await store.write_live_turn(
            call.call_id, 44, "9:user", tail=3, plan=plan, checkpoint_at=22.0, generation=generation
        )
        is LiveWrite.REFUSED
    )
    assert len(await store.call_turns(call.call_id)) == 7


async def test_a_call_with_its_members_memory_state_is_what_the_separate_reads_say_on_every_store(
    store: SqliteStore,
) -> None:
    """``call_memory_state`` (the live route's one read per turn) agrees with ``get_call``, ``memory_generation``,
    ``get_user`` and ``memory_stamp`` read one by one, through a pause, a new line and a forget, summary opened
    when encrypted."""
    assert await store.call_memory_state("no-such-call") is None

    async def separately(call_id: str, user_id: int) -> tuple[object, ...]:
        call = await store.get_call(call_id)
        return (call, *await generation_and_enabled(store, user_id), *await store.memory_stamp(user_id))

    async def together(call_id: str) -> tuple[object, ...]:
        state = await store.call_memory_state(call_id)
        assert state is not None
        assert state.stamp == (state.version, state.generation)
        return (state.call, state.generation, state.enabled, *state.stamp)

    ended = make_call(44, state="active")
    await store.create_call(ended)
    assert await together(ended.call_id) == await separately(ended.call_id, 44)  # no user row yet: memory on
    await store.set_consent(44, True, 1.0)
    await store.apply_call_turns(
        ended.call_id, 44, [NewTurn("user", "the vet is Dr. Okafor", 10.0, 0)], [], anchored=True, checkpoint_at=10.0
    )
    await store.transition_call(ended.call_id, ["active"], "ended", ended_at=20.0)
    call = make_call(44, state="active", summary="they asked about the vet")
    await store.create_call(call)
    before = await together(call.call_id)
    assert before == await separately(call.call_id, 44)
    await store.set_memory_enabled(44, False, 30.0)
    paused = await together(call.call_id)
    assert paused == await separately(call.call_id, 44)
    assert paused[2] is False and paused[1] != before[1]
    await store.set_memory_enabled(44, True, 31.0)
    await store.forget_call(44, ended.call_id)
    after = await together(call.call_id)
    assert after == await separately(call.call_id, 44) and after[3:] != before[3:]
    state = await store.call_memory_state(call.call_id)
    assert state is not None and state.call.summary == "they asked about the vet"


async def test_a_voice_turns_key_check_does_not_wait_behind_this_process_writes(sqlite_store: SqliteStore) -> None:
    """Another process holds the write lock: this process's next write waits for it (busy timeout), and so does
    everything queued behind it on the main connection; the key check of a voice turn (``call_memory_state``)
    reads on its own connection, answers at once, and sees what was committed."""
    store = sqlite_store
    call = make_call(user_id=7, state="active")
    await store.create_call(call)
    other = sqlite3.connect(store.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    write = asyncio.ensure_future(store.set_memory_enabled(7, False, time.time()))
    await asyncio.sleep(0.2)
    assert not write.done(), "the write waits for the other process"
    state = await asyncio.wait_for(store.call_memory_state(call.call_id), timeout=1)
    assert state is not None and state.call.call_id == call.call_id and state.enabled
    other.execute("COMMIT")
    other.close()
    await asyncio.wait_for(write, timeout=5)
    state = await store.call_memory_state(call.call_id)
    assert state is not None and not state.enabled, "the reader sees the write once committed"


async def test_the_wal_is_copied_into_the_database_beside_the_writes_and_starts_over(tmp_path: Path) -> None:
    """No commit copies the WAL into the database file (a pause of an fsync in one write in a few hundred): the
    store does it on its own connection every ``checkpoint_seconds``, and the WAL is then written from its start
    again instead of growing."""
    path = tmp_path / "m.db"
    store = SqliteStore(path, checkpoint_seconds=0.05)
    await store.open()
    memory = MemoryService(store, budget_tokens=1500, persona="p")
    wal = path.with_name("m.db-wal")
    try:
        async with store.db.execute("PRAGMA wal_autocheckpoint") as cursor:
            assert (await cursor.fetchone())[0] == 0

        async def talk(n: int) -> None:
            call = make_call(user_id=n, state="active")
            await store.create_call(call)
            lines = [
                ("user" if i % 2 else "assistant", f"Line {i} of member {n}. " + "words " * 800) for i in range(80)
            ]
            await memory.record_snapshot(call, lines, max_history=None)

        before = path.stat().st_size
        await talk(1)
        first = wal.stat().st_size
        assert first > 900_000
        await eventually(lambda: path.stat().st_size > before + first // 2, within=5)
        await settled(lambda: path.stat().st_size, quiet=10 * store.checkpoint_seconds)  # caught up with the WAL
        await talk(2)
        await eventually(lambda: path.stat().st_size > before + first, within=5)
        assert wal.stat().st_size < 1.5 * first, "the second call's pages went to the start of the WAL"
    finally:
        await store.close()
