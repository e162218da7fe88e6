"""`/forget item` and `/forget call` suggestions answer Discord in time while another program holds the database's
lock, on SQLite and on PostgreSQL.

An autocomplete cannot be deferred: its answer (callback 8) is the suggestions, and Discord takes it within 3 s
(discord-testing §4.3; the fake Discord refuses a later one with 404 10062). The store may wait 4-5 s behind
another writer, so the suggestions wait for it at most `OFFER_WAIT_SECONDS` and then say the memory is busy. The
lock is held for 4 s from a second connection: on SQLite ``BEGIN IMMEDIATE`` with a write of the bot's own already
waiting for it (its reads queue behind that write), on PostgreSQL ``LOCK TABLE ... IN ACCESS EXCLUSIVE MODE`` on
the tables the suggestions read (as a migration or ``VACUUM FULL`` would)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

from bot.i18n import english
from bot.memory.forget_requests import OFFER_WAIT_SECONDS
from bot.store.models import ChatRecord
from standins.discord_gateway import FakeDiscord
from standins.factories import seed_fact
from standins.harness import CallWorld, call_world
from tests.cogs.conftest import SimBot
from tests.cogs.test_acknowledge_first import HOLD_SECONDS, WriteLock

DISCORD_SECONDS = 3.0
ALICE = 5_001
T0 = 1_780_000_000.0
BUSY = english()("memory.autocomplete_busy")


@pytest_asyncio.fixture(params=["sqlite", "postgresql"])
async def world(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[CallWorld]:
    url = request.getfixturevalue("postgres_url") if request.param == "postgresql" else None
    async with call_world(tmp_path, start_web=False, database_url=url) as w:
        w.database_url = url  # type: ignore[attr-defined]
        yield w


@contextlib.asynccontextmanager
async def database_locked(world: CallWorld) -> AsyncIterator[None]:
    """Another program holds the lock the bot's reads wait for, for `HOLD_SECONDS`."""
    url: str | None = world.database_url  # type: ignore[attr-defined]
    if url is None:
        async with WriteLock(world.settings.memory.database_path, HOLD_SECONDS):
            queued = asyncio.create_task(world.store.set_meta("test.queued_write", "waits for the lock"))
            await asyncio.sleep(0)  # it now holds the store's connection, waiting for the lock
            yield
            await queued
        return
    holder = await asyncpg.connect(url)
    try:
        await holder.execute("BEGIN")
        await holder.execute("LOCK TABLE facts, calls, chats, turns IN ACCESS EXCLUSIVE MODE")
        release = asyncio.create_task(asyncio.sleep(HOLD_SECONDS))
        yield
        await release
        await holder.execute("COMMIT")
    finally:
        await holder.close()


async def suggestions(fake: FakeDiscord, option: str, typed: str = "") -> tuple[float, list[dict[str, Any]]]:
    """Alice types into `/forget <option>`: how long Discord waited for the suggestions, and what they were."""
    token = await fake.autocomplete("forget", ALICE, option, typed, subcommand=option)
    pushed = time.monotonic()
    kind, body = await fake.next_response(token, timeout=HOLD_SECONDS + 10)
    assert (kind, body["type"]) == ("callback", 8), (kind, body)
    return time.monotonic() - pushed, body["data"]["choices"]


async def test_forget_suggestions_answer_in_time_behind_a_database_lock(
    bot: SimBot, fake: FakeDiscord, world: CallWorld
) -> None:
    store = world.store
    [fact] = [await seed_fact(store, ALICE, "Grows tomatoes on the balcony", T0)]
    await store.create_chat(ChatRecord("chat-alice", ALICE, None, False, T0, T0, ended_at=T0 + 5))
    for n, (role, content) in enumerate([("user", "Tell me about tides."), ("assistant", "Gladly.")]):
        await store.append_chat_turn("chat-alice", ALICE, role, content, T0 + n)

    _, facts = await suggestions(fake, "item")
    assert facts == [{"name": "Grows tomatoes on the balcony", "value": str(fact.fact_id)}]
    _, chats = await suggestions(fake, "call")
    assert [c["value"] for c in chats] == ["chat:chat-alice"]

    async with database_locked(world):
        locked_at = time.monotonic()
        (item_seconds, item), (call_seconds, call) = await asyncio.gather(
            suggestions(fake, "item", "tom"), suggestions(fake, "call")
        )
        answered_while_locked = time.monotonic() - locked_at < HOLD_SECONDS
    assert answered_while_locked, "the suggestions came only once the lock was released"
    assert item_seconds < DISCORD_SECONDS and call_seconds < DISCORD_SECONDS, (item_seconds, call_seconds)
    assert item_seconds >= OFFER_WAIT_SECONDS * 0.9, "the store was asked first"
    assert item == call == [{"name": BUSY, "value": "busy"}]

    _, facts = await suggestions(fake, "item", "tom")
    assert [c["value"] for c in facts] == [str(fact.fact_id)], "the lock gone, the member's facts are offered again"
    assert [f.text for f in await store.list_facts(ALICE)] == ["Grows tomatoes on the balcony"]


async def test_picking_the_busy_suggestion_forgets_nothing(bot: SimBot, fake: FakeDiscord, world: CallWorld) -> None:
    await seed_fact(world.store, ALICE, "Plays the cello", T0)
    token = await fake.slash("forget", ALICE, {"item": "busy"}, "item")
    assert (await fake.next_response(token))[1]["type"] == 5
    kind, body = await fake.next_response(token)
    assert kind == "followup" and body["content"] == english()("memory.not_found")
    assert [f.text for f in await world.store.list_facts(ALICE)] == ["Plays the cello"]
