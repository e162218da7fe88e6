"""Builders for records used across test packages."""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence

from bot.store.models import CallRecord, ChatRecord, Conversation, FactRecord

_ids = itertools.count(1)


def make_call(user_id: int = 42, *, guild_id: int | None = 7, state: str = "active", **overrides) -> CallRecord:
    n = next(_ids)
    fields = dict(
        call_id=f"call-{n}",
        user_id=user_id,
        guild_id=guild_id,
        channel=f"ch-{n}",
        agent_name=f"agent-{n}",
        user_uid=1000 + n,
        agent_uid=900000 + n,
        state=state,
        max_minutes=30,
        started_at=time.time(),
    )
    fields.update(overrides)
    return CallRecord(**fields)


# ---- memory seeded through the production write paths ------------------------------------------------------

SEED_JOB = "test_seed"
"""The kind of the queue job a seeding extraction claims: not a real post-call kind, so it never stands in the
way of a conversation's own post_call/post_chat job (jobs are unique per kind and conversation)."""

_seeds = itertools.count(1)


async def seed_chat(store, user_id: int, at: float, *, guild_id: int | None = None) -> str:
    """An ended text chat with no lines, as the source of facts a test needs without a conversation of its own
    (every fact the bot stores comes from a call or a chat). It is listed nowhere (no lines, no summary)."""
    chat_id = f"seed-chat-{next(_seeds)}"
    await store.create_chat(ChatRecord(chat_id, user_id, guild_id, False, at, at, ended_at=at))
    return chat_id


async def extract(
    store,
    user_id: int,
    at: float,
    *,
    call_id: str | None = None,
    chat_id: str | None = None,
    new_facts: Sequence[str | tuple[str, Sequence[int]]] = (),
    confirmed: Sequence[int] = (),
    summary: str | None = None,
) -> list[FactRecord]:
    """What post-call extraction writes for one conversation (new facts, each optionally superseding some of the
    member's current ones; facts mentioned again; the summary), through the store's own path: a queue job is
    claimed and `apply_extraction` writes everything and finishes it in one transaction. Returns the new facts,
    oldest first. Fails when the store refused the write (memory paused, conversation gone or private).

    The seed job is claimed alone: it is due at -1 and claimed "at" -1, when no real job (due at 0 or later) is."""
    ref = f"{call_id or chat_id}#{next(_seeds)}"
    assert await store.enqueue_job(SEED_JOB, ref, at, not_before=-1.0)
    job = await store.claim_job(-1.0, 60.0)
    assert job is not None and (job.kind, job.ref_id) == (SEED_JOB, ref), job
    convo = Conversation.of(call_id=call_id, chat_id=chat_id)
    known = {f.fact_id for f in await store.facts_from(convo)}
    plan = [(f, ()) if isinstance(f, str) else (f[0], tuple(f[1])) for f in new_facts]
    learned = await store.apply_extraction(
        job.job_id,
        job.attempts,
        user_id,
        at,
        convo,
        new_facts=plan,
        confirmed=confirmed,
        summary=summary,
    )
    assert learned is not None and (learned > 0 or not (plan or confirmed)), "the store refused the seeded memory"
    known.update(confirmed)
    added = [f for f in await store.facts_from(convo) if f.fact_id not in known]
    assert [f.text for f in added] == [text for text, _ in plan], added
    return added


async def seed_facts(
    store,
    user_id: int,
    texts: Sequence[str | tuple[str, Sequence[int]]],
    at: float,
    *,
    call_id: str | None = None,
    chat_id: str | None = None,
) -> list[FactRecord]:
    """Facts learned from the call or chat (or, with neither, from a fresh `seed_chat`), as extraction writes
    them; an item may be (text, ids of current facts it supersedes)."""
    if call_id is None and chat_id is None:
        chat_id = await seed_chat(store, user_id, at)
    return await extract(store, user_id, at, call_id=call_id, chat_id=chat_id, new_facts=texts)


async def seed_fact(
    store,
    user_id: int,
    text: str,
    at: float,
    *,
    call_id: str | None = None,
    chat_id: str | None = None,
    replaces: Sequence[int] = (),
) -> FactRecord:
    """One fact, as `seed_facts` writes it."""
    [fact] = await seed_facts(store, user_id, [(text, replaces)], at, call_id=call_id, chat_id=chat_id)
    return fact


async def seed_summary(
    store, text: str, *, call_id: str | None = None, chat_id: str | None = None, at: float | None = None
) -> None:
    """The conversation's summary, as extraction writes it."""
    convo = await store.get_call(call_id) if call_id else await store.get_chat(chat_id)
    assert convo is not None, "no such conversation"
    await extract(
        store, convo.user_id, time.time() if at is None else at, call_id=call_id, chat_id=chat_id, summary=text
    )
    after = await store.get_call(call_id) if call_id else await store.get_chat(chat_id)
    assert after.summary == text, "the store refused the seeded summary"
