"""`python -m bot copy-db`: a whole database moves between backends, and the copy is proven member by member."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from bot import cli
from bot.config import Settings
from bot.memory.service import MemoryService
from bot.store import copy as copy_module
from bot.store.copy import store_for_url
from bot.store.models import ChatRecord, Conversation
from bot.store.repository import Store
from bot.store.vectors import pack
from standins.factories import make_call, seed_fact

MEMBERS = [101, 202, 303]


async def seed(store: Store) -> None:
    """Several members, written through the production paths: calls with transcripts, chats, facts learned and
    superseded by post-call extraction, consent, a paused member, server settings, a queued job."""
    memory = MemoryService(store, budget_tokens=1500, persona="p")
    for n, user_id in enumerate(MEMBERS):
        await store.set_consent(user_id, True, 10.0 + n)
        call = make_call(user_id=user_id, state="active", guild_id=7 if n else None)
        await store.create_call(call)
        await memory.record_snapshot(
            call, [("assistant", "Hi!"), ("user", f"I am member {user_id} and I like tea")], max_history=32
        )
        await store.transition_call(call.call_id, ["active"], "ended", ended_at=call.started_at + 60)
        await store.enqueue_job("extract", call.call_id, 20.0)
        job = await store.claim_job(30.0, lease_seconds=60)
        assert job is not None
        old = await seed_fact(store, user_id, "Likes coffee", 5.0, call_id=call.call_id)
        await store.apply_extraction(
            job.job_id, job.attempts, user_id, 40.0, Conversation("call", call.call_id),
            new_facts=[("Likes tea, not coffee", [old.fact_id])], summary=f"Member {user_id} talked about tea.",
        )  # fmt: skip
        chat = ChatRecord(f"chat-{user_id}", user_id, 7, private=False, started_at=50.0, last_message_at=50.0)
        await store.create_chat(chat)
        await store.append_chat_turn(chat.chat_id, user_id, "user", "hello from the chat", 51.0)
        await store.append_chat_turn(chat.chat_id, user_id, "assistant", "hello back", 52.0)
    await store.set_memory_enabled(MEMBERS[-1], False, 60.0)
    await store.update_guild_settings(7, 1.0, persona="A pirate", retention_days=30, calls_enabled=False)
    await store.set_meta("commands_hash", "abc")
    await store.remember_notice("n-1", 1.0)


async def exports(url: str) -> dict[int, dict]:
    store = store_for_url(url)
    await store.open()
    try:
        result = {}
        for user_id in MEMBERS:
            data = await store.export_user(user_id)
            data.pop("exported_at")
            result[user_id] = data
        return result
    finally:
        await store.close()


async def vectors(url: str) -> dict[int, list]:
    store = store_for_url(url)
    await store.open()
    try:
        return {user_id: await store.member_vectors(user_id, "embed-model") for user_id in MEMBERS}
    finally:
        await store.close()


async def copy(source: str, target: str) -> int:
    return await cli.copy_db(Settings(), argparse.Namespace(source=source, target=target))


async def test_sqlite_to_postgresql_and_back_gives_identical_exports(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sqlite_url = f"sqlite:///{tmp_path / 'source.db'}"
    source = store_for_url(sqlite_url)
    await source.open()
    await seed(source)
    for n, user_id in enumerate(MEMBERS):  # dense retrieval's vectors of each member's call lines
        lines = await source.recent_turns_of(user_id, 10)
        rows = [("turn", t.turn_id, pack(np.full(4, n + t.seq, dtype=np.float32))) for t in lines if t.call_id]
        await source.put_vectors(user_id, "embed-model", rows)
    await source.close()
    before = await exports(sqlite_url)
    assert all(len(e["calls"][0]["turns"]) == 2 and len(e["facts"]) == 2 for e in before.values())
    embedded = await vectors(sqlite_url)
    assert all(len(v) == 2 for v in embedded.values())

    assert await copy(sqlite_url, postgres_url) == 0
    assert "Every member's export is identical on both sides (3 members)" in capsys.readouterr().out
    assert await exports(postgres_url) == before

    assert await vectors(postgres_url) == embedded

    back = f"sqlite:///{tmp_path / 'back.db'}"
    assert await copy(postgres_url, back) == 0
    assert await exports(back) == before
    assert await vectors(back) == embedded

    # The copy is a working database: search finds the copied lines, new rows get fresh ids, settings came along.
    target = store_for_url(postgres_url)
    await target.open()
    try:
        hits = await target.search_turns(MEMBERS[0], "tea", 5)
        assert [t.user_id for t in hits] == [MEMBERS[0]]
        fact = await seed_fact(target, MEMBERS[0], "New fact", 70.0)
        assert fact.fact_id > max(f["id"] for e in before.values() for f in e["facts"])
        settings = await target.get_guild_settings(7)
        assert (settings.persona, settings.retention_days, settings.calls_enabled) == ("A pirate", 30, False)
        assert await target.get_meta("commands_hash") == "abc"
        assert await target.job_state("extract", before[MEMBERS[0]]["calls"][0]["id"]) == "done"
        chat_turn = (await target.chat_turns(f"chat-{MEMBERS[0]}"))[0]
        assert await target.put_vectors(MEMBERS[0], "embed-model", [("turn", chat_turn.turn_id, b"\0" * 16)]) == 1
        newest = (await target.member_vectors(MEMBERS[0], "embed-model"))[-1]
        assert newest.vector_id > max(v.vector_id for vs in embedded.values() for v in vs)
    finally:
        await target.close()


async def test_a_copy_that_differs_is_refused_and_a_non_empty_target_too(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sqlite_url = f"sqlite:///{tmp_path / 'source.db'}"
    source = store_for_url(sqlite_url)
    await source.open()
    await seed(source)
    await source.close()
    real_write = copy_module._PostgresTables.write

    async def lose_one_line(self, table, columns, rows):  # a copy that silently drops a row
        await real_write(self, table, columns, rows[1:] if table == "turns" else rows)

    monkeypatch.setattr(copy_module._PostgresTables, "write", lose_one_line)
    with pytest.raises(cli.CommandFailed, match=r"differs from the source for member 101"):
        await copy(sqlite_url, postgres_url)
    monkeypatch.undo()
    with pytest.raises(cli.CommandFailed, match=r"target database is not empty"):
        await copy(sqlite_url, postgres_url)
