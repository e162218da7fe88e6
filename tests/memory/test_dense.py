"""Optional dense retrieval (llm.embedding_model): the post-call queue embeds lines and facts in batches, query-aware
builds fuse the nearest ones with BM25, forgetting deletes vectors, and member encryption covers them."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from bot.keys import SqliteKeyStore, generate_master_key_text, parse_master_key
from bot.keys.crypto import DecryptionFailed
from bot.keys.encrypted import EncryptedStore
from bot.llm.client import LLMClient
from bot.llm.embeddings import EmbeddingClient
from bot.memory.chat import ChatService
from bot.memory.dense import DENSE_WEIGHT, RECHECK_SECONDS, DenseRetriever, MemberEmbedder, fused_scores
from bot.memory.embedded import EmbeddedEmbedder
from bot.memory.postcall import EMBED_JOB, POST_CALL_JOB, PostCallProcessor
from bot.memory.service import MemoryService
from bot.store.models import Conversation
from bot.store.repository import Store
from bot.store.sqlite import SqliteStore
from bot.store.vectors import unpack
from standins.harness import FakeClock
from standins.llm_server import FakeLLM
from tests.memory.test_postcall import DOG_CALL, NOW, TUESDAY, USER, ended_call, fact, reply, run_all

MODEL = "fake-embed"


@pytest.fixture
async def embeddings(fake_llm: FakeLLM) -> AsyncIterator[EmbeddingClient]:
    async with EmbeddingClient(base_url=fake_llm.base_url, model=MODEL) as client:
        yield client


def processor(store: Store, llm: LLMClient, embedder: MemberEmbedder, *, at: float = NOW) -> PostCallProcessor:
    return PostCallProcessor(store, llm, clock=lambda: at, embedder=embedder)


def inputs(fake_llm: FakeLLM) -> list[list[str]]:
    return [request["input"] for request in fake_llm.embedding_requests]


async def dog_call_queued(store: Store, memory: MemoryService, fake_llm: FakeLLM) -> str:
    """An ended call of 4 lines, queued; its post-call job will learn one fact."""
    call = await ended_call(store, memory, DOG_CALL)
    fake_llm.queue_reply(reply("Biscuit.", fact("The user's dog is called Biscuit.", "My dog is called Biscuit")))
    return call.call_id


def test_fusion_adds_how_far_meaning_stands_out_to_the_scaled_word_score() -> None:
    """A line's BM25 score scaled to the best match's, plus DENSE_WEIGHT times its similarity's z-score among the
    member's items: a line found only by meaning can beat a weak word match, never a strong one."""
    rows = {1: 0, 2: 1, 3: 2, 4: 3}
    similarities = np.array([0.1, 0.2, 0.9, 0.2], dtype=np.float32)
    scores = fused_scores({1: 4.0, 2: 1.0}, rows, similarities, rows)
    z = (similarities - similarities.mean()) / similarities.std()
    assert scores[1] == pytest.approx(1.0 + DENSE_WEIGHT * z[0], rel=1e-5)
    assert scores[2] == pytest.approx(0.25 + DENSE_WEIGHT * z[1], rel=1e-5)
    assert scores[3] == pytest.approx(DENSE_WEIGHT * z[2], rel=1e-5)
    assert sorted(scores, key=lambda i: -scores[i]) == [1, 3, 2, 4]


async def test_the_job_after_a_call_embeds_its_lines_and_fact_in_batches(
    store, memory, fake_llm, llm, embeddings
) -> None:
    call_id = await dog_call_queued(store, memory, fake_llm)
    assert await run_all(processor(store, llm, MemberEmbedder(store, embeddings, batch=3))) == 2  # post_call, embed

    assert await store.job_state(EMBED_JOB, f"{POST_CALL_JOB}:{call_id}") == "done"
    assert [len(batch) for batch in inputs(fake_llm)] == [3, 2], "5 texts, batches of 3: two requests"
    embedded = [text for batch in inputs(fake_llm) for text in batch]
    assert embedded[0] == "The user's dog is called Biscuit."
    assert sorted(embedded[1:]) == sorted(text for _, text in DOG_CALL)
    stored = await store.member_vectors(USER, MODEL)
    assert sorted(v.kind for v in stored) == ["fact", "turn", "turn", "turn", "turn"]
    texts = {t.turn_id: t.content for t in await store.call_turns(call_id)}
    for vector in stored:
        if vector.kind == "turn":
            assert unpack(vector.vector).tolist() == pytest.approx(fake_llm.embedding_of(texts[vector.item_id]))


async def test_without_the_setting_nothing_is_embedded(store, memory, fake_llm, llm) -> None:
    await dog_call_queued(store, memory, fake_llm)
    assert await run_all(PostCallProcessor(store, llm, clock=lambda: NOW)) == 1
    assert fake_llm.embedding_requests == [] and await store.count_vectors() == 0


async def test_a_failure_mid_way_resumes_and_a_retry_never_duplicates(store, memory, fake_llm, llm, embeddings) -> None:
    call_id = await dog_call_queued(store, memory, fake_llm)
    first = processor(store, llm, MemberEmbedder(store, embeddings, batch=2))
    assert await first.run_once()  # the post-call job, which queues the embedding
    job = await store.claim_job(NOW, 300)  # a worker takes the embed job ...
    assert job is not None and job.kind == EMBED_JOB
    await MemberEmbedder(store, embeddings, batch=2, max_batches=1).embed_member(USER)  # ... one batch, then dies
    assert await store.count_vectors(USER) == 2
    fake_llm.fail_next(1, 503)
    later = processor(store, llm, MemberEmbedder(store, embeddings, batch=2), at=NOW + 301)  # its lease ran out
    assert await later.run_once()  # the embedding server fails: retried later, what was stored stays
    assert await store.count_vectors(USER) == 2
    assert await store.job_state(EMBED_JOB, f"{POST_CALL_JOB}:{call_id}") == "pending"
    assert await run_all(processor(store, llm, MemberEmbedder(store, embeddings, batch=2), at=NOW + 3600)) == 1

    assert await store.count_vectors(USER) == 5
    succeeded = inputs(fake_llm)[:1] + inputs(fake_llm)[2:]  # the second request was the failed one
    assert sorted(t for batch in succeeded for t in batch) == sorted(
        [t for _, t in DOG_CALL] + ["The user's dog is called Biscuit."]
    ), "every text embedded exactly once"
    again = await MemberEmbedder(store, embeddings).embed_member(USER)
    assert again == (0, False) and len(fake_llm.embedding_requests) == 4, "nothing left: no request"
    rows = await store.member_vectors(USER, MODEL)
    assert await store.put_vectors(USER, MODEL, [(v.kind, v.item_id, v.vector) for v in rows]) == 5
    assert await store.count_vectors(USER) == 5, "storing a line's vector again replaces it"


async def test_a_long_backfill_is_done_in_bounded_parts(store, memory, fake_llm, llm, embeddings) -> None:
    lines = [("user" if n % 2 else "assistant", f"Older line {n} about gardening") for n in range(9)]
    await ended_call(store, memory, lines, started_at=TUESDAY - 86400, queue=False)  # from before the setting
    await dog_call_queued(store, memory, fake_llm)
    assert await run_all(processor(store, llm, MemberEmbedder(store, embeddings, batch=2, max_batches=3))) == 4
    assert [len(b) for b in inputs(fake_llm)] == [2] * 7, "3 batches per job, then a continuation"
    assert await store.count_vectors(USER) == 14


async def test_a_new_embedding_model_re_embeds(store, memory, fake_llm, llm, embeddings) -> None:
    await dog_call_queued(store, memory, fake_llm)
    await run_all(processor(store, llm, MemberEmbedder(store, embeddings)))
    fake_llm.embedding_models = (MODEL, "fake-embed-2")
    async with EmbeddingClient(base_url=fake_llm.base_url, model="fake-embed-2") as other:
        assert await MemberEmbedder(store, other).embed_member(USER) == (5, False)
    assert await store.count_vectors(USER) == 5
    assert await store.member_vectors(USER, MODEL) == []
    assert len(await store.member_vectors(USER, "fake-embed-2")) == 5


PURCHASE = "I finally bought a red automobile last spring."
FILLER = [
    ("user" if n % 2 else "assistant", f"We chatted about the {''.join('abcdefghij'[int(d)] for d in str(n))}ish again")
    for n in range(300)
]
"""Distinct lines that carry no specifics (no digits, names, dates or decisions): only relevance ranks them."""


async def test_dense_retrieval_finds_a_line_that_shares_no_word_with_the_question(
    store, memory, fake_llm, llm, embeddings
) -> None:
    fake_llm.concepts.update({"car": "vehicle", "automobile": "vehicle", "purchase": "buy", "bought": "buy"})
    await ended_call(store, memory, [("user", PURCHASE), *FILLER], started_at=TUESDAY, queue=False)
    await store.set_consent(USER, True, NOW)
    chat = ChatService(store, memory, llm, idle_minutes=30, persona="Chat.", clock=FakeClock(NOW))
    question = "Which car did I purchase?"

    fake_llm.queue_reply("I am not sure.")
    assert "".join([d async for d in chat.reply(USER, 7, question)])
    assert "automobile" not in system_text(fake_llm.last_request), "BM25 alone misses it"

    embedder = MemberEmbedder(store, embeddings)
    assert (await embedder.embed_member(USER))[0] >= 301
    memory.context.dense = DenseRetriever(store, embeddings)
    fake_llm.queue_reply("A red one.")
    assert "".join([d async for d in chat.reply(USER, 7, question)])
    assert PURCHASE in system_text(fake_llm.last_request)
    assert inputs(fake_llm)[-1] == [question], "the question is embedded on its own"


async def test_when_embeddings_fail_the_build_is_lexical_and_logged_once(
    store, memory, fake_llm, llm, embeddings, caplog
) -> None:
    await ended_call(store, memory, [("user", "My passport number is X1234567."), *FILLER[:40]], queue=False)
    await MemberEmbedder(store, embeddings).embed_member(USER)
    memory.context.dense = DenseRetriever(store, embeddings, query_timeout=0.2)
    lexical = (await MemoryService(store, budget_tokens=300, persona="p").build_context(USER, query="passport number"))[
        1:
    ]
    fake_llm.fail_next(1, 500)
    caplog.set_level(logging.WARNING, logger="bot.memory.dense")
    failed = (await memory.build_context(USER, query="passport number", budget_tokens=300))[1:]
    fake_llm.embedding_latency = 1.0
    slow = (await memory.build_context(USER, query="passport number", budget_tokens=300))[1:]
    assert failed == lexical == slow and "X1234567" in failed[0]["content"]
    assert len([r for r in caplog.records if "BM25 alone" in r.getMessage()]) == 1, "logged once, not per turn"


async def test_forgetting_deletes_the_vectors(store, memory, fake_llm, llm, embeddings) -> None:
    dog = await dog_call_queued(store, memory, fake_llm)
    await run_all(processor(store, llm, MemberEmbedder(store, embeddings)))
    other = await ended_call(store, memory, [("user", "I like tea.")], started_at=TUESDAY + 60, queue=False)
    await ended_call(store, memory, [("user", "Old news.")], started_at=TUESDAY - 30 * 86400, queue=False)
    await MemberEmbedder(store, embeddings).embed_member(USER)
    assert await store.count_vectors(USER) == 7

    async def remembered() -> set[tuple[str, int]]:
        turns = {("turn", t.turn_id) for t in await store.recent_turns_of(USER, 1000)}
        return turns | {("fact", f.fact_id) for f in await store.list_facts(USER)}

    async def vectors() -> set[tuple[str, int]]:
        return {(v.kind, v.item_id) for v in await store.member_vectors(USER, MODEL)}

    (biscuit,) = await store.facts_from(Conversation("call", dog))
    assert await memory.forget_fact(USER, biscuit.fact_id)  # the fact and the line that says it
    assert ("fact", biscuit.fact_id) not in await vectors() and len(await vectors()) <= 5
    assert await vectors() == await remembered()
    assert await memory.purge_expired(7, retention_days=10, now=TUESDAY) == 1  # the old call's transcript
    assert await vectors() == await remembered() and len(await vectors()) <= 4
    await memory.forget_conversation(USER, "call", other.call_id)
    assert await vectors() == await remembered() and len(await vectors()) <= 3
    await memory.forget_everything(USER)
    assert await store.count_vectors(USER) == 0 and await store.count_vectors() == 0


async def test_forgetting_drops_the_cached_matrix(store, memory, fake_llm, llm, embeddings) -> None:
    fake_llm.concepts.update({"car": "vehicle", "automobile": "vehicle"})
    call = await ended_call(store, memory, [("user", PURCHASE), *FILLER[:20]], queue=False)
    await MemberEmbedder(store, embeddings).embed_member(USER)
    memory.context.dense = DenseRetriever(store, embeddings)
    assert PURCHASE in (await memory.build_context(USER, query="car", budget_tokens=200))[1]["content"]
    await memory.forget_conversation(USER, "call", call.call_id)
    assert len(await memory.build_context(USER, query="car", budget_tokens=200)) == 1, "nothing left to quote"


def system_text(request: dict) -> str:
    return "\n".join(m["content"] for m in request["messages"] if m["role"] == "system")


async def test_encrypted_vectors_are_not_stored_in_the_clear(fake_llm, llm, embeddings, tmp_path: Path) -> None:
    backend = SqliteStore(tmp_path / "memory.db")
    keys = SqliteKeyStore(tmp_path / "memory.keys.db", parse_master_key(generate_master_key_text()))
    await keys.open()
    store = EncryptedStore(backend, keys)
    await store.open()
    try:
        memory = MemoryService(store, budget_tokens=1500, persona="p", keys=keys)
        await dog_call_queued(store, memory, fake_llm)
        await run_all(processor(store, llm, MemberEmbedder(store, embeddings)))
        opened = {(v.kind, v.item_id): v.vector for v in await store.member_vectors(USER, MODEL)}
        assert len(opened) == 5
        assert inputs(fake_llm)[0][0] == "The user's dog is called Biscuit."
        with sqlite3.connect(tmp_path / "memory.db") as db:
            raw = db.execute("SELECT turn_id, fact_id, vector FROM memory_vectors").fetchall()
        assert len(raw) == 5
        for turn_id, fact_id, blob in raw:
            plain = opened[("turn", turn_id) if turn_id is not None else ("fact", fact_id)]
            assert len(blob) == len(plain) + 1 + 12 + 16 and plain not in blob
        with sqlite3.connect(tmp_path / "memory.db") as db:  # a vector moved to another row does not open
            db.execute(
                "UPDATE memory_vectors SET vector = (SELECT vector FROM memory_vectors WHERE fact_id IS NOT NULL)"
            )
        with pytest.raises(DecryptionFailed):
            await store.member_vectors(USER, MODEL)
    finally:
        await backend.close()
        await keys.close()


async def test_new_vectors_are_added_to_the_kept_matrix_and_a_removal_reads_it_again(
    store, memory, fake_llm, llm, embeddings, monkeypatch
) -> None:
    fake_llm.concepts.update({"car": "vehicle", "automobile": "vehicle", "bike": "cycle", "bicycle": "cycle"})
    await ended_call(store, memory, [("user", PURCHASE), *FILLER[:20]], queue=False)
    await MemberEmbedder(store, embeddings).embed_member(USER)
    memory.context.dense = DenseRetriever(store, embeddings, recheck_seconds=0)
    reads: list[int] = []
    member_vectors = store.member_vectors

    async def counted(user_id: int, model: str, *, after_id: int = 0):
        reads.append(after_id)
        return await member_vectors(user_id, model, after_id=after_id)

    monkeypatch.setattr(store, "member_vectors", counted)
    assert PURCHASE in (await memory.build_context(USER, query="car", budget_tokens=200))[1]["content"]
    assert reads == [0]
    bicycle = "My daughter got a green bicycle for her birthday."
    later = await ended_call(store, memory, [("user", bicycle)], started_at=TUESDAY + 3600, queue=False)
    await MemberEmbedder(store, embeddings).embed_member(USER)
    assert bicycle in (await memory.build_context(USER, query="bike", budget_tokens=200))[1]["content"]
    assert reads[1] > 0 and len(reads) == 2, "only the new vector was read"
    assert PURCHASE in (await memory.build_context(USER, query="car", budget_tokens=200))[1]["content"]
    assert len(reads) == 2, "nothing changed: nothing read"
    await store.forget_call(USER, later.call_id)  # another process forgets: the kept matrix is not told
    block = (await memory.build_context(USER, query="bike", budget_tokens=200))[1]["content"]
    assert bicycle not in block and reads[-1] == 0, "a removal reads the vectors again"


async def test_kept_matrices_are_bounded_by_size(store, memory, fake_llm, llm, embeddings, monkeypatch) -> None:
    other = USER + 1
    for member in (USER, other):
        await ended_call(store, memory, [("user", PURCHASE)], user_id=member, queue=False)
        await MemberEmbedder(store, embeddings).embed_member(member)
    reads: list[int] = []
    member_vectors = store.member_vectors

    async def counted(user_id: int, model: str, *, after_id: int = 0):
        reads.append(user_id)
        return await member_vectors(user_id, model, after_id=after_id)

    monkeypatch.setattr(store, "member_vectors", counted)
    for cached_bytes, expected in ((1 << 20, [USER, other]), (1, [USER, other, USER])):
        reads.clear()
        memory.context.dense = DenseRetriever(store, embeddings, cached_bytes=cached_bytes)
        for member in (USER, other, USER):
            await memory.build_context(member, query="automobile", budget_tokens=200)
        assert reads == expected, f"kept within {cached_bytes} bytes"


async def test_turning_encryption_on_drops_vectors_stored_in_the_clear(fake_llm, llm, embeddings, tmp_path) -> None:
    plain = SqliteStore(tmp_path / "memory.db")
    await plain.open()
    await dog_call_queued(plain, MemoryService(plain, budget_tokens=1500, persona="p"), fake_llm)
    await run_all(processor(plain, llm, MemberEmbedder(plain, embeddings)))
    assert await plain.count_vectors(USER) == 5
    await plain.close()

    backend = SqliteStore(tmp_path / "memory.db")
    keys = SqliteKeyStore(tmp_path / "memory.keys.db", parse_master_key(generate_master_key_text()))
    await keys.open()
    store = EncryptedStore(backend, keys)
    await store.open()  # encrypts the existing texts in place: their vectors in the clear go with the old text
    try:
        assert await store.count_vectors(USER) == 0
        assert await MemberEmbedder(store, embeddings).embed_member(USER) == (5, False)
        assert len(await store.member_vectors(USER, MODEL)) == 5, "embedded again, encrypted"
    finally:
        await backend.close()
        await keys.close()


async def test_kept_vectors_are_checked_again_after_a_while_or_at_once_when_this_process_embeds(
    store, memory, fake_llm, llm, embeddings, monkeypatch
) -> None:
    """Each utterance does not ask the store whether the vectors changed: this process's embed step says so, and
    another process's vectors are looked for once RECHECK_SECONDS have passed."""
    await ended_call(store, memory, [("user", PURCHASE), *FILLER[:20]], queue=False)
    clock = FakeClock(NOW)
    retriever = DenseRetriever(store, embeddings, clock=clock)
    ours = MemberEmbedder(store, embeddings, on_stored=retriever.vectors_changed)
    await ours.embed_member(USER)
    memory.context.dense = retriever
    checks: list[int] = []
    vectors_stamp = store.vectors_stamp

    async def counted(user_id: int, model: str) -> tuple[int, int]:
        checks.append(user_id)
        return await vectors_stamp(user_id, model)

    monkeypatch.setattr(store, "vectors_stamp", counted)

    async def utterances(n: int) -> int:
        before = len(checks)
        for _ in range(n):
            await memory.build_context(USER, query="car", budget_tokens=200)
        return len(checks) - before

    assert await utterances(3) == 1, "checked once, then kept"
    await ended_call(store, memory, [("user", "I sold my old motor scooter.")], started_at=TUESDAY + 60, queue=False)
    await MemberEmbedder(store, embeddings).embed_member(USER)  # as another process's embed step would
    assert await utterances(2) == 0
    clock.advance(RECHECK_SECONDS)
    assert await utterances(2) == 1, "looked for again after a while"
    await ended_call(store, memory, [("user", "A green bicycle.")], started_at=TUESDAY + 120, queue=False)
    await ours.embed_member(USER)
    assert await utterances(2) == 1, "at once after this process's own embed step"
    assert len(await store.member_vectors(USER, MODEL)) == len(retriever._cache[USER].turn_ids) + len(
        retriever._cache[USER].fact_ids
    )


async def test_only_lines_nearer_than_the_members_usual_line_are_found_by_meaning(store: Store, memory) -> None:
    """In a short history the nearest ``limit`` lines are most of its lines: one further from the utterance than
    the member's usual line is no match (it would rank, at a score below zero, under lines that match nothing)."""
    await ended_call(store, memory, [("user", PURCHASE), *FILLER[:40]], started_at=TUESDAY, queue=False)
    embedder = EmbeddedEmbedder()
    await MemberEmbedder(store, embedder).embed_member(USER)
    _, ranked = await DenseRetriever(store, embedder).fuse(USER, "Which car did I purchase?", [], [], limit=150)
    assert ranked[0][0].content == PURCHASE
    assert 1 < len(ranked) < 41 and all(score > 0 for _, score in ranked), "above the mean: a z-score above zero"
