"""The embedded semantic model (bot.memory.embedded): on by default with no embedding server, read from the installed
package with nothing fetched, embedding lines and facts after a conversation and each utterance in process, so a
question finds a line that shares no word with it; its vectors are encrypted and forgotten like every member text."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

import numpy as np

from bot.app import build_dense_retrieval
from bot.keys import SqliteKeyStore, generate_master_key_text, parse_master_key
from bot.keys.encrypted import EncryptedStore
from bot.llm.client import LLMClient
from bot.memory.dense import DenseRetriever, MemberEmbedder
from bot.memory.embedded import EMBEDDED_MODEL, EmbeddedEmbedder, EmbeddedModel, package_folder
from bot.memory.postcall import PostCallProcessor
from bot.memory.service import MemoryService
from bot.store.models import Conversation
from bot.store.repository import Store
from bot.store.sqlite import SqliteStore
from standins.harness import CallWorld, call_world, make_settings
from standins.llm_server import FakeLLM
from tests.memory.test_dense import FILLER
from tests.memory.test_postcall import DOG_CALL, NOW, TUESDAY, USER, ended_call, fact, reply, run_all

NURSE = "I work as a nurse at St Mary's"
JOB_QUESTION = "what did I say about my job?"
NAMES = ["Alma", "Bruno", "Carla", "Dmitri", "Elif", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Keiko", "Luca"]
PLACES = ["Lisbon", "Oslo", "Quito", "Nairobi", "Hanoi", "Porto", "Tromso", "Cusco", "Kyoto", "Bergen"]
LATER = [
    (
        "user" if n % 2 else "assistant",
        f"{NAMES[n % 12]} flew to {PLACES[n % 10]} on the {n % 28 + 1}th of May {1990 + n}",
    )
    for n in range(200)
]
"""Newer lines that carry names, places and dates (as the nurse line does) and share no word with the question."""


def unit(matrix: np.ndarray) -> np.ndarray:
    return matrix / np.linalg.norm(matrix, axis=-1, keepdims=True)


def test_the_model_loads_from_the_installed_package_with_nothing_fetched(tmp_path: Path, monkeypatch) -> None:
    """The suite refuses any connection off this machine (tests/test_network_guard.py), so a fetch would fail here;
    nothing is written to a download cache either."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    model = EmbeddedModel.load()
    folder = package_folder()
    assert folder is not None and (folder / "weights" / "l2_supercat_256.safetensors").is_file()
    assert model.vectors.shape == (32000, 256)
    vectors = unit(model.embed(["I bought a red car.", "Which vehicle did I purchase?", "My cat sleeps all day."]))
    assert vectors.shape == (3, 256) and np.isfinite(vectors).all()
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2], "a paraphrase is nearer than an unrelated line"
    assert list(tmp_path.iterdir()) == [], "nothing downloaded or cached"
    assert os.environ["HF_HUB_OFFLINE"] == "1"


async def test_embedding_a_batch_matches_one_at_a_time_and_an_empty_text_is_zeros() -> None:
    embedder = EmbeddedEmbedder()
    texts = [f"line number {n} about the garden" for n in range(40)] + [""]
    batch = await embedder.embed(texts)
    one = await embedder.embed([texts[7]])
    assert batch.shape == (41, 256) and batch.dtype == np.float32
    assert np.allclose(batch[7], one[0]) and not batch[-1].any()
    assert embedder.model == EMBEDDED_MODEL


async def test_without_an_embedding_server_the_default_is_the_embedded_model(tmp_path: Path) -> None:
    store_settings = make_settings(tmp_path)
    assert store_settings.llm.embedding_model is None and store_settings.embeddings_source == "embedded"
    off = make_settings(tmp_path, memory={"semantic_search": False})
    assert off.embeddings_source is None
    server = make_settings(tmp_path, llm={"base_url": "http://127.0.0.1:9/v1", "embedding_model": "e"})
    assert server.embeddings_source == "server", "llm.embedding_model replaces the embedded model"


async def asked(memory: MemoryService, question: str) -> str:
    messages = await memory.build_context(USER, query=question)
    return messages[1]["content"] if len(messages) > 1 else ""


async def test_a_member_asking_about_their_job_gets_the_nurse_line_with_no_embedding_server(
    store: Store, memory: MemoryService, llm: LLMClient, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    await ended_call(store, memory, [("user", NURSE), *FILLER[:20]], started_at=TUESDAY - 86400, queue=False)
    await ended_call(store, memory, LATER)
    assert NURSE not in await asked(memory, JOB_QUESTION), "by words alone the line is not found"

    embedder = build_dense_retrieval(make_settings(tmp_path), store, memory)
    assert embedder is not None and embedder.client.model == EMBEDDED_MODEL
    fake_llm.queue_reply(reply("Chat.", fact("The user likes travel.", LATER[1][1])))
    assert await run_all(PostCallProcessor(store, llm, clock=lambda: NOW, embedder=embedder)) == 2
    assert await store.count_vectors(USER) == 1 + 20 + len(LATER) + 1, "every line and the fact"

    block = await asked(memory, JOB_QUESTION)
    assert NURSE in block
    assert fake_llm.embedding_requests == [], "no embedding server was asked"


async def test_a_database_from_before_is_backfilled_by_the_queue(
    store: Store, memory: MemoryService, llm: LLMClient, fake_llm: FakeLLM
) -> None:
    """Lines stored before the embedded model existed get vectors from the member's next conversation's job."""
    await ended_call(store, memory, [("user", NURSE), *FILLER[:30]], started_at=TUESDAY - 86400, queue=False)
    await ended_call(store, memory, DOG_CALL)
    fake_llm.queue_reply(reply("Dog.", fact("The user's dog is called Biscuit.", "My dog is called Biscuit")))
    await run_all(PostCallProcessor(store, llm, clock=lambda: NOW, embedder=MemberEmbedder(store, EmbeddedEmbedder())))
    assert await store.count_vectors(USER) == 1 + 30 + len(DOG_CALL) + 1


async def test_forgetting_removes_the_embedded_vectors(
    store: Store, memory: MemoryService, llm: LLMClient, fake_llm: FakeLLM
) -> None:
    embedder = EmbeddedEmbedder()
    dog = await ended_call(store, memory, DOG_CALL)
    fake_llm.queue_reply(reply("Biscuit.", fact("The user's dog is called Biscuit.", "My dog is called Biscuit")))
    await run_all(PostCallProcessor(store, llm, clock=lambda: NOW, embedder=MemberEmbedder(store, embedder)))
    nurse = await ended_call(store, memory, [("user", NURSE)], started_at=TUESDAY + 60, queue=False)
    await MemberEmbedder(store, embedder).embed_member(USER)
    memory.context.dense = DenseRetriever(store, embedder)
    assert NURSE in await asked(memory, JOB_QUESTION)
    assert await store.count_vectors(USER) == len(DOG_CALL) + 2

    async def vectors() -> set[tuple[str, int]]:
        return {(v.kind, v.item_id) for v in await store.member_vectors(USER, EMBEDDED_MODEL)}

    (biscuit,) = await store.facts_from(Conversation("call", dog.call_id))
    assert await memory.forget_fact(USER, biscuit.fact_id)
    assert ("fact", biscuit.fact_id) not in await vectors()
    await memory.forget_conversation(USER, "call", nurse.call_id)
    assert await store.count_vectors(USER) == len(await vectors()) <= len(DOG_CALL)
    assert NURSE not in await asked(memory, JOB_QUESTION)
    await memory.forget_everything(USER)
    assert await store.count_vectors(USER) == 0 and await store.count_vectors() == 0


async def test_embedded_vectors_are_stored_encrypted(tmp_path: Path) -> None:
    backend = SqliteStore(tmp_path / "memory.db")
    keys = SqliteKeyStore(tmp_path / "memory.keys.db", parse_master_key(generate_master_key_text()))
    await keys.open()
    store = EncryptedStore(backend, keys)
    await store.open()
    try:
        memory = MemoryService(store, budget_tokens=1500, persona="p", keys=keys)
        await ended_call(store, memory, [("user", NURSE)], queue=False)
        await MemberEmbedder(store, EmbeddedEmbedder()).embed_member(USER)
        (opened,) = await store.member_vectors(USER, EMBEDDED_MODEL)
        with sqlite3.connect(tmp_path / "memory.db") as db:
            ((blob,),) = db.execute("SELECT vector FROM memory_vectors").fetchall()
        assert len(opened.vector) == 256 * 4 and len(blob) == len(opened.vector) + 1 + 12 + 16
        assert opened.vector not in blob
    finally:
        await backend.close()
        await keys.close()


async def start_call(world: CallWorld, user: int) -> str:
    await world.store.set_consent(user, True, world.clock())
    started = await world.calls.start(user_id=user, guild_id=1)
    agent = world.emu.agent_by_label("call_id", started.call_id)
    world.emu.user_joined(agent.agent_id)
    return agent.agent_id


async def test_live_recall_brings_the_nurse_line_with_no_embedding_server(tmp_path: Path, fake_llm: FakeLLM) -> None:
    from bot.memory.context import MEMORY_HEADER
    from standins.factories import make_call

    async with call_world(tmp_path, llm_base_url=fake_llm.base_url, llm={"timeout_seconds": 1.0}) as world:
        assert world.embedder is not None and world.embedder.client.model == EMBEDDED_MODEL
        old = make_call(USER, state="ended", started_at=time.time() - 7 * 86400)
        await world.store.create_call(old)
        await world.memory.record_snapshot(old, [("user", NURSE), *FILLER], max_history=None, final=True)
        assert (await world.embedder.embed_member(USER))[0] == 1 + len(FILLER)
        agent_id = await start_call(world, USER)

        fake_llm.queue_reply("You said you are a nurse.")
        await world.emu.user_says(agent_id, JOB_QUESTION)
        memory = "\n".join(
            m["content"] for m in fake_llm.last_request["messages"] if m["content"].startswith(MEMORY_HEADER)
        )
        assert NURSE in memory
        assert fake_llm.embedding_requests == []


async def test_a_line_said_many_times_does_not_crowd_out_the_answer(store: Store, memory: MemoryService) -> None:
    """Identical texts have identical vectors: a reply the assistant repeats fifty times takes one place among the
    nearest, not all of them."""
    repeated = [("assistant", "Tell me more about your work, your career and your occupation.")] * 50
    await ended_call(store, memory, [("user", NURSE), *FILLER[:20]], started_at=TUESDAY - 86400, queue=False)
    await ended_call(store, memory, [*repeated, *LATER], queue=False)
    embedder = EmbeddedEmbedder()
    await MemberEmbedder(store, embedder).embed_member(USER)
    memory.context.dense = DenseRetriever(store, embedder)
    block = await asked(memory, "what do I do at my job?")
    assert NURSE in block and block.count("Tell me more about your work") == 1
