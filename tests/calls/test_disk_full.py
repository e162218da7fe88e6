"""A full disk mid-call: hang-up still stops the agent, the member is told plainly, and the call is stored once
there is space again (issue 13, item 10). SQLite's own page limit makes the database file full for real."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.i18n import english
from bot.store.repository import StorageFull
from cogs.calls import ended_text
from standins.factories import seed_fact
from standins.harness import CallWorld, call_world
from tests.calls.test_lifecycle import ALICE, start_call, stored


async def fill_the_disk(world: CallWorld) -> None:
    async with world.store.db.execute("PRAGMA page_count") as cur:
        pages = (await cur.fetchone())[0]
    async with world.store.db.execute(f"PRAGMA max_page_count = {pages}"):
        pass


async def free_space(world: CallWorld) -> None:
    async with world.store.db.execute("PRAGMA max_page_count = 1073741823"):
        pass


def long_lines(n: int) -> list[tuple[str, str]]:
    return [("user" if i % 2 == 0 else "assistant", f"line {i} " + "words spoken at length " * 200) for i in range(n)]


async def test_hang_up_on_a_full_disk_stops_the_agent_and_stores_the_call_later(tmp_path: Path) -> None:
    async with call_world(tmp_path, webhooks=False) as world:  # no webhook 103 stores the call meanwhile
        started, agent = await start_call(world)
        convo = long_lines(6)
        world.emu.script(agent.agent_id, convo)
        await fill_the_disk(world)
        with pytest.raises(StorageFull):
            await seed_fact(world.store, ALICE, "x " * 5000, world.clock())  # the disk is full for real

        ended = await world.calls.hang_up(ALICE)

        assert world.emu.agent(agent.agent_id).status == "STOPPED"
        assert not ended.saved
        text = ended_text(ended, english())
        assert "storage is full" in text and "saved automatically" in text and "went wrong" not in text
        assert await stored(world, started.call_id) == []

        await free_space(world)
        assert await world.calls.save_unsaved() == 1
        call = await world.store.get_call(started.call_id)
        assert call.state == "ended" and call.end_reason == "hangup"
        assert await stored(world, started.call_id) == [("assistant", world.settings.agora.greeting), *convo]
        assert await world.store.job_state("post_call", started.call_id) == "pending"


FULL_DISK = """
CREATE FUNCTION pretend_disk_full() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = 'disk_full';
END $$;
CREATE TRIGGER full_calls BEFORE INSERT OR UPDATE ON calls FOR EACH ROW EXECUTE FUNCTION pretend_disk_full();
CREATE TRIGGER full_turns BEFORE INSERT OR UPDATE ON turns FOR EACH ROW EXECUTE FUNCTION pretend_disk_full();
CREATE TRIGGER full_jobs BEFORE INSERT OR UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION pretend_disk_full();
"""
SPACE_AGAIN = """
DROP TRIGGER full_calls ON calls; DROP TRIGGER full_turns ON turns; DROP TRIGGER full_jobs ON jobs;
DROP FUNCTION pretend_disk_full();
"""


async def test_a_full_disk_on_postgresql_is_handled_like_sqlite(tmp_path: Path, postgres_url: str) -> None:
    """The server's disk_full error (SQLSTATE 53100, raised here by triggers as the server would) is StorageFull."""
    async with call_world(tmp_path, webhooks=False, database_url=postgres_url) as world:
        started, agent = await start_call(world)
        convo = long_lines(4)
        world.emu.script(agent.agent_id, convo)
        await world.store.pool.execute(FULL_DISK)

        ended = await world.calls.hang_up(ALICE)

        assert world.emu.agent(agent.agent_id).status == "STOPPED"
        assert not ended.saved and "storage is full" in ended_text(ended, english())
        assert await stored(world, started.call_id) == []

        await world.store.pool.execute(SPACE_AGAIN)
        assert await world.calls.save_unsaved() == 1
        call = await world.store.get_call(started.call_id)
        assert call.state == "ended" and call.end_reason == "hangup"
        assert await stored(world, started.call_id) == [("assistant", world.settings.agora.greeting), *convo]
