"""Benchmark of dense retrieval's cost in the bot (``llm.embedding_model``), not of its quality.

No embedding model is installed and no network exists here, so the vectors are seeded random unit vectors: they
say nothing about which lines a real model would find, and this script prints no quality figure. What it measures
is what the bot adds to a query-aware build and to the post-call job, for a member with 5,000 lines and 500 facts
(``bench/memory_store.py``'s heavy member), each with a stored vector of ``--dims`` numbers (default 1536, the size
of OpenAI's text-embedding-3-small):

- the fuse step of a query-aware build with the member's matrix kept (the stamp query, one matrix-vector product,
  the top of both rankings, the rows of the dense hits, the fusion), the utterance's embedding answered in-process
  (httpx.MockTransport) so that the embedding server's own latency, which comes on top, is not counted;
- the same after a conversation added vectors (only the new rows are read and appended), and with the kept
  matrix dropped before each build (the first build after a restart or a forget: every vector is read, unpacked
  (and decrypted) and normalised);
- embedding the utterance against that in-process server (request, JSON of the answer), for scale;
- storing one batch of 64 vectors (``put_vectors``, one transaction), the post-call job's write per request;
- the whole query-aware build of a live call's utterance (``memory.build_context(query=..., exclude_call_id=...)``)
  with and without dense retrieval.

With ``--encryption on`` everything goes through the encrypting layer (vectors encrypted with the member's key).

    .venv/bin/python bench/dense_retrieval.py [--dims N] [--runs N] [--encryption off|on]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.memory_store import HEAVY_USER, fill, pct
from bot.keys import SqliteKeyStore, generate_master_key_text, parse_master_key
from bot.keys.encrypted import EncryptedStore
from bot.llm.embeddings import EmbeddingClient
from bot.memory.dense import EMBED_BATCH, DenseRetriever
from bot.memory.service import MemoryService
from bot.store.repository import Store
from bot.store.sqlite import SqliteStore
from bot.store.vectors import EmbedItem, ItemKind, pack

MODEL = "bench-embed"
NEW_PER_CONVERSATION = 8
QUERIES = [
    "what did I say about the garden",
    "when is the dentist appointment",
    "which train did we book",
    "remind me of the recipe",
    "what was my sister's new job",
]


def report(name: str, samples: list[float]) -> None:
    print(f"{name:<58} p50 {pct(samples, 50) * 1000:8.2f} ms   p99 {pct(samples, 99) * 1000:8.2f} ms")


def embedding_server(dims: int, rng: np.random.Generator) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        count = len(httpx.Response(200, content=request.content).json()["input"])
        data = [{"index": i, "embedding": rng.standard_normal(dims).tolist()} for i in range(count)]
        return httpx.Response(200, json={"object": "list", "data": data, "model": MODEL})

    return httpx.MockTransport(answer)


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "dense.db"
        backend = SqliteStore(path)
        await backend.open()  # the schema
        await backend.close()
        fill(path, 1, 5000, 500, random.Random(args.seed))
        backend = SqliteStore(path)
        keys: SqliteKeyStore | None = None
        store: Store = backend
        if args.encryption == "on":
            keys = SqliteKeyStore(Path(tmp) / "dense.keys.db", parse_master_key(generate_master_key_text()))
            await keys.open()
            store = EncryptedStore(backend, keys)
        await store.open()
        rng = np.random.default_rng(args.seed)
        try:

            def vectors(items: list[EmbedItem]) -> list[tuple[ItemKind, int, bytes]]:
                return [(i.kind, i.item_id, pack(rng.standard_normal(args.dims).astype(np.float32))) for i in items]

            pending = await store.unembedded(HEAVY_USER, MODEL, 10_000)  # facts, then lines newest first
            later, first = pending[: NEW_PER_CONVERSATION * args.runs], pending[NEW_PER_CONVERSATION * args.runs :]
            puts = []
            for start in range(0, len(first), EMBED_BATCH):
                rows = vectors(first[start : start + EMBED_BATCH])
                started = time.perf_counter()
                await store.put_vectors(HEAVY_USER, MODEL, rows)
                puts.append(time.perf_counter() - started)
            print(f"member {HEAVY_USER}: {await store.count_vectors(HEAVY_USER)} vectors of {args.dims} dimensions")
            async with EmbeddingClient(
                base_url="http://embeddings.bench/v1", model=MODEL, transport=embedding_server(args.dims, rng)
            ) as client:
                dense = DenseRetriever(store, client)
                ranked_facts = await store.rank_facts(HEAVY_USER, "garden", 50)
                warm, cold = [], []
                for n in range(args.runs):
                    query = QUERIES[n % len(QUERIES)]
                    ranked = await store.rank_turns(HEAVY_USER, query, 75)
                    for samples in (cold, warm):
                        if samples is cold:
                            dense.forget_cached(HEAVY_USER)
                        started = time.perf_counter()
                        await dense.fuse(HEAVY_USER, query, ranked_facts, ranked, limit=75)
                        samples.append(time.perf_counter() - started)
                grown, embeds = [], []
                for n in range(args.runs):
                    started = time.perf_counter()
                    await dense.embed_query(QUERIES[n % len(QUERIES)])
                    embeds.append(time.perf_counter() - started)
                    batch = later[n * NEW_PER_CONVERSATION : (n + 1) * NEW_PER_CONVERSATION]
                    await store.put_vectors(HEAVY_USER, MODEL, vectors(batch))
                    ranked = await store.rank_turns(HEAVY_USER, QUERIES[n % len(QUERIES)], 75)
                    started = time.perf_counter()
                    await dense.fuse(HEAVY_USER, QUERIES[n % len(QUERIES)], ranked_facts, ranked, limit=75)
                    grown.append(time.perf_counter() - started)
                report("embedding the utterance (in-process server, JSON included)", embeds)
                report("fuse, matrix kept (embedding server's latency not counted)", warm)
                report(f"fuse, {NEW_PER_CONVERSATION} vectors added since (after a conversation)", grown)
                report("fuse, matrix read again (restart, forget)", cold)
                report(f"put_vectors, one batch of {EMBED_BATCH}", puts)

                memory = MemoryService(store, budget_tokens=1500, persona="p")
                for label, retriever in (("query-aware build, BM25 only", None), ("query-aware build, dense", dense)):
                    memory.context.dense = retriever
                    samples = []
                    for n in range(args.runs):
                        started = time.perf_counter()
                        await memory.build_context(
                            HEAVY_USER, query=QUERIES[n % len(QUERIES)], exclude_call_id="the-live-call"
                        )
                        samples.append(time.perf_counter() - started)
                    report(label, samples)
        finally:
            await backend.close()
            if keys is not None:
                await keys.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dims", type=int, default=1536)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--encryption", choices=["off", "on"], default="off")
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
