"""SQLite's operations that run whole on the database thread (bot/store/sqlite/trips.py): what each writes and reads.

How many trips to the database thread each operation takes is measured by bench/calls.py (trips per operation),
not pinned here through aiosqlite's private entry point."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.store.columns import TURN_COLUMNS, turn_record
from bot.store.models import NewTurn, TurnRecord, TurnUpdate
from bot.store.repository import OpenCallExists, TurnsChanged
from bot.store.sqlite import SqliteStore
from standins.factories import make_call


def _turns(n: int, at: float) -> list[NewTurn]:
    return [NewTurn("user" if i % 2 == 0 else "assistant", f"line {i}", at, i, 0, False, 1000 + i) for i in range(n)]


async def test_the_call_paths_writes_are_applied_whole(sqlite_store: SqliteStore) -> None:
    store = sqlite_store
    await store.set_consent(42, True, 1.0)
    call = make_call(42, state="starting")
    await store.create_call(call)
    assert (await store.get_call(call.call_id)).state == "starting"  # type: ignore[union-attr]
    assert await store.transition_call(call.call_id, ["starting"], "active", agent_id="a-1")
    active = await store.get_call(call.call_id)
    assert active is not None and (active.state, active.agent_id) == ("active", "a-1")
    generation = await store.memory_generation(42)
    written = await store.apply_call_turns(
        call.call_id,
        42,
        _turns(4, 2.0),
        [],
        anchored=True,
        checkpoint_at=2.0,
        generation=generation,
        expected_version=0,
    )
    assert written
    stored = await store.call_turns(call.call_id)
    assert [t.content for t in stored] == ["line 0", "line 1", "line 2", "line 3"]
    assert (await store.get_call(call.call_id)).turns_version == 1  # type: ignore[union-attr]

    # An update and an insert in one merge: all of it applied.
    first = stored[0]
    assert await store.apply_call_turns(
        call.call_id,
        42,
        [NewTurn("assistant", "line 4", 3.0, 4, 0, False, 1004)],
        [TurnUpdate(first.turn_id, 0, "line 0, longer", 0, False, 1000)],
        anchored=True,
        checkpoint_at=3.0,
        generation=generation,
        expected_version=1,
    )
    assert [t.content for t in await store.call_turns(call.call_id)] == [
        "line 0, longer", "line 1", "line 2", "line 3", "line 4",
    ]  # fmt: skip
    assert (await store.get_call(call.call_id)).turns_version == 2  # type: ignore[union-attr]


async def test_a_refused_or_stale_merge_writes_nothing_and_leaves_no_transaction_open(
    sqlite_store: SqliteStore,
) -> None:
    store = sqlite_store
    await store.set_consent(7, True, 1.0)
    call = make_call(7, state="active")
    await store.create_call(call)
    generation = await store.memory_generation(7)

    async def merge_two_lines(*, generation: int, expected_version: int) -> bool:
        return await store.apply_call_turns(
            call.call_id,
            7,
            _turns(2, 2.0),
            [],
            anchored=True,
            checkpoint_at=2.0,
            generation=generation,
            expected_version=expected_version,
        )

    with pytest.raises(TurnsChanged):  # another writer got there first: nothing of this merge may stay
        await merge_two_lines(generation=generation, expected_version=5)
    assert await store.call_turns(call.call_id) == []
    assert (await store.get_call(call.call_id)).turns_version == 0  # type: ignore[union-attr]

    assert not await merge_two_lines(generation=generation + 1, expected_version=0)  # the fence: a stale generation
    assert await store.call_turns(call.call_id) == []
    assert (await store.get_call(call.call_id)).turns_version == 0  # type: ignore[union-attr]

    # The connection is not left inside a transaction: the next write goes through and is kept.
    assert await merge_two_lines(generation=generation, expected_version=0)
    assert len(await store.call_turns(call.call_id)) == 2
    with pytest.raises(OpenCallExists):  # the member's second open call is refused
        await store.create_call(make_call(7, state="starting"))
    assert await store.transition_call(call.call_id, ["active"], "ending")


_LINES = st.lists(
    st.builds(
        NewTurn,
        role=st.sampled_from(["user", "assistant"]),
        content=st.text(st.characters(exclude_categories=["Cs"]), max_size=40),
        spoken_at=st.floats(min_value=-1e300, max_value=1e300, allow_nan=False, allow_infinity=False),
        seq=st.integers(0, 0),
        segment=st.integers(0, 3),
        partial=st.booleans(),
        captured=st.integers(0, 2**53),
    ),
    max_size=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=_LINES, order=st.randoms(use_true_random=False), last=st.integers(0, 14))
async def test_a_calls_lines_read_in_one_step_are_the_rows_as_stored(
    lines: list[NewTurn], order: random.Random, last: int
) -> None:
    """`call_turns` / `call_tail` read every line of the call as ONE JSON value (one step, one take of the GIL on
    the database thread): the same records, in the same order, as reading the rows one by one, whatever the text
    (quotes, newlines, any Unicode) and however exact the float of ``spoken_at``; lines written out of order come
    back by ``seq``."""
    store = SqliteStore(":memory:")
    await store.open()
    try:
        call = make_call(7, state="active")
        await store.create_call(call)
        numbered = [
            NewTurn(t.role, t.content, t.spoken_at, seq, t.segment, t.partial, t.captured)
            for seq, t in enumerate(lines)
        ]
        order.shuffle(numbered)
        assert await store.apply_call_turns(call.call_id, 7, numbered, [], anchored=True, checkpoint_at=1.0)
        rows = await store.db.execute_fetchall(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE call_id = ? ORDER BY seq", (call.call_id,)
        )
        one_by_one: list[TurnRecord] = [turn_record(row) for row in rows]

        assert await store.call_turns(call.call_id) == one_by_one
        assert await store.call_tail(call.call_id, last) == (one_by_one[-last:] if last else [])
        assert [(t.content, t.spoken_at) for t in one_by_one] == [(t.content, t.spoken_at) for t in lines]
    finally:
        await store.close()


async def test_a_calls_lines_keep_every_spoken_at_exactly_clock_times_or_not() -> None:
    """SQLite 3.40's ``printf('%!.17g')`` gets the 17th digit of 1.0627297642918568e+297 wrong (found by the
    property test above): a clock's time travels as two integers, and what is outside their range (zero, tiny,
    huge) is read natively, each line still exactly as stored."""
    values = [1_764_748_800.123456, 1.0627297642918568e297, -1.423084172170799e203, 0.0, 0.5, 5e-324, 1.5]
    store = SqliteStore(":memory:")
    await store.open()
    try:
        call = make_call(7, state="active")
        await store.create_call(call)
        lines = [NewTurn("user", f"line {seq}", at, seq, 0, False, 0) for seq, at in enumerate(values)]
        assert await store.apply_call_turns(call.call_id, 7, lines, [], anchored=True, checkpoint_at=1.0)

        read = await store.call_turns(call.call_id)
        assert [t.spoken_at for t in read] == values
        assert [t.spoken_at for t in await store.call_tail(call.call_id, 3)] == values[-3:]
    finally:
        await store.close()
