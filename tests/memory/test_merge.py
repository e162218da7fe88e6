"""Merging overlapping history snapshots stores each utterance once, in order, or names the gap it cannot close."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.memory.merge import Utterance, merge_snapshot, try_append
from bot.memory.service import MemoryService
from bot.store.models import CallRecord
from bot.store.sqlite import SqliteStore
from standins.factories import make_call

REPEATED = ["yes", "okay", "mm-hm", "Okay.", "Sure."]


@st.composite
def conversations(draw: st.DrawFn) -> list[tuple[str, str]]:
    """Random conversations where short messages repeat, but never two repeated messages side by side.

    Content-only history cannot tell two overlapping placements apart inside a run of identical messages
    (see bot.memory.merge); real calls alternate speakers with distinct sentences between the "yes"es."""
    length = draw(st.integers(min_value=1, max_value=40))
    messages: list[tuple[str, str]] = []
    previous_repeated = True
    for i in range(length):
        role = draw(st.sampled_from(["user", "assistant"])) if i else "assistant"
        repeated = not previous_repeated and draw(st.booleans())
        if repeated:
            content = draw(st.sampled_from(REPEATED))
        else:
            content = f"#{i}: " + draw(st.text(alphabet="abcdefgh ", min_size=0, max_size=12))
        messages.append((role, content))
        previous_repeated = repeated
    return messages


@st.composite
def deliveries(draw: st.DrawFn):
    conversation = draw(conversations())
    max_history = draw(st.integers(min_value=2, max_value=10))
    n = len(conversation)

    def distinct(position: int) -> bool:
        return conversation[position][1] not in REPEATED

    # Windows start and end on distinct messages: with content-only history, a window edge on a "yes" can
    # match another "yes" across an uncovered gap, and no algorithm can tell them apart (see bot.memory.merge).
    ends = sorted(
        e
        for e in set(draw(st.lists(st.integers(min_value=1, max_value=n), min_size=1, max_size=12))) | {1}
        if distinct(e - 1) and distinct(max(0, e - max_history))
    )
    snapshots = []
    for capture, end in enumerate(ends):
        start = max(0, end - max_history)
        window = list(conversation[start:end])
        if draw(st.booleans()) and window[-1][0] == "assistant" and end != n:
            role, content = window[-1]
            window[-1] = (role, content[: max(len(content.split(":")[0]) + 1, len(content) // 2)])
        snapshots.append((capture, start, end, window))
    order = draw(st.permutations(list(range(len(snapshots)))))
    duplicates = draw(st.lists(st.integers(min_value=0, max_value=len(snapshots) - 1), max_size=4))
    return conversation, max_history, snapshots, list(order) + duplicates


def expected_segments(conversation, snapshots, max_history):
    """Covered intervals joined where they overlap by at least one message (adjacent is not enough)."""
    intervals = sorted((s, e) for _, s, e, _ in snapshots)
    merged: list[list[int]] = []
    for s, e in intervals:
        if merged and s < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        elif merged and (s, e) == tuple(merged[-1]):
            continue
        else:
            merged.append([s, e])
    anchored = any(s == 0 and (e - s) < max_history for _, s, e, _ in snapshots)
    return merged, anchored


def longest_seen(conversation, snapshots):
    best: dict[int, str] = {}
    for _, start, _, window in snapshots:
        for k, (_, content) in enumerate(window):
            if len(content) > len(best.get(start + k, "")):
                best[start + k] = content
    return best


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deliveries())
def test_any_delivery_order_stores_each_utterance_once_in_order(case) -> None:
    conversation, max_history, snapshots, order = case
    stored: list[Utterance] = []
    anchored = False
    for index in order:
        capture, _start, _end, window = snapshots[index]
        result = merge_snapshot(stored, window, captured=capture, complete=len(window) < max_history, anchored=anchored)
        stored, anchored = result.turns, result.anchored

    intervals, expect_anchored = expected_segments(conversation, snapshots, max_history)
    contents = longest_seen(conversation, snapshots)
    expected = [(conversation[p][0], contents[p]) for s, e in intervals for p in range(s, e)]
    assert [(t.role, t.content) for t in stored] == expected
    segments = [len([t for t in stored if t.segment == k]) for k in sorted({t.segment for t in stored})]
    assert segments == [e - s for s, e in intervals], "each uncovered stretch is reported as exactly one gap"
    assert anchored == expect_anchored
    assert result.gaps == len(intervals) - 1 + (0 if anchored else 1)


def test_growing_reply_is_replaced_by_its_full_text_not_duplicated() -> None:
    first = merge_snapshot(
        [],
        [("assistant", "Hello"), ("user", "hi"), ("assistant", "The weather is")],
        captured=1,
        complete=True,
    )
    second = merge_snapshot(
        first.turns,
        [("user", "hi"), ("assistant", "The weather is sunny today."), ("user", "great")],
        captured=2,
        complete=False,
        anchored=first.anchored,
    )
    assert [t.content for t in second.turns] == ["Hello", "hi", "The weather is sunny today.", "great"]
    assert second.added == 1 and second.grown == 1 and second.gaps == 0


def test_window_that_overlaps_nothing_is_a_gap_until_a_later_snapshot_bridges_it() -> None:
    convo = [("user" if i % 2 else "assistant", f"line {i}") for i in range(12)]
    a = merge_snapshot([], convo[0:4], captured=1, complete=True)
    c = merge_snapshot(a.turns, convo[8:12], captured=3, complete=False, anchored=a.anchored)
    assert c.gaps == 1 and len({t.segment for t in c.turns}) == 2
    b = merge_snapshot(c.turns, convo[3:9], captured=2, complete=False, anchored=c.anchored)
    assert [(t.role, t.content) for t in b.turns] == convo
    assert b.gaps == 0


async def test_service_merges_atomically_and_a_retry_changes_nothing(store, memory: MemoryService) -> None:
    call = make_call()
    await store.create_call(call)
    rng = random.Random(7)
    convo = [("assistant" if i % 2 == 0 else "user", f"utterance {i} {rng.random():.6f}") for i in range(80)]
    for end in range(5, 81, 5):
        window = convo[max(0, end - 32) : end]
        await memory.record_snapshot(call, window, max_history=32)
        await memory.record_snapshot(call, window, max_history=32)  # the same checkpoint retried
    turns = await store.call_turns(call.call_id)
    assert [(t.role, t.content) for t in turns] == convo
    assert [t.seq for t in turns] == list(range(80))
    assert await store.count_turns(call.user_id) == 80


async def test_final_history_after_stop_adds_only_what_was_missed(store, memory: MemoryService) -> None:
    call = make_call()
    await store.create_call(call)
    convo = [("assistant" if i % 2 == 0 else "user", f"u{i}") for i in range(40)]
    await memory.record_snapshot(call, convo[:30], max_history=32)
    await memory.record_snapshot(call, convo[8:40], max_history=32, final=True)
    await memory.record_snapshot(call, convo[8:40], max_history=32, final=True)  # webhook delivered twice
    turns = await store.call_turns(call.call_id)
    assert [(t.role, t.content) for t in turns] == convo
    assert not any(t.partial for t in turns)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deliveries())
async def test_the_service_path_with_its_fast_append_gives_the_same_result(case) -> None:
    """The service tries a cheap append on the call's tail first and merges in full otherwise."""
    conversation, max_history, snapshots, order = case
    async with fresh_call() as (store, memory, call):
        for index in order:
            capture, _start, _end, window = snapshots[index]
            await memory.record_snapshot(call, window, max_history=max_history, captured=capture)
        await assert_stored_once_in_order(store, call, conversation, snapshots, max_history)


@asynccontextmanager
async def fresh_call() -> AsyncIterator[tuple[SqliteStore, MemoryService, CallRecord]]:
    store = SqliteStore(":memory:")
    await store.open()
    try:
        call = make_call()
        await store.create_call(call)
        yield store, MemoryService(store, budget_tokens=1500, persona="p"), call
    finally:
        await store.close()


async def assert_stored_once_in_order(store, call, conversation, covered, max_history) -> None:
    """Each covered line once, in order, with the longest text seen, and seq strictly increasing."""
    intervals, _ = expected_segments(conversation, covered, max_history)
    contents = longest_seen(conversation, covered)
    expected = [(conversation[p][0], contents[p]) for s, e in intervals for p in range(s, e)]
    turns = await store.call_turns(call.call_id)
    assert [(t.role, t.content) for t in turns] == expected
    assert [t.seq for t in turns] == sorted(t.seq for t in turns)
    assert len({t.seq for t in turns}) == len(turns)


@st.composite
def live_deliveries(draw: st.DrawFn):
    """A call with live recall: the bot's LLM route writes each user line (the agent's window ending with it) and
    each finished reply, ConvoAI retries some turns, checkpoints and the final webhook 103 carry the same lines,
    and everything arrives in any order."""
    conversation, max_history, snapshots, _order = draw(deliveries())
    n = len(conversation)

    def distinct(position: int) -> bool:
        return conversation[position][1] not in REPEATED

    writes = []  # (kind, key, capture, start, end, window)
    for _capture, start, end, window in snapshots:
        writes.append(("checkpoint", None, end, start, end, window))
    for p, (role, _content) in enumerate(conversation):
        start = max(0, p + 1 - max_history)
        if not (distinct(p) and distinct(start)):
            continue  # the content-only limit of bot.memory.merge, as for checkpoints
        if role == "user":
            key = f"{p}:user"
        elif p > 0 and conversation[p - 1][0] == "user":
            key = f"{p - 1}:assistant"
        else:
            continue  # a greeting or a second reply is never an LLM turn of its own
        if draw(st.booleans()):
            writes.append(("live", key, p + 1, start, p + 1, list(conversation[start : p + 1])))
    if draw(st.booleans()) and distinct(n - 1) and distinct(max(0, n - max_history)):
        start = max(0, n - max_history)
        writes.append(("final", None, n, start, n, list(conversation[start:])))
    order = draw(st.permutations(list(range(len(writes)))))
    retries = draw(st.lists(st.integers(min_value=0, max_value=len(writes) - 1), max_size=4))
    return conversation, max_history, writes, list(order) + retries


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(live_deliveries())
async def test_per_turn_writes_checkpoints_and_webhook_103_in_any_order_store_each_line_once_in_order(case) -> None:
    conversation, max_history, writes, order = case
    async with fresh_call() as (store, memory, call):
        for index in order:
            kind, key, capture, _start, _end, window = writes[index]
            if kind == "live":
                await memory.record_live_turn(call, window, max_history=max_history, turn_key=key, captured=capture)
            else:
                await memory.record_snapshot(
                    call, window, max_history=max_history, captured=capture, final=kind == "final"
                )
        covered = [(capture, start, end, window) for _k, _key, capture, start, end, window in writes]
        await assert_stored_once_in_order(store, call, conversation, covered, max_history)


async def test_live_writes_in_speaking_order_keep_repeated_short_answers(store, memory: MemoryService) -> None:
    """Live, each line arrives as the agent's window ending with it: "yes" twice in a row is two lines."""
    call = make_call()
    await store.create_call(call)
    convo = [("assistant", "Hi!"), ("user", "yes"), ("assistant", "Okay."), ("user", "yes"), ("assistant", "Okay.")]
    for p in range(1, len(convo)):
        role = convo[p][0]
        key = f"{p if role == 'user' else p - 1}:{role}"
        await memory.record_live_turn(call, convo[: p + 1], max_history=32, turn_key=key)
        await memory.record_live_turn(call, convo[: p + 1], max_history=32, turn_key=key)  # a retried turn
    assert [(t.role, t.content) for t in await store.call_turns(call.call_id)] == convo


async def test_a_stale_call_row_handed_to_the_merge_costs_a_retry_not_a_wrong_merge(
    store, memory: MemoryService, monkeypatch
) -> None:
    """A caller's `current` row saves the merge its own read; when the row changed since (another writer), the
    versioned write refuses it and the merge reads the row again: every line once, in order."""
    call = make_call()
    await store.create_call(call)
    stale = await store.get_call(call.call_id)
    convo = [("assistant" if i % 2 == 0 else "user", f"line {i}") for i in range(12)]
    await memory.record_snapshot(call, convo[:6], max_history=32)  # another writer, after `stale` was read
    reads: list[str] = []
    get_call = type(store).get_call

    async def counting_get_call(self, call_id: str):
        reads.append(call_id)
        return await get_call(self, call_id)

    monkeypatch.setattr(type(store), "get_call", counting_get_call)
    await memory.record_snapshot(call, convo[:10], max_history=32, current=stale)
    assert len(reads) == 1  # the retry's fresh read
    fresh = await store.get_call(call.call_id)
    reads.clear()
    await memory.record_snapshot(call, convo, max_history=32, current=fresh)
    assert reads == []  # an up-to-date row: no read at all
    turns = await store.call_turns(call.call_id)
    assert [(t.role, t.content) for t in turns] == convo


async def test_a_tail_shorter_than_asked_for_is_the_whole_call_and_is_not_read_again(
    store, memory: MemoryService, monkeypatch
) -> None:
    """When the cheap append does not fit, the merge needs every turn of the call: a tail read that came back
    shorter than asked for already holds them all, so they are not read a second time."""
    call = make_call()
    await store.create_call(call)
    convo = [("assistant" if i % 2 == 0 else "user", f"line {i}") for i in range(12)]
    await memory.record_snapshot(call, convo[:8], max_history=32)
    assert (await store.get_call(call.call_id)).history_anchored
    reads: list[str] = []
    call_turns = type(store).call_turns

    async def counting_call_turns(self, call_id: str):
        reads.append(call_id)
        return await call_turns(self, call_id)

    monkeypatch.setattr(type(store), "call_turns", counting_call_turns)
    await memory.record_snapshot(call, convo, max_history=32)  # the whole call again: no overlap to append to
    assert reads == []
    monkeypatch.undo()
    turns = await store.call_turns(call.call_id)
    assert [(t.role, t.content) for t in turns] == convo and not any(t.partial for t in turns)


def test_a_reply_the_member_cut_short_is_kept_as_heard_and_marked() -> None:
    """The route stored a reply as relayed; the agent's next request says the member heard only its start."""
    relayed = "Once upon a time there was a chemist who"
    stored = [
        Utterance("assistant", "Hi, Noor!", 0, 0),
        Utterance("user", "Tell me a story.", 1, 0),
        Utterance("assistant", relayed, 2, 0, partial=False),
    ]
    window = [("user", "Tell me a story."), ("assistant", "Once upon a time"), ("user", "Stop.")]

    appended = try_append(stored, window, captured=5, heard=frozenset({1}))
    assert appended is not None and appended.replaced_last is not None
    assert (appended.replaced_last.content, appended.replaced_last.interrupted) == ("Once upon a time", True)
    assert [(u.role, u.content) for u in appended.new] == [("user", "Stop.")]

    merged = merge_snapshot(stored, window, captured=5, complete=False, heard=frozenset({1}))
    assert [(t.content, t.interrupted) for t in merged.turns] == [
        ("Hi, Noor!", False),
        ("Tell me a story.", False),
        ("Once upon a time", True),
        ("Stop.", False),
    ]
    assert merged.added == 1

    without = merge_snapshot(stored, window, captured=5, complete=False)
    assert [t.content for t in without.turns][2] == relayed, "a checkpoint cannot tell a cut from a growing reply"


def test_the_agents_final_history_cuts_a_reply_to_what_was_heard() -> None:
    stored = [
        Utterance("user", "Hi.", 1, 0),
        Utterance("assistant", "Hello! Let me tell you about", 2, 0, partial=True),
    ]
    final = merge_snapshot(stored, [("user", "Hi."), ("assistant", "Hello!")], captured=9, complete=True, final=True)
    assert [(t.content, t.interrupted) for t in final.turns] == [("Hi.", False), ("Hello!", True)]
    growing = merge_snapshot(
        [Utterance("user", "Hi.", 1, 0), Utterance("assistant", "Hello!", 2, 0, partial=True)],
        [("user", "Hi."), ("assistant", "Hello! Let me tell you about")],
        captured=9,
        complete=True,
        final=True,
    )
    assert [(t.content, t.interrupted) for t in growing.turns][1] == ("Hello! Let me tell you about", False)


def test_an_earlier_reply_cut_short_is_rewritten_by_a_full_merge_not_appended_again() -> None:
    stored = [
        Utterance("user", "One?", 1, 0),
        Utterance("assistant", "First answer, long", 2, 0),
        Utterance("user", "Two?", 3, 0),
        Utterance("assistant", "Second answer.", 4, 0, partial=True),
    ]
    window = [("user", "One?"), ("assistant", "First"), ("user", "Two?"), ("assistant", "Second answer.")]
    assert try_append(stored, window, captured=5, heard=frozenset({1})) is None
    merged = merge_snapshot(stored, window, captured=5, complete=True, heard=frozenset({1}))
    assert [(t.content, t.interrupted) for t in merged.turns] == [
        ("One?", False),
        ("First", True),
        ("Two?", False),
        ("Second answer.", False),
    ]
