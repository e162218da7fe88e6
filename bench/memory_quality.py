"""Memory quality on the memory-eval cases: how many of the facts a later question needs reach the agent.

For each case: a fresh store (a temporary file); every past session goes through the real import path as a
finished call of one user (``parse_conversations`` + ``import_conversations``, with the session's timestamp);
with ``--llm`` the PostCallProcessor then extracts facts and summaries from those calls. Then it measures,
within the token budget, the share of the case's gold facts (``fact_present``) found in

- call-start: the memory block of ``memory.build_context(user)``, what a voice call starts with;
- query-aware: the memory block of ``memory.build_context(user, query=user_question)``, what text chat gets;
- recipe: the Agora memory recipe's approach, its header and the last 20 messages as "- role: content" lines
  (oldest lines dropped if that exceeds the budget, so every column gets the same budget);
- recent-fit: the most recent "- role: content" lines that fit the budget.

Recall is the mean over cases of (gold facts present / gold facts). Tokens are the estimate the product uses
(``bot.memory.tokens.estimate_message_tokens``) over the memory messages only, not the persona.

    .venv/bin/python bench/memory_quality.py [--cases N] [--budget TOKENS] [--llm] [--verbose]

``--llm`` reads LLM_BASE_URL, LLM_API_KEY and LLM_MODEL from the environment.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.memory_eval_cases import EvalCase, Fact, fact_present, load_cases
from bot.config import DEFAULT_PERSONA
from bot.llm.client import LLMClient
from bot.memory.importer import import_conversations, parse_conversations
from bot.memory.postcall import PostCallProcessor
from bot.memory.service import MemoryService
from bot.memory.tokens import estimate_message_tokens
from bot.store.postgres import PostgresStore
from bot.store.repository import Store
from bot.store.sqlite import SqliteStore
from tests.postgres import running_cluster

USER_ID = 1
DEFAULT_BUDGET = 1500
RECIPE_MAX_MESSAGES = 20
RECIPE_HEADER = (
    "You are talking to a RETURNING user. Here is what you remember from past conversations with them — use it "
    "naturally; do not read it back verbatim:"
)
COLUMNS = ("call_start", "query_aware", "recipe", "recent_fit")
TARGET_RATIO = 2.0


@dataclass(frozen=True)
class Measure:
    recall: float
    tokens: int
    missing: list[Fact] = field(default_factory=list)


@dataclass(frozen=True)
class CaseResult:
    case: EvalCase
    call_start: Measure
    query_aware: Measure
    recipe: Measure
    recent_fit: Measure
    facts_stored: int
    recipe_capped: bool


def measure(case: EvalCase, texts: Sequence[str]) -> Measure:
    text = "\n".join(texts)
    missing = [f for f in case.required_facts if not fact_present(f, text)]
    recall = 1 - len(missing) / len(case.required_facts)
    return Measure(recall, sum(estimate_message_tokens(t) for t in texts), missing)


def _lines(messages: Sequence[dict[str, str]]) -> list[str]:
    return [f"- {m['role']}: {m['content']}" for m in messages]


def recipe_block(messages: Sequence[dict[str, str]], budget: int) -> tuple[str, bool]:
    """The recipe's memory message over its last 20 messages; oldest lines dropped to fit ``budget``."""
    lines = _lines(messages[-RECIPE_MAX_MESSAGES:])
    capped = False
    while lines and estimate_message_tokens("\n".join([RECIPE_HEADER, *lines])) > budget:
        lines.pop(0)
        capped = True
    return ("\n".join([RECIPE_HEADER, *lines]) if lines else ""), capped


def recent_fit_block(messages: Sequence[dict[str, str]], budget: int) -> str:
    """The most recent lines, oldest first, as many as fit ``budget``."""
    picked: list[str] = []
    for line in reversed(_lines(messages)):
        if estimate_message_tokens("\n".join([line, *picked])) > budget:
            break
        picked.insert(0, line)
    return "\n".join(picked)


async def evaluate_case(
    case: EvalCase, workdir: Path, *, budget: int, llm: LLMClient | None, database_url: str | None = None
) -> CaseResult:
    store: Store = PostgresStore(database_url) if database_url else SqliteStore(workdir / f"{case.test_id}.db")
    await store.open()
    try:
        memory = MemoryService(store, budget_tokens=budget, persona=DEFAULT_PERSONA)
        conversations = parse_conversations(
            [{"started_at": s.timestamp.isoformat(), "messages": s.messages} for s in case.sessions]
        )
        await import_conversations(store, memory, USER_ID, conversations)
        if llm is not None:
            processor = PostCallProcessor(store, llm)
            while await processor.run_once():
                pass
        call_start = (await memory.build_context(USER_ID))[1:]
        query_aware = (await memory.build_context(USER_ID, query=case.user_question))[1:]
        history = [m for s in case.sessions for m in s.messages]
        recipe, capped = recipe_block(history, budget)
        recent = recent_fit_block(history, budget)
        result = CaseResult(
            case=case,
            call_start=measure(case, [m["content"] for m in call_start]),
            query_aware=measure(case, [m["content"] for m in query_aware]),
            recipe=measure(case, [recipe] if recipe else []),
            recent_fit=measure(case, [recent] if recent else []),
            facts_stored=await store.count_facts(USER_ID),
            recipe_capped=capped,
        )
        await memory.wait_scrubbed()
        return result
    finally:
        await store.close()


async def run(
    cases: Sequence[EvalCase],
    *,
    budget: int = DEFAULT_BUDGET,
    llm: LLMClient | None = None,
    concurrency: int = 1,
    new_postgres_database: Callable[[], str] | None = None,
) -> list[CaseResult]:
    """On SQLite, or with `new_postgres_database` (a fresh database's URL per case) on PostgreSQL."""
    limit = asyncio.Semaphore(concurrency)
    with tempfile.TemporaryDirectory(prefix="memory-quality-") as tmp:

        async def one(case: EvalCase) -> CaseResult:
            async with limit:
                url = new_postgres_database() if new_postgres_database else None
                return await evaluate_case(case, Path(tmp), budget=budget, llm=llm, database_url=url)

        return list(await asyncio.gather(*(one(c) for c in cases)))


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def report(results: Sequence[CaseResult], *, budget: int, extraction: bool, seconds: float | None = None) -> str:
    out = [
        f"Memory quality on memory-eval: {len(results)} cases, budget {budget} tokens, "
        f"extraction {'on (LLM)' if extraction else 'off'}" + (f", {seconds:.1f} s" if seconds is not None else ""),
        "",
        f"{'':8} {'':>5} | {'recall of the required facts':^47} | {'mean tokens used':^39}",
        f"{'layer':8} {'cases':>5} | {'call-start':>10} {'query-aware':>11} {'recipe':>10} {'recent-fit':>10}"
        f" | {'call-start':>10} {'query':>6} {'recipe':>8} {'recent':>8}  facts",
    ]
    groups = [(layer, [r for r in results if r.case.layer == layer]) for layer in ("layer1", "layer2")]
    groups.append(("all", list(results)))
    for name, rows in groups:
        if not rows:
            continue
        recall = {c: _mean([getattr(r, c).recall for r in rows]) for c in COLUMNS}
        tokens = {c: _mean([getattr(r, c).tokens for r in rows]) for c in COLUMNS}
        out.append(
            f"{name:8} {len(rows):>5} | {recall['call_start']:>10.3f} {recall['query_aware']:>11.3f} "
            f"{recall['recipe']:>10.3f} {recall['recent_fit']:>10.3f} | {tokens['call_start']:>10.0f} "
            f"{tokens['query_aware']:>6.0f} {tokens['recipe']:>8.0f} {tokens['recent_fit']:>8.0f}"
            f"  {_mean([r.facts_stored for r in rows]):>5.1f}"
        )
    layer2 = [r for r in results if r.case.layer == "layer2"]
    if layer2:
        ours = _mean([r.query_aware.recall for r in layer2])
        recipe = _mean([r.recipe.recall for r in layer2])
        ratio = f"{ours / recipe:.2f}x" if recipe else "inf (recipe found nothing)"
        verdict = "met" if not recipe or ours / recipe >= TARGET_RATIO else "NOT met"
        out += ["", f"layer2 query-aware / recipe recall: {ratio} (target >= {TARGET_RATIO:g}x: {verdict})"]
    capped = sum(r.recipe_capped for r in results)
    out.append(f"recipe lines dropped to fit the budget in {capped} of {len(results)} cases")
    shipped = [r.case.test_id for r in results if r.case.gold_source == "shipped"]
    derived = [r.case.test_id for r in results if r.case.gold_source == "derived"]
    out.append(f"gold facts shipped ({len(shipped)}): {', '.join(shipped) or '-'}")
    out.append(f"gold facts derived ({len(derived)}): {', '.join(derived) or '-'}")
    return "\n".join(out)


def details(results: Sequence[CaseResult]) -> str:
    out = ["", f"{'case':44} {'call':>5} {'query':>5} {'recipe':>6} {'recent':>6}  missing from query-aware"]
    for r in results:
        missing = "; ".join(f if isinstance(f, str) else " | ".join(f) for f in r.query_aware.missing)
        out.append(
            f"{r.case.test_id:44} {r.call_start.recall:>5.2f} {r.query_aware.recall:>5.2f} "
            f"{r.recipe.recall:>6.2f} {r.recent_fit.recall:>6.2f}  {missing}"
        )
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
    cases = load_cases()
    if args.cases is not None:
        cases = cases[: args.cases]
    llm = _llm_from_env() if args.llm else None
    concurrency = args.concurrency if llm else 1
    by_backend: dict[str, list[CaseResult]] = {}
    try:
        for backend in args.backends.split(","):
            started = time.perf_counter()
            if backend == "postgresql":
                for cluster in running_cluster():
                    results = await run(
                        cases,
                        budget=args.budget,
                        llm=llm,
                        concurrency=concurrency,
                        new_postgres_database=cluster.new_database,
                    )
            else:
                results = await run(cases, budget=args.budget, llm=llm, concurrency=concurrency)
            by_backend[backend] = results
            print(f"== {backend}")
            print(
                report(results, budget=args.budget, extraction=llm is not None, seconds=time.perf_counter() - started)
            )
            if args.verbose:
                print(details(results))
            print()
    finally:
        if llm is not None:
            await llm.aclose()
    if len(by_backend) == 2:
        print(backend_difference(by_backend["sqlite"], by_backend["postgresql"]))
    return 0


def backend_difference(sqlite: Sequence[CaseResult], postgres: Sequence[CaseResult]) -> str:
    """The largest difference in mean recall between the backends, per column (target: at most 0.02)."""
    parts = []
    worst = 0.0
    for column in COLUMNS:
        gap = abs(
            _mean([getattr(r, column).recall for r in sqlite]) - _mean([getattr(r, column).recall for r in postgres])
        )
        worst = max(worst, gap)
        parts.append(f"{column} {gap:.3f}")
    verdict = "met" if worst <= 0.02 else "NOT met"
    return f"recall difference SQLite vs PostgreSQL: {', '.join(parts)} (target <= 0.02: {verdict})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=None, help="only the first N cases (quick runs)")
    parser.add_argument("--budget", type=int, default=DEFAULT_BUDGET, help="memory token budget (default 1500)")
    parser.add_argument("--llm", action="store_true", help="extract facts with the LLM from LLM_* env first")
    parser.add_argument("--concurrency", type=int, default=4, help="cases processed at once with --llm")
    parser.add_argument("--verbose", action="store_true", help="per-case recall and the facts missed")
    parser.add_argument("--backends", default="sqlite,postgresql", help="comma-separated: sqlite, postgresql")
    return asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
