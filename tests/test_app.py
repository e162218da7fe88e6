"""The process's services: built from settings in one place; the periodic retention sweep."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from bot.app import build_store, open_services
from bot.memory import tokens
from bot.memory.embedded import BATCH as EMBEDDED_BATCH
from bot.memory.embedded import EmbeddedEmbedder
from bot.store.postgres import PostgresStore
from standins.factories import make_call
from standins.harness import make_settings
from standins.llm_server import FakeLLM


async def test_retention_sweep_purges_each_servers_old_transcripts(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    async with open_services(settings) as services:
        await services.store.update_guild_settings(5, time.time(), retention_days=7)
        old = make_call(guild_id=5, state="ended", started_at=time.time() - 8 * 86400)
        kept = make_call(guild_id=6, state="ended", started_at=time.time() - 400 * 86400)
        for call in (old, kept):
            await services.store.create_call(call)
            await services.memory.record_snapshot(call, [("user", "hello there")], max_history=None)
        assert await services.purge_expired_transcripts() == 1
        assert await services.store.call_turns(old.call_id) == []
        assert len(await services.store.call_turns(kept.call_id)) == 1, "no retention set there: kept"


async def test_full_services_without_agora_or_llm_still_start(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, agora={"app_id": None, "customer_id": None})
    async with open_services(settings, full=True) as services:
        assert services.calls is None and services.web is not None  # the web server still serves /healthz
        assert services.chat is not None and not services.chat.enabled
        assert services.postcall is not None


async def test_starting_loads_the_tokenizer_before_the_first_call(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(tokens, "_encoding", None)
    settings = make_settings(tmp_path, agora={"app_id": None, "customer_id": None})
    async with open_services(settings, full=True) as services:
        await services.start_background()
        try:
            assert tokens._encoding is not None  # loaded off the event loop, not inside a member's first call
        finally:
            await services.stop_background()


async def test_a_call_start_reads_the_members_index_ahead_only_with_live_recall(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """Only the live route reads a call's index: without live recall nothing is read ahead at call start."""
    without = make_settings(tmp_path / "off")
    async with open_services(without) as services:
        assert not without.live_recall_enabled
        assert not services.memory.context.indexes.read_ahead
    with_live = make_settings(tmp_path / "on", llm={"base_url": fake_llm.base_url, "model": "fake-model"})
    async with open_services(with_live) as services:
        assert with_live.live_recall_enabled
        assert services.memory.context.indexes.read_ahead


async def test_memory_pool_size_caps_the_postgresql_connections(tmp_path: Path, postgres_url: str) -> None:
    settings = make_settings(tmp_path, memory={"database_url": postgres_url, "pool_size": 3})
    store = build_store(settings)
    assert isinstance(store, PostgresStore)
    await store.open()
    try:
        await asyncio.gather(*(store.ping() for _ in range(12)))  # a burst wants more connections than allowed
        assert store.pool.get_max_size() == 3
        assert store.pool.get_size() == 3
    finally:
        await store.close()


def test_memory_pool_size_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="pool_size"):
        make_settings(tmp_path, memory={"pool_size": 0})


async def test_the_embedding_setting_wires_dense_retrieval_into_the_queue_and_the_builder(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    from bot.memory.importer import POST_CALL_JOB

    llm = {"base_url": fake_llm.base_url, "model": "fake-model", "embedding_model": "fake-embed"}
    settings = make_settings(tmp_path, agora={"app_id": None, "customer_id": None}, llm=llm)
    async with open_services(settings, full=True) as services:
        assert services.postcall is not None and services.memory.context.dense is not None
        call = make_call(state="ended", started_at=time.time() - 600, ended_at=time.time() - 300)
        await services.store.create_call(call)
        await services.memory.record_snapshot(call, [("user", "I play the cello.")], max_history=None)
        await services.store.enqueue_job(POST_CALL_JOB, call.call_id, time.time())
        fake_llm.queue_reply('{"summary": "Cello.", "facts": []}')
        while await services.postcall.run_once():
            pass
        assert fake_llm.embedding_requests == [{"model": "fake-embed", "input": ["I play the cello."]}]
        assert await services.store.count_vectors(call.user_id) == 1

    settings = make_settings(
        tmp_path / "default", agora={"app_id": None, "customer_id": None}, llm={**llm, "embedding_model": None}
    )
    async with open_services(settings, full=True) as services:  # no server's model: the embedded one
        assert isinstance(services.embeddings, EmbeddedEmbedder) and services.memory.context.dense is not None
        assert services.postcall is not None and services.postcall.embedder is not None
        assert services.postcall.embedder.client is services.embeddings
        assert services.postcall.embedder.batch == EMBEDDED_BATCH, "no request to keep small: larger batches"
        await services.start_background()
        try:
            assert services.embeddings.loaded, "loaded at start-up, before Discord connects"
        finally:
            await services.stop_background()

    settings = make_settings(
        tmp_path / "off",
        agora={"app_id": None, "customer_id": None},
        llm={**llm, "embedding_model": None},
        memory={"semantic_search": False},
    )
    async with open_services(settings, full=True) as services:
        assert services.memory.context.dense is None and services.embeddings is None
        assert services.postcall is not None and services.postcall.embedder is None
