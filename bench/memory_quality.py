"""Memory quality on the memory-eval cases: how many of the facts a later question needs reach the agent.

For each case: a fresh store (a temporary file); every past session goes through the real import path as a
finished call of one user (``parse_conversations`` + ``import_conversations``, with the session's timestamp);
with ``--llm`` the PostCallProcessor then extracts facts and summaries from those calls. Then, for each token
budget, it measures the share of the case's gold facts (``fact_present``) found in

- call-start: the memory block of ``memory.build_context(user)``, what a voice call starts with;
- query-aware: the memory block of ``memory.build_context(user, query=user_question)``, what a turn gets;
- recent-fit: the most recent "- role: content" lines that fit the budget;
- bm25-all: plain BM25 (Okapi, k1 1.2, b 0.75, lower-cased words, no stemming) of the question over all of the
  member's lines, taken best first while they fit, shown in conversation order;
- recipe-20: the Agora memory recipe's approach, its header and the last 20 messages as "- role: content" lines
  (oldest lines dropped if that exceeds the budget).

Every column is one memory message counted with the product's tokenizer (``bot.memory.tokens.message_tokens``,
o200k_base), against the same budget. Recall is the mean over cases of (gold facts present / gold facts).

The cases are read from ``--cases DIR``, else ``$MEMORY_EVAL_DIR``, else ``../shared/benchmarks/memory-eval``
beside the repository; the command says where it looked when they are missing.

    .venv/bin/python bench/memory_quality.py [--cases DIR] [--limit N] [--budgets 500,1500,4000] [--llm] [--verbose]

``--llm`` reads LLM_BASE_URL, LLM_API_KEY and LLM_MODEL from the environment.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.memory_eval_cases import EvalCase, Fact, audit, fact_present, load_cases, where
from bench.memory_hard_cases import HardCase, hard_cases
from bot.config import DEFAULT_PERSONA
from bot.keys import SqliteKeyStore, generate_master_key_text, parse_master_key
from bot.keys.encrypted import EncryptedStore
from bot.llm.client import LLMClient
from bot.memory.dense import DenseRetriever, MemberEmbedder
from bot.memory.embedded import EmbeddedEmbedder
from bot.memory.importer import import_conversations, parse_conversations
from bot.memory.postcall import PostCallProcessor
from bot.memory.service import MemoryService
from bot.memory.tokens import message_tokens
from bot.store.postgres import PostgresStore
from bot.store.repository import Store
from bot.store.sqlite import SqliteStore
from standins.postgres import running_cluster

USER_ID = 1
DEFAULT_BUDGETS = (500, 1500, 4000)
TARGET_BUDGET = 1500
RECIPE_MAX_MESSAGES = 20
RECIPE_HEADER = (
    "You are talking to a RETURNING user. Here is what you remember from past conversations with them — use it "
    "naturally; do not read it back verbatim:"
)
COLUMNS = ("call_start", "query_aware", "recent_fit", "bm25_all", "recipe")
LABELS = {
    "call_start": "call-start",
    "query_aware": "query-aware",
    "recent_fit": "recent-fit",
    "bm25_all": "bm25-all",
    "recipe": "recipe-20",
}
BM25_K1 = 1.2
BM25_B = 0.75


@dataclass(frozen=True)
class Measure:
    recall: float
    tokens: int
    missing: list[Fact] = field(default_factory=list)


@dataclass(frozen=True)
class CaseResult:
    case: EvalCase
    budget: int
    measures: dict[str, Measure]
    facts_stored: int
    recipe_capped: bool

    def __getattr__(self, name: str) -> Measure:
        try:
            return self.__dict__["measures"][name]
        except KeyError:
            raise AttributeError(name) from None


def measure(case: EvalCase, texts: Sequence[str]) -> Measure:
    text = "\n".join(texts)
    missing = [f for f in case.required_facts if not fact_present(f, text)]
    recall = 1 - len(missing) / len(case.required_facts)
    return Measure(recall, sum(message_tokens(t) for t in texts), missing)


def _lines(messages: Sequence[dict[str, str]]) -> list[str]:
    return [f"- {m['role']}: {m['content']}" for m in messages]


def recipe_block(messages: Sequence[dict[str, str]], budget: int) -> tuple[str, bool]:
    """The recipe's memory message over its last 20 messages; oldest lines dropped to fit ``budget``."""
    lines = _lines(messages[-RECIPE_MAX_MESSAGES:])
    capped = False
    while lines and message_tokens("\n".join([RECIPE_HEADER, *lines])) > budget:
        lines.pop(0)
        capped = True
    return ("\n".join([RECIPE_HEADER, *lines]) if lines else ""), capped


def recent_fit_block(messages: Sequence[dict[str, str]], budget: int) -> str:
    """The most recent lines, oldest first, as many as fit ``budget``."""
    lines = _lines(messages)
    picked: list[int] = []
    for index in range(len(lines) - 1, -1, -1):
        if message_tokens("\n".join(lines[i] for i in [index, *picked])) > budget:
            break
        picked.insert(0, index)
    return "\n".join(lines[i] for i in picked)


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def bm25_scores(query: str, documents: Sequence[str]) -> list[float]:
    """Okapi BM25 of ``query`` against each document (IDF with the +1 that keeps it positive)."""
    docs = [Counter(_words(d)) for d in documents]
    lengths = [sum(d.values()) for d in docs]
    average = sum(lengths) / len(docs) if docs else 0.0
    frequency = Counter(w for d in docs for w in d)
    n = len(docs)
    scores = []
    for doc, length in zip(docs, lengths, strict=True):
        score = 0.0
        for word in set(_words(query)):
            tf = doc.get(word, 0)
            if tf:
                idf = math.log(1 + (n - frequency[word] + 0.5) / (frequency[word] + 0.5))
                score += idf * tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * length / (average or 1)))
        scores.append(score)
    return scores


def bm25_block(messages: Sequence[dict[str, str]], question: str, budget: int) -> str:
    """Plain BM25 over all lines: best first while the message fits the budget, shown in their original order."""
    lines = _lines(messages)
    scores = bm25_scores(question, [m["content"] for m in messages])
    picked: list[int] = []
    for index in sorted(range(len(lines)), key=lambda i: (-scores[i], i)):
        if scores[index] <= 0:
            break
        if message_tokens("\n".join(lines[i] for i in sorted([*picked, index]))) <= budget:
            picked.append(index)
    return "\n".join(lines[i] for i in sorted(picked))


async def evaluate_case(
    case: EvalCase,
    workdir: Path,
    *,
    budgets: Sequence[int],
    llm: LLMClient | None,
    encrypted: bool = False,
    database_url: str | None = None,
    embedder: EmbeddedEmbedder | None = None,
) -> list[CaseResult]:
    store: Store = PostgresStore(database_url) if database_url else SqliteStore(workdir / f"{case.test_id}.db")
    keys: SqliteKeyStore | None = None
    if encrypted:  # every text sealed with the member's key, the index holding keyed term hashes
        keys = SqliteKeyStore(workdir / f"{case.test_id}.keys.db", parse_master_key(generate_master_key_text()))
        await keys.open()
        store = EncryptedStore(store, keys)
    await store.open()
    try:
        memory = MemoryService(store, budget_tokens=max(budgets), persona=DEFAULT_PERSONA, keys=keys)
        conversations = parse_conversations(
            [{"started_at": s.timestamp.isoformat(), "messages": s.messages} for s in case.sessions]
        )
        await import_conversations(store, memory, USER_ID, conversations)
        if llm is not None:
            processor = PostCallProcessor(store, llm)
            while await processor.run_once():
                pass
        if embedder is not None:  # what the post-call queue's embed jobs store, then fused in query-aware builds
            member = MemberEmbedder(store, embedder)
            while (await member.embed_member(USER_ID))[1]:
                pass
            memory.context.dense = DenseRetriever(store, embedder)
        history = [m for s in case.sessions for m in s.messages]
        facts_stored = await store.count_facts(USER_ID)
        results = []
        for budget in budgets:
            call_start = (await memory.build_context(USER_ID, budget_tokens=budget))[1:]
            query_aware = (await memory.build_context(USER_ID, budget_tokens=budget, query=case.user_question))[1:]
            recipe, capped = recipe_block(history, budget)
            recent = recent_fit_block(history, budget)
            bm25 = bm25_block(history, case.user_question, budget)
            measures = {
                "call_start": measure(case, [m["content"] for m in call_start]),
                "query_aware": measure(case, [m["content"] for m in query_aware]),
                "recent_fit": measure(case, [recent] if recent else []),
                "bm25_all": measure(case, [bm25] if bm25 else []),
                "recipe": measure(case, [recipe] if recipe else []),
            }
            results.append(CaseResult(case, budget, measures, facts_stored, capped))
        await memory.wait_scrubbed()
        return results
    finally:
        await store.close()
        if keys is not None:
            await keys.close()


async def run(
    cases: Sequence[EvalCase],
    *,
    budgets: Sequence[int] = DEFAULT_BUDGETS,
    llm: LLMClient | None = None,
    concurrency: int = 1,
    encrypted: bool = False,
    new_postgres_database: Callable[[], str] | None = None,
    embedder: EmbeddedEmbedder | None = None,
) -> list[CaseResult]:
    """Every case at every budget: results ordered by budget, then case. On SQLite, or with
    `new_postgres_database` (a fresh database's URL per case) on PostgreSQL."""
    limit = asyncio.Semaphore(concurrency)
    with tempfile.TemporaryDirectory(prefix="memory-quality-") as tmp:

        async def one(case: EvalCase) -> list[CaseResult]:
            async with limit:
                url = new_postgres_database() if new_postgres_database else None
                return await evaluate_case(
                    case,
                    Path(tmp),
                    budgets=budgets,
                    llm=llm,
                    encrypted=encrypted,
                    database_url=url,
                    embedder=embedder,
                )

        per_case = await asyncio.gather(*(one(c) for c in cases))
    return [r for budget in budgets for results in per_case for r in results if r.budget == budget]


HARD_COLUMNS = ("call_start", "query_aware", "query_lexical", "bm25_all", "recent_fit")
HARD_LABELS = {**LABELS, "query_lexical": "qa-lexical"}


def evidence_recall(case: HardCase, text: str) -> float:
    lowered = text.lower()
    return sum(line.lower() in lowered for line in case.evidence) / len(case.evidence)


async def evaluate_hard(
    case: HardCase, workdir: Path, budget: int, embedder: EmbeddedEmbedder | None
) -> dict[str, float]:
    """Evidence recall of each builder for one hard case (``bench/memory_hard_cases.py``) at ``budget`` tokens:
    the bot's blocks (query-aware with the embedded model and without it, as ``qa-lexical``) and the baselines."""
    store = SqliteStore(workdir / f"hard-{case.case_id}.db")
    await store.open()
    try:
        memory = MemoryService(store, budget_tokens=budget, persona=DEFAULT_PERSONA)
        conversations = parse_conversations([{"started_at": t.isoformat(), "messages": m} for t, m in case.sessions])
        await import_conversations(store, memory, USER_ID, conversations)
        history = [m for _, messages in case.sessions for m in messages]

        async def block(query: str | None) -> str:
            return "\n".join(m["content"] for m in (await memory.build_context(USER_ID, query=query))[1:])

        texts = {"call_start": await block(None), "query_lexical": await block(case.question)}
        if embedder is not None:
            member = MemberEmbedder(store, embedder)
            while (await member.embed_member(USER_ID))[1]:
                pass
            memory.context.dense = DenseRetriever(store, embedder)
        texts["query_aware"] = await block(case.question)
        texts["bm25_all"] = bm25_block(history, case.question, budget)
        texts["recent_fit"] = recent_fit_block(history, budget)
        await memory.wait_scrubbed()
        return {column: evidence_recall(case, text) for column, text in texts.items()}
    finally:
        await store.close()


async def run_hard(cases: Sequence[HardCase], budget: int, embedder: EmbeddedEmbedder | None) -> list[dict[str, float]]:
    with tempfile.TemporaryDirectory(prefix="memory-hard-") as tmp:
        return [await evaluate_hard(case, Path(tmp), budget, embedder) for case in cases]


def hard_report(cases: Sequence[HardCase], results: Sequence[dict[str, float]], budget: int) -> str:
    out = [
        f"Evidence recall on {len(cases)} hard cases (bench/memory_hard_cases.py) at {budget} tokens",
        f"{'kind':12} {'cases':>5} | " + " ".join(f"{HARD_LABELS[c]:>11}" for c in HARD_COLUMNS),
    ]
    kinds = sorted({case.kind for case in cases})
    for kind in [*kinds, "all"]:
        rows = [r for case, r in zip(cases, results, strict=True) if kind in ("all", case.kind)]
        recall = " ".join(f"{_mean([r[c] for r in rows]):>11.3f}" for c in HARD_COLUMNS)
        out.append(f"{kind:12} {len(rows):>5} | {recall}")
    return "\n".join(out)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def recall_of(results: Sequence[CaseResult], column: str, layer: str, budget: int) -> float:
    return _mean([r.measures[column].recall for r in results if r.case.layer == layer and r.budget == budget])


def targets(results: Sequence[CaseResult]) -> list[tuple[str, float, float, bool]]:
    """The issue's targets at 1,500 tokens on layer 2: (what, measured, wanted, met)."""
    if not any(r.budget == TARGET_BUDGET and r.case.layer == "layer2" for r in results):
        return []
    query = recall_of(results, "query_aware", "layer2", TARGET_BUDGET)
    bm25 = recall_of(results, "bm25_all", "layer2", TARGET_BUDGET)
    start = recall_of(results, "call_start", "layer2", TARGET_BUDGET)
    recent = recall_of(results, "recent_fit", "layer2", TARGET_BUDGET)
    return [
        ("query-aware - bm25-all", query - bm25, 0.15, query - bm25 >= 0.15),
        ("query-aware", query, 0.85, query >= 0.85),
        ("call-start - recent-fit", start - recent, 0.10, start - recent >= 0.10),
    ]


def against_call_start(results: Sequence[CaseResult]) -> list[tuple[int, dict[str, float]]]:
    """Query-aware recall less call start's, per budget, for each layer and all cases: issue 42 asks for no layer
    below zero at any budget."""
    gaps = []
    for budget in sorted({r.budget for r in results}):
        rows = [r for r in results if r.budget == budget]
        by_layer = {
            layer: _mean([r.measures["query_aware"].recall - r.measures["call_start"].recall for r in chosen])
            for layer in ("layer1", "layer2", "all")
            if (chosen := [r for r in rows if layer == "all" or r.case.layer == layer])
        }
        gaps.append((budget, by_layer))
    return gaps


def report(results: Sequence[CaseResult], *, extraction: bool, seconds: float | None = None) -> str:
    budgets = sorted({r.budget for r in results})
    cases = len({r.case.test_id for r in results})
    out = [
        f"Memory quality on memory-eval: {cases} cases, budgets {', '.join(map(str, budgets))} tokens (o200k), "
        f"extraction {'on (LLM)' if extraction else 'off'}" + (f", {seconds:.1f} s" if seconds is not None else ""),
        "",
        f"{'budget':>6} {'layer':8} {'cases':>5} | "
        + " ".join(f"{LABELS[c]:>11}" for c in COLUMNS)
        + " | mean tokens used: "
        + " ".join(f"{LABELS[c]:>11}" for c in COLUMNS),
    ]
    for budget in budgets:
        for layer in ("layer1", "layer2", "all"):
            rows = [r for r in results if r.budget == budget and (layer == "all" or r.case.layer == layer)]
            if not rows:
                continue
            recall = " ".join(f"{_mean([r.measures[c].recall for r in rows]):>11.3f}" for c in COLUMNS)
            tokens = " ".join(f"{_mean([r.measures[c].tokens for r in rows]):>11.0f}" for c in COLUMNS)
            out.append(f"{budget:>6} {layer:8} {len(rows):>5} | {recall} | {'':18}{tokens}")
    checks = targets(results)
    if checks:
        out += ["", f"targets at {TARGET_BUDGET} tokens, layer 2:"]
        out += [
            f"  {what:<26} {got:+.3f}  (target >= {want:.2f}: {'met' if ok else 'NOT met'})"
            for what, got, want, ok in checks
        ]
    out += ["", "query-aware - call-start (issue 42: >= 0 on each layer):"]
    for budget, gaps in against_call_start(results):
        verdict = "met" if all(gap >= 0 for gap in gaps.values()) else "NOT met"
        shown = "  ".join(f"{layer} {gap:+.3f}" for layer, gap in gaps.items())
        out.append(f"  {budget:>6}  {shown}  ({verdict})")
    stored = _mean([r.facts_stored for r in results])
    capped = sum(r.recipe_capped for r in results if r.budget == budgets[-1])
    out.append(
        f"facts stored per case: {stored:.1f}; recipe lines dropped to fit {budgets[-1]} tokens in {capped} cases"
    )
    shipped = sorted({r.case.test_id for r in results if r.case.gold_source == "shipped"})
    derived = sorted({r.case.test_id for r in results if r.case.gold_source == "derived"})
    out.append(f"gold facts shipped ({len(shipped)}): {', '.join(shipped) or '-'}")
    out.append(f"gold facts derived ({len(derived)}): {', '.join(derived) or '-'}")
    return "\n".join(out)


def details(results: Sequence[CaseResult], budget: int) -> str:
    rows = [r for r in results if r.budget == budget]
    out = ["", f"per case at {budget} tokens", f"{'case':44} " + " ".join(f"{LABELS[c]:>11}" for c in COLUMNS)]
    for r in rows:
        missing = "; ".join(f if isinstance(f, str) else " | ".join(f) for f in r.measures["query_aware"].missing)
        recall = " ".join(f"{r.measures[c].recall:>11.2f}" for c in COLUMNS)
        out.append(f"{r.case.test_id:44} {recall}  missing from query-aware: {missing or '-'}")
    return "\n".join(out)


def _llm_from_env() -> LLMClient:
    base_url = os.environ.get("LLM_BASE_URL")
    if not base_url:
        raise SystemExit("--llm needs LLM_BASE_URL (and usually LLM_API_KEY and LLM_MODEL) in the environment")
    return LLMClient(
        base_url=base_url,
        model=os.environ.get("LLM_MODEL", "gpt-4o-mini"),
        api_key=os.environ.get("LLM_API_KEY"),
        timeout=120.0,
    )


async def _main(args: argparse.Namespace) -> int:
    try:
        cases = load_cases(args.cases)
    except FileNotFoundError as exc:
        print(exc, file=sys.stderr)
        return 2
    root, chosen_by = where(args.cases)
    print(f"cases: {root} (from {chosen_by})")
    for problem in audit(cases):
        print(f"warning: {problem}", file=sys.stderr)
    if args.limit is not None:
        cases = cases[: args.limit]
    llm = _llm_from_env() if args.llm else None
    embedder = None if args.lexical else EmbeddedEmbedder()
    concurrency = args.concurrency if llm else 1
    by_backend: dict[str, list[CaseResult]] = {}
    try:
        for backend in args.backends.split(","):
            started = time.perf_counter()
            if backend == "postgresql":
                for cluster in running_cluster():
                    results = await run(
                        cases,
                        budgets=args.budgets,
                        llm=llm,
                        concurrency=concurrency,
                        new_postgres_database=cluster.new_database,
                        encrypted=args.encrypted,
                        embedder=embedder,
                    )
            else:
                results = await run(
                    cases,
                    budgets=args.budgets,
                    llm=llm,
                    concurrency=concurrency,
                    encrypted=args.encrypted,
                    embedder=embedder,
                )
            by_backend[backend] = results
            print(f"== {backend}")
            print(report(results, extraction=llm is not None, seconds=time.perf_counter() - started))
            if args.verbose:
                print(details(results, TARGET_BUDGET if TARGET_BUDGET in args.budgets else args.budgets[0]))
    finally:
        if llm is not None:
            await llm.aclose()
    if len(by_backend) == 2:
        print(backend_difference(by_backend["sqlite"], by_backend["postgresql"]))
    if args.hard:
        hard = hard_cases()
        for budget in args.budgets:
            print()
            print(hard_report(hard, await run_hard(hard, budget, embedder), budget))
    return 0


def backend_difference(sqlite: Sequence[CaseResult], postgres: Sequence[CaseResult]) -> str:
    """The largest difference in mean recall between the backends, per column over all budgets (target 0.02)."""
    parts, worst = [], 0.0
    for column in COLUMNS:
        gap = abs(
            _mean([r.measures[column].recall for r in sqlite]) - _mean([r.measures[column].recall for r in postgres])
        )
        worst = max(worst, gap)
        parts.append(f"{column} {gap:.3f}")
    verdict = "met" if worst <= 0.02 else "NOT met"
    return f"recall difference SQLite vs PostgreSQL: {', '.join(parts)} (target <= 0.02: {verdict})"


def _budgets(text: str) -> tuple[int, ...]:
    return tuple(int(b) for b in text.split(","))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--cases", type=Path, default=None, help="folder of the memory-eval cases")
    parser.add_argument("--limit", type=int, default=None, help="only the first N cases (quick runs)")
    parser.add_argument(
        "--budgets", type=_budgets, default=DEFAULT_BUDGETS, help="memory token budgets, comma-separated"
    )
    parser.add_argument("--llm", action="store_true", help="extract facts with the LLM from LLM_* env first")
    parser.add_argument("--concurrency", type=int, default=4, help="cases processed at once with --llm")
    parser.add_argument("--verbose", action="store_true", help="per-case recall and the facts missed")
    parser.add_argument("--encrypted", action="store_true", help="store every text encrypted with the member's key")
    parser.add_argument(
        "--hard", action="store_true", help="also the hard cases (paraphrase, distractor, multi-hop, temporal)"
    )
    parser.add_argument(
        "--lexical", action="store_true", help="the embedded model off (memory.semantic_search false): BM25 only"
    )
    parser.add_argument("--backends", default="sqlite", help="comma-separated: sqlite, postgresql (both: compared)")
    return asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
