"""Evidence recall on real long conversations (LoCoMo's development half), scored as its README says.

For each conversation file in ``--data`` (``../shared/benchmarks/locomo-dev`` beside the repository by default;
never copied into this repository): ``speaker_a`` is the member and ``speaker_b`` the agent; each session becomes one
call through the bot's own ``import-history`` path (``bot.cli.import_history``: the sessions as finished calls,
embedded when semantic search is on), dated by the session's date. Then, for each question of categories 1-4 with
evidence, the memory block the agent would get while the member asks it, built by the bot's own ``context`` path
(``bot.cli.context``: ``open_services`` + ``build_context(user, budget_tokens=B, query=QUESTION)``) in a new set of
services opened after the import (what a fresh process has), at each budget. With ``--cli`` the blocks come from real
``python -m bot context`` processes instead (slow: one process per question; use ``--limit``).

Evidence recall: the share of evidence lines found whole in the block (every word of the line, in order, compared
as lower-cased letters and digits, the block's quoted lines read back first, so escaping does not matter: a line
break inside a line is quoted as the two characters ``\\n``). Columns, side by side:

- ``bm25``: plain BM25 (Okapi, k1 1.2, b 0.75) of the question over all lines (``speaker: text``), filled by rank
  within the budget at 4 characters a token (the README's floor);
- ``call-start``: the block a call starts with (``context`` without a query), the same for every question;
- ``query-aware``: the block built for the question;
- ``small-talk``: blocks built for utterances that name nothing ("hi", "thanks, bye", ...), scored against every
  question's evidence like call start: query-aware must not lose to call start there.

    .venv/bin/python bench/locomo.py [--data DIR] [--budgets 500,1500,4000] [--limit N] [--questions N] [--cli]
        [--no-semantic] [--verbose]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_DATA = ROOT.parent / "shared" / "benchmarks" / "locomo-dev"
DEFAULT_BUDGETS = (500, 1500, 4000)
USER_ID = 4242
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
SMALL_TALK = ("hi", "hey, how are you?", "thanks, bye", "ok", "good morning!", "haha yes")
CHARS_PER_TOKEN = 4
BM25_K1 = 1.2
BM25_B = 0.75
_SESSION = re.compile(r"session_(\d+)")
_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class Question:
    text: str
    category: int
    evidence: tuple[str, ...]


@dataclass
class Conversation:
    name: str
    sessions: list[tuple[datetime, list[dict[str, str]]]]
    lines: dict[str, tuple[str, str]]
    """dia_id -> (speaker, text)."""
    questions: list[Question]


@dataclass
class Tally:
    found: dict[tuple[str, int, int], float] = field(default_factory=lambda: defaultdict(float))
    counted: dict[tuple[str, int, int], int] = field(default_factory=lambda: defaultdict(int))
    questions: dict[int, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, column: str, budget: int, category: int, found: tuple[int, int]) -> None:
        """Evidence lines are counted, not questions: recall is the share of all evidence lines found."""
        for cat in (category, 0):
            self.found[column, budget, cat] += found[0]
            self.counted[column, budget, cat] += found[1]

    def recall(self, column: str, budget: int, category: int = 0) -> float:
        n = self.counted.get((column, budget, category), 0)
        return self.found.get((column, budget, category), 0.0) / n if n else math.nan


def parse_date(text: str) -> datetime:
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def load(path: Path) -> Conversation:
    data = json.loads(path.read_text(encoding="utf-8"))
    member = data["speaker_a"]
    sessions, lines = [], {}
    numbers = sorted(int(m.group(1)) for key in data if (m := _SESSION.fullmatch(key)) and data[key])
    for n in numbers:
        messages = []
        for turn in data[f"session_{n}"]:
            role = "user" if turn["speaker"] == member else "assistant"
            messages.append({"role": role, "content": turn["text"]})
            lines[turn["dia_id"]] = (turn["speaker"], turn["text"])
        sessions.append((parse_date(data[f"session_{n}_date_time"]), messages))
    questions = [
        Question(q["question"], q["category"], tuple(q["evidence"]))
        for q in data["qa"]
        if q.get("category") in CATEGORIES and q.get("evidence")
    ]
    return Conversation(path.stem, sessions, lines, questions)


def normal(text: str) -> str:
    return " " + " ".join(_WORD.findall(text.lower())) + " "


_STRING_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"')


def unescaped(block: str) -> str:
    """``block`` with each JSON string literal (how the memory block quotes every remembered text) read back, so a
    line said over two lines ("\\n" in the block) compares as said: the measure ignores quoting and escaping."""

    def read(match: re.Match[str]) -> str:
        try:
            return str(json.loads(match.group(0)))
        except ValueError:
            return match.group(0)

    return _STRING_LITERAL.sub(read, block)


def evidence_found(block: str, question: Question, convo: Conversation) -> tuple[int, int]:
    """(evidence lines found whole in ``block``, evidence lines of the question)."""
    text = normal(unescaped(block))
    return sum(normal(convo.lines[i][1]) in text for i in question.evidence if i in convo.lines), len(question.evidence)


def bm25_block(convo: Conversation, question: str, budget: int) -> str:
    docs = [(dia_id, f"{speaker}: {text}") for dia_id, (speaker, text) in convo.lines.items()]
    tokens = [_WORD.findall(d.lower()) for _, d in docs]
    n = len(docs)
    avg = sum(len(t) for t in tokens) / n
    df: Counter[str] = Counter()
    for t in tokens:
        df.update(set(t))
    query = set(_WORD.findall(question.lower()))
    scores = []
    for t in tokens:
        tf = Counter(t)
        score = 0.0
        for w in query:
            if tf[w]:
                idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
                score += idf * tf[w] * (BM25_K1 + 1) / (tf[w] + BM25_K1 * (1 - BM25_B + BM25_B * len(t) / avg))
        scores.append(score)
    left = budget * CHARS_PER_TOKEN
    chosen = []
    for at in sorted(range(n), key=lambda i: -scores[i]):
        if scores[at] <= 0:
            break
        cost = len(docs[at][1]) + 1
        if cost <= left:
            chosen.append(at)
            left -= cost
    return "\n".join(docs[at][1] for at in sorted(chosen))


def write_config(workdir: Path, semantic: bool) -> Path:
    config = workdir / "config.toml"
    config.write_text(
        f'[memory]\ndatabase_path = "{workdir / "bot.db"}"\nsemantic_search = {"true" if semantic else "false"}\n'
    )
    return config


def history_file(convo: Conversation, workdir: Path) -> Path:
    path = workdir / "history.json"
    path.write_text(
        json.dumps([{"started_at": at.isoformat(), "messages": messages} for at, messages in convo.sessions]),
        encoding="utf-8",
    )
    return path


def block_of(messages: Sequence[dict[str, str]]) -> str:
    return "\n".join(m["content"] for m in messages[1:])


async def blocks_in_process(
    config: Path, queries: Sequence[str | None], budgets: Sequence[int], cpu: list[float]
) -> dict[tuple[str | None, int], str]:
    """Every block, from one set of services opened after the import; the CPU of each question's build (with a
    query: what a chat message or a voice turn costs) is appended to ``cpu``."""
    from bot.app import open_services
    from bot.config import load_settings

    settings = load_settings(config, environ={})
    out: dict[tuple[str | None, int], str] = {}
    async with open_services(settings) as services:
        for budget in budgets:
            for query in queries:
                began = time.process_time()
                messages = await services.memory.build_context(USER_ID, budget_tokens=budget, query=query)
                if query is not None:
                    cpu.append(time.process_time() - began)
                out[query, budget] = block_of(messages)
    return out


def block_by_cli(config: Path, query: str | None, budget: int) -> str:
    command = [sys.executable, "-m", "bot", "--config", str(config), "context", str(USER_ID), "--budget", str(budget)]
    if query is not None:
        command += ["--query", query]
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT, env={**os.environ})
    return block_of(json.loads(done.stdout))


def import_history(config: Path, history: Path) -> None:
    from bot.__main__ import main

    if main(["--config", str(config), "import-history", str(USER_ID), str(history)]) != 0:
        raise SystemExit("import-history failed")


def score(
    convo: Conversation, blocks: dict[tuple[str | None, int], str], budgets: Sequence[int], tally: Tally, verbose: bool
) -> None:
    for budget in budgets:
        start = blocks[None, budget]
        for q in convo.questions:
            tally.add("bm25", budget, q.category, evidence_found(bm25_block(convo, q.text, budget), q, convo))
            tally.add("call-start", budget, q.category, evidence_found(start, q, convo))
            aware = evidence_found(blocks[q.text, budget], q, convo)
            tally.add("query-aware", budget, q.category, aware)
            tally.questions[budget] += 1
            for talk in SMALL_TALK:
                tally.add("small-talk", budget, q.category, evidence_found(blocks[talk, budget], q, convo))
            if verbose and budget == 1500 and aware[0] < aware[1]:
                missing = [
                    i
                    for i in q.evidence
                    if normal(convo.lines.get(i, ("", ""))[1]) not in normal(blocks[q.text, budget])
                ]
                print(f"  [{CATEGORIES[q.category]}] {q.text}")
                for i in missing:
                    print(f"      missing {i}: {convo.lines.get(i, ('?', '?'))[1][:140]}")


def report(tally: Tally, budgets: Sequence[int], seconds: float) -> str:
    columns = ("bm25", "call-start", "query-aware", "small-talk")
    rows = [f"evidence recall on LoCoMo dev ({seconds:.0f} s)", ""]
    rows.append(f"{'budget':>6} {'category':<12} " + " ".join(f"{c:>12}" for c in columns))
    for budget in budgets:
        for cat in (0, *CATEGORIES):
            name = "all" if cat == 0 else CATEGORIES[cat]
            n = tally.counted.get(("query-aware", budget, cat), 0)
            values = " ".join(f"{tally.recall(c, budget, cat):>12.3f}" for c in columns)
            rows.append(f"{budget:>6} {name:<12} {values}   ({n} evidence lines)")
        rows.append(f"{tally.questions[budget]} questions")
        rows.append("")
    return "\n".join(rows)


def run(args: argparse.Namespace) -> int:
    data = Path(args.data)
    files = sorted(data.glob("*.json"))[: args.limit or None]
    if not files:
        print(f"no conversations in {data}: pass --data DIR", file=sys.stderr)
        return 2
    budgets = tuple(int(b) for b in args.budgets.split(","))
    tally = Tally()
    cpu: list[float] = []
    began = time.perf_counter()
    for path in files:
        convo = load(path)
        if args.questions:
            convo.questions = convo.questions[: args.questions]
        with tempfile.TemporaryDirectory() as tmp:
            workdir = Path(tmp)
            config = write_config(workdir, not args.no_semantic)
            import_history(config, history_file(convo, workdir))
            queries: list[str | None] = [None, *SMALL_TALK, *dict.fromkeys(q.text for q in convo.questions)]
            if args.cli:
                blocks = {(q, b): block_by_cli(config, q, b) for b in budgets for q in queries}
            else:
                blocks = asyncio.run(blocks_in_process(config, queries, budgets, cpu))
        if args.verbose:
            print(f"{convo.name}:")
        score(convo, blocks, budgets, tally, args.verbose)
        print(f"{convo.name}: query-aware {tally.recall('query-aware', budgets[0]):.3f} so far", file=sys.stderr)
    print(report(tally, budgets, time.perf_counter() - began))
    if cpu:
        cpu.sort()
        p50, mean = cpu[len(cpu) // 2] * 1000, sum(cpu) / len(cpu) * 1000
        print(f"CPU per query-aware build (context's path): p50 {p50:.2f} ms, mean {mean:.2f} ms")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=os.environ.get("LOCOMO_DEV_DIR", str(DEFAULT_DATA)))
    parser.add_argument("--budgets", default=",".join(map(str, DEFAULT_BUDGETS)))
    parser.add_argument("--limit", type=int, default=0, help="the first N conversations only")
    parser.add_argument("--questions", type=int, default=0, help="the first N questions of each only")
    parser.add_argument("--cli", action="store_true", help="build each block in a python -m bot context process")
    parser.add_argument("--no-semantic", action="store_true", help="memory.semantic_search = false")
    parser.add_argument("--verbose", action="store_true", help="the evidence each question missed at 1,500")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
