"""Benchmark of the memory store on a large database.

Fills a SQLite store with many users, turns and facts (default 10,000 / 1,000,000 / 50,000), copies it into a
throwaway PostgreSQL cluster (`copy-db`'s code; or `--postgres-url`), then prints, for each backend, p50 and p99 for
the operations a person waits on:

- building a call-start context for a user with 5,000 turns and 500 facts (target p99 < 5 ms), with nothing
  kept from an earlier build, as at the start of a call (where the call service has just read the member, so the
  build does not read them again: ``memory_enabled=True``, as ``bot.calls.service`` passes it)
- building the query-aware context for one utterance of that user during a call, leaving out the call's own
  lines (target p99 < 5 ms: the live voice path does this on every turn), over a rotation of utterances
- the call-start build again in a process that has not counted that user's lines (the token counts and other
  per-text caches emptied before each build)
- merging a 32-message history snapshot into a 500-turn call (target p99 < 5 ms)
- listing a user's /memory page (target p99 < 5 ms)
- forgetting everything about a user (target < 50 ms), and separately the scrub that follows off the hot path

The fill writes rows with the stdlib sqlite3 module in bulk (through the same schema, triggers and FTS index);
every measured operation goes through the real services. With encryption on (``--encryption on``, or ``both``,
the default, for the two side by side), the filled database is then encrypted in place exactly as
``python -m bot migrate`` does it (every text sealed with its member's key, the index rebuilt from keyed term
hashes; on PostgreSQL then vacuumed, as autovacuum would soon after), and the same operations run through the
encrypting layer.

    .venv/bin/python bench/memory_store.py [--users N] [--turns N] [--facts N] [--runs N] [--db PATH]
        [--encryption off|on|both] [--backends sqlite,postgresql] [--postgres-url URL]

With encryption on, both backends are measured encrypted; the member keys are in a SQLite key store file (also
for PostgreSQL, as with ``memory.key_store``; keys are cached once read, so the key store's backend does not weigh
on the per-turn figures).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.keys import SqliteKeyStore, generate_master_key_text, parse_master_key
from bot.keys.encrypted import EncryptedStore
from bot.memory import block, context
from bot.memory.dense import DenseRetriever, MemberEmbedder
from bot.memory.embedded import BATCH as EMBEDDED_BATCH
from bot.memory.embedded import EmbeddedEmbedder
from bot.memory.service import MemoryService
from bot.memory.tokens import message_tokens
from bot.store.copy import copy_database
from bot.store.postgres import PostgresStore
from bot.store.repository import Store
from bot.store.sqlite import SqliteStore
from standins.postgres import running_cluster

WORDS = [
    "account",
    "appointment",
    "balance",
    "birthday",
    "book",
    "call",
    "car",
    "card",
    "cat",
    "change",
    "city",
    "coffee",
    "daughter",
    "deadline",
    "dinner",
    "doctor",
    "dog",
    "email",
    "family",
    "flight",
    "garden",
    "guitar",
    "holiday",
    "home",
    "insurance",
    "job",
    "kitchen",
    "laptop",
    "loan",
    "meeting",
    "mother",
    "music",
    "name",
    "number",
    "order",
    "password",
    "payment",
    "phone",
    "plan",
    "policy",
    "project",
    "rent",
    "school",
    "sister",
    "son",
    "subscription",
    "team",
    "ticket",
    "trip",
    "vacation",
    "weekend",
    "work",
    "yoga",
    "zoo",
    "Monday",
    "Tuesday",
    "Friday",
    "January",
    "March",
    "October",
    "blue",
    "green",
    "seven",
    "twelve",
]
HEAVY_USER = 1
UTTERANCES = [
    "when is my flight to the doctor appointment on Friday",
    "can you remind me what my sister said about the dinner",
    "I need to change the payment for my phone plan",
    "what was the name of the school my son goes to",
    "did I tell you about the new job and the project deadline",
    "my dog has to see the doctor again next week",
]
FORGET_RUNS = 30


def sentence(rng: random.Random, n: int = 12) -> str:
    return " ".join(rng.choices(WORDS, k=n)) + f" {rng.randrange(10**6)}"


def fill(path: Path, users: int, turns: int, facts: int, rng: random.Random) -> tuple[str, str]:
    """Returns (the heavy user's 500-turn call id, an ordinary user's id as text)."""
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = OFF")
    now = time.time()
    heavy_turns, heavy_facts = 5000, 500
    per_call = 100
    calls: list[tuple] = []
    turn_rows: list[tuple] = []

    def add_call(user: int, n: int) -> str:
        call_id = uuid.uuid4().hex
        started = now - rng.uniform(0, 90 * 86400)
        calls.append((call_id, user, 7, call_id, call_id, 1, 2, "ended", 30, started, started + 600, "hangup", 1))
        for seq in range(n):
            role = "assistant" if seq % 2 == 0 else "user"
            turn_rows.append((user, call_id, seq, role, sentence(rng), started + seq))
        return call_id

    heavy_call = add_call(HEAVY_USER, 500)
    for _ in range((heavy_turns - 500) // per_call):
        add_call(HEAVY_USER, per_call)
    remaining = turns - heavy_turns
    for i in range(max(remaining // per_call, 0)):
        add_call(2 + i % (users - 1), per_call)

    db.execute("BEGIN")
    db.executemany(
        "INSERT INTO calls (call_id, user_id, guild_id, channel, agent_name, user_uid, agent_uid, state, max_minutes, "
        "started_at, ended_at, end_reason, history_anchored) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        calls,
    )
    db.executemany(
        "INSERT INTO turns (user_id, call_id, seq, role, content, spoken_at, source) "
        "VALUES (?, ?, ?, ?, ?, ?, 'voice')",
        turn_rows,
    )
    fact_rows = [(HEAVY_USER, sentence(rng, 8), now - i, now - i, now - i) for i in range(heavy_facts)]
    fact_rows += [
        (2 + i % (users - 1), sentence(rng, 8), now - i, now - i, now - i) for i in range(facts - heavy_facts)
    ]
    db.executemany(
        "INSERT INTO facts (user_id, text, created_at, updated_at, confirmed_at) VALUES (?, ?, ?, ?, ?)", fact_rows
    )
    db.executemany(
        "INSERT INTO users (user_id, memory_enabled, consent, consent_at, created_at) VALUES (?, 1, 'remember', ?, ?)",
        [(u, now, now) for u in range(1, users + 1)],
    )
    db.execute("COMMIT")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.execute("ANALYZE")
    db.close()
    return heavy_call, str(2)


def forget_text_caches() -> None:
    """Empty the process-wide caches of what was computed from member texts (token counts, rendered lines, word
    sets, stems, specifics): a call start as in a process that has not read this member's lines before (after a
    restart, or once a busy process has evicted them), where the call-start row above reuses what earlier builds
    counted."""
    for cached in (*context.TEXT_CACHES, block._midnight_date):
        cached.cache_clear()


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def report(name: str, samples: list[float], target_ms: float | None) -> None:
    p50, p99 = pct(samples, 50) * 1000, pct(samples, 99) * 1000
    if target_ms is None:
        verdict = "no target: text chat, before an LLM call"
    else:
        verdict = f"target p99 < {target_ms:g} ms  " + ("ok" if p99 < target_ms else "OVER TARGET")
    print(f"{name:<46} p50 {p50:8.2f} ms   p99 {p99:8.2f} ms   {verdict}")


async def measure(
    store: Store, heavy_call: str, runs: int, users: int, rng: random.Random, encrypted: bool = False
) -> None:
    keys: SqliteKeyStore | None = None
    if encrypted:
        path = store.path if isinstance(store, SqliteStore) else Path(tempfile.mkdtemp(prefix="memory-keys-")) / "pg"
        keys = SqliteKeyStore(path.with_name(path.stem + ".keys.db"), parse_master_key(generate_master_key_text()))
        await keys.open()
        store = EncryptedStore(store, keys)
        start = time.perf_counter()
        await store.open()
        print(f"encrypted in place (migrate): {time.perf_counter() - start:.1f} s, {await keys.count():,} member keys")
        if isinstance(store.backend, PostgresStore):
            # The migration rewrote every row: what autovacuum does shortly after, done now, so the figures are
            # those of the database in use, not of the minutes while autovacuum catches up (p50 varied 2.5-6.7 ms).
            start = time.perf_counter()
            connection = await asyncpg.connect(store.backend.url)
            try:
                await connection.execute("VACUUM ANALYZE")
            finally:
                await connection.close()
            print(f"  then VACUUM ANALYZE: {time.perf_counter() - start:.1f} s")
    else:
        await store.open()
    memory = MemoryService(store, budget_tokens=1500, persona="You are a helpful voice assistant.", keys=keys)

    samples = []
    for _ in range(runs):
        memory.context.forget_cached()
        start = time.perf_counter()
        await memory.build_context(HEAVY_USER, memory_enabled=True)
        samples.append(time.perf_counter() - start)
        # The build starts reading the member's index ahead for the call's utterances; let it finish off the
        # clock, as it does while the agent joins, instead of cancelling it mid-read into the next sample.
        await memory.context.indexes.idle()
    report("call-start context build (5,000 turns, 500 facts)", samples, 5)

    async def per_utterance(label: str) -> float:
        """The query-aware build's p50/p99 over ``runs`` utterances; returns its CPU per build (process time)."""
        samples = []
        cpu = time.process_time()
        for i in range(runs):
            utterance = UTTERANCES[i % len(UTTERANCES)]
            start = time.perf_counter()
            await memory.build_context(HEAVY_USER, query=utterance, exclude_call_id=heavy_call)
            samples.append(time.perf_counter() - start)
        cpu = (time.process_time() - cpu) / runs
        report(label, samples, 5)
        return cpu

    lexical_cpu = await per_utterance("query-aware build per utterance (same user)")

    # The embedded model (memory.semantic_search, the default): the post-call queue's embed step stores a vector per
    # line and fact; each utterance is then embedded in process and fused with BM25.
    embedder = EmbeddedEmbedder()
    await embedder.load()
    member = MemberEmbedder(store, embedder, batch=EMBEDDED_BATCH)
    stored, cpu = 0, time.process_time()
    while True:
        count, more = await member.embed_member(HEAVY_USER)
        stored += count
        if not more:
            break
    embed_cpu = (time.process_time() - cpu) / max(stored, 1)
    memory.context.dense = DenseRetriever(store, embedder)
    await memory.build_context(HEAVY_USER, query=UTTERANCES[0], exclude_call_id=heavy_call)  # the matrix read once
    dense_cpu = await per_utterance("  with the embedded model (semantic search)")
    print(
        f"  CPU per build: {lexical_cpu * 1000:.2f} ms lexical, {dense_cpu * 1000:.2f} ms with the embedded model; "
        f"embedding a stored line or fact (embed job, {stored:,} vectors): {embed_cpu * 1000:.3f} ms of CPU each"
    )
    memory.context.dense = None

    samples = []
    for _ in range(runs):
        memory.context.forget_cached()
        forget_text_caches()
        start = time.perf_counter()
        await memory.build_context(HEAVY_USER, memory_enabled=True)
        samples.append(time.perf_counter() - start)
        await memory.context.indexes.idle()
    report("  call start, no line counted in the process", samples, 5)

    for label, user in (("typical returning user", 2), ("heavy user", HEAVY_USER)):
        messages = await memory.build_context(user)
        memory_tokens = sum(message_tokens(m["content"]) for m in messages[1:])
        turns, facts = await store.count_turns(user), await store.count_facts(user)
        print(
            f"call-start context, {label} ({turns:,} lines, {facts} facts): {memory_tokens} memory tokens "
            f"+ {message_tokens(messages[0]['content'])} persona (budget 1500)"
        )

    call = await store.get_call(heavy_call)
    assert call is not None
    stored = [(t.role, t.content) for t in await store.call_turns(heavy_call)]
    conversation = list(stored)
    samples = []
    for _ in range(runs):
        for _ in range(4):
            conversation.append(("assistant" if len(conversation) % 2 == 0 else "user", sentence(rng)))
        window = conversation[-32:]
        start = time.perf_counter()
        await memory.record_snapshot(call, window, max_history=32)
        samples.append(time.perf_counter() - start)
    report(f"merge 32-message snapshot ({len(stored)}+ turn call)", samples, 5)
    turns = await store.call_turns(heavy_call)
    assert [(t.role, t.content) for t in turns] == conversation, "merge lost or duplicated a turn"

    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        await memory.page(HEAVY_USER, page=rng.randrange(3))
        samples.append(time.perf_counter() - start)
    report("list /memory page (heavy user)", samples, 5)

    samples, scrub = [], []
    # Each forget is followed by a scrub that rewrites the full-text index; a few dozen runs show the spread.
    victims = rng.sample(range(2, users + 1), min(runs, users - 1, FORGET_RUNS))
    for user in victims:
        start = time.perf_counter()
        await memory.forget_everything(user)
        samples.append(time.perf_counter() - start)
        start = time.perf_counter()
        await memory.wait_scrubbed()
        scrub.append(time.perf_counter() - start)
    report("forget everything (ordinary user, ~100 turns)", samples, 50)
    report("  then scrub index + WAL (off the hot path)", scrub, 10_000)
    start = time.perf_counter()
    await memory.forget_everything(HEAVY_USER)
    heavy = time.perf_counter() - start
    print(f"{'forget everything (heavy user, 5,000+ turns)':<46} {heavy * 1000:8.2f} ms once")
    await memory.wait_scrubbed()
    await store.close()
    if keys is not None:
        await keys.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=1_000_000)
    parser.add_argument("--facts", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--db", type=Path, help="database file to create (default: a temporary file)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--encryption", choices=["off", "on", "both"], default="both")
    parser.add_argument("--backends", default="sqlite,postgresql", help="comma-separated: sqlite, postgresql")
    parser.add_argument("--postgres-url", help="an empty PostgreSQL database (default: a throwaway local cluster)")
    args = parser.parse_args()
    for encrypted in {"off": [False], "on": [True], "both": [False, True]}[args.encryption]:
        print(f"--- encryption {'on' if encrypted else 'off'} ---")
        run(args, encrypted)


def run(args: argparse.Namespace, encrypted: bool) -> None:
    rng = random.Random(args.seed)
    folder = tempfile.mkdtemp(prefix="memory-bench-")
    path = args.db or Path(folder) / "bench.db"
    if args.db is not None and encrypted and args.encryption == "both":
        path = args.db.with_name(args.db.stem + "-encrypted" + args.db.suffix)

    async def create() -> None:
        store = SqliteStore(path)
        await store.open()
        await store.close()

    asyncio.run(create())
    start = time.perf_counter()
    heavy_call, _ = fill(path, args.users, args.turns, args.facts, rng)
    size_mb = path.stat().st_size / 1e6
    print(
        f"filled {args.users:,} users, {args.turns:,} turns, {args.facts:,} facts in "
        f"{time.perf_counter() - start:.1f} s ({size_mb:.0f} MB); {args.runs} runs each; "
        f"SQLite {sqlite3.sqlite_version}"
    )
    backends = args.backends.split(",")
    if "sqlite" in backends:
        print("\n== SQLite")
        asyncio.run(measure(SqliteStore(path), heavy_call, args.runs, args.users, rng, encrypted))
    if "postgresql" in backends:
        if args.postgres_url:
            measure_postgres(path, args.postgres_url, heavy_call, args, encrypted)
        else:
            for cluster in running_cluster():
                measure_postgres(path, cluster.new_database(), heavy_call, args, encrypted)


def measure_postgres(path: Path, url: str, heavy_call: str, args: argparse.Namespace, encrypted: bool) -> None:
    """The same database copied into PostgreSQL (a fresh SQLite fill, so forgets measured above do not leak in)."""

    async def load() -> float:
        source, target = SqliteStore(path), PostgresStore(url)
        await source.open()
        await target.open()
        start = time.perf_counter()
        await copy_database(source, target, verify=False)
        await target.pool.execute("ANALYZE")
        elapsed = time.perf_counter() - start
        await source.close()
        await target.close()
        return elapsed

    path.unlink()
    for suffix in ("-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)

    async def create() -> None:
        store = SqliteStore(path)
        await store.open()
        await store.close()

    asyncio.run(create())
    heavy_call, _ = fill(path, args.users, args.turns, args.facts, random.Random(args.seed))
    seconds = asyncio.run(load())
    print(f"\n== PostgreSQL (loaded by copy-db in {seconds:.1f} s)")
    asyncio.run(measure(PostgresStore(url), heavy_call, args.runs, args.users, random.Random(args.seed), encrypted))


if __name__ == "__main__":
    main()
