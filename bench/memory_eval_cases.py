"""Loader for the memory-quality benchmark (``shared/benchmarks/memory-eval``, see its README.md).

Each case is a few past customer-service sessions, a question asked in a later session, and the gold facts the
context built for that question must contain. Gold facts come from two files: the benchmark's own
``gold_facts.json`` (6 cases, ``gold_source="shipped"``) and this folder's ``gold_facts_derived.json`` (the
other 34, ``gold_source="derived"``); a case listed in both takes the shipped facts. One shipped fact
is widened on load, see ``SHIPPED_FACT_FIXES``.

A fact is a string, or a list of acceptable surface forms of one fact; it counts as present when the text
contains it (or any one form) case-insensitively, see ``fact_present``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

try:
    import yaml
except ImportError as exc:  # PyYAML is a test/bench extra, not a runtime dependency of the bot
    raise ImportError("bench.memory_eval_cases needs PyYAML: pip install pyyaml") from exc

ENV_VAR = "MEMORY_EVAL_DIR"
DEFAULT_ROOT = Path(__file__).resolve().parents[2] / "shared" / "benchmarks" / "memory-eval"
DERIVED_GOLD_PATH = Path(__file__).resolve().with_name("gold_facts_derived.json")
SHIPPED_GOLD_NAME = "gold_facts.json"
LAYERS: tuple[Literal["layer1", "layer2"], ...] = ("layer1", "layer2")

Fact = str | list[str]
Layer = Literal["layer1", "layer2"]
GoldSource = Literal["shipped", "derived"]

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Shipped gold facts whose every surface form is absent from the case's own conversation, so no context built
# verbatim from it could ever contain them. layer2_03 names the card "Amex Gold (Card)" while the calls only
# ever say "Gold Card" (and "Amex" elsewhere). The loader adds the form the conversation uses to that any-of
# list; the shipped file is left untouched. Keyed by test_id, then by the shipped forms, to the forms added.
SHIPPED_FACT_FIXES: dict[str, dict[tuple[str, ...], tuple[str, ...]]] = {
    "layer2_03_multiple_credit_cards": {("Amex Gold", "Amex Gold Card"): ("Gold Card",)},
}


@dataclass(frozen=True)
class EvalSession:
    timestamp: datetime
    messages: list[dict[str, str]]


@dataclass(frozen=True)
class EvalCase:
    test_id: str
    layer: Layer
    title: str
    sessions: list[EvalSession]
    user_question: str
    required_facts: list[Fact]
    gold_source: GoldSource

    @property
    def history_text(self) -> str:
        """Every message of every past session, one per line: what a perfect memory could draw on."""
        return "\n".join(m["content"] for s in self.sessions for m in s.messages)


def default_root() -> Path:
    override = os.environ.get(ENV_VAR)
    return Path(override) if override else DEFAULT_ROOT


def where(root: Path | None = None) -> tuple[Path, str]:
    """The folder the cases are read from and what chose it: ``root`` (--cases), $MEMORY_EVAL_DIR, or the
    default ``../shared/benchmarks/memory-eval`` beside the repository."""
    if root is not None:
        return root, "--cases"
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]), f"${ENV_VAR}"
    return DEFAULT_ROOT, "the default beside the repository"


def load_cases(root: Path | None = None) -> list[EvalCase]:
    """All cases under ``root`` (default: ``$MEMORY_EVAL_DIR`` or the shared folder beside the repository).

    Ordered layer1 then layer2, by file name. Raises FileNotFoundError, saying where it looked, when the folder
    is missing, and ValueError when a case is malformed or has no gold facts in either file.
    """
    root, chosen_by = where(root)
    if not root.is_dir():
        raise FileNotFoundError(
            f"memory-eval cases not found at {root} (from {chosen_by}): pass --cases DIR or set {ENV_VAR} to the "
            "folder that holds layer1/, layer2/ and gold_facts.json"
        )
    gold = _read_gold(DERIVED_GOLD_PATH, "derived")
    gold.update(_read_gold(root / SHIPPED_GOLD_NAME, "shipped"))
    cases = []
    for layer in LAYERS:
        for path in sorted((root / layer).glob("*.yaml")):
            cases.append(_parse_case(path, layer, gold))
    return cases


def audit(cases: list[EvalCase]) -> list[str]:
    """Problems with the gold facts of ``cases``: facts no verbatim context could contain (absent from the case's
    histories), and entries of SHIPPED_FACT_FIXES that upstream has fixed (so the fix is no longer needed)."""
    problems = []
    for case in cases:
        text = case.history_text
        for fact in case.required_facts:
            if not fact_present(fact, text):
                problems.append(f"{case.test_id}: gold fact {fact!r} does not occur in its histories")
        for original in SHIPPED_FACT_FIXES.get(case.test_id, {}):
            if case.gold_source == "shipped" and fact_present(list(original), text):
                problems.append(f"{case.test_id}: SHIPPED_FACT_FIXES entry {original!r} is no longer needed")
    return problems


def fact_present(fact: Fact, text: str) -> bool:
    """True when ``text`` contains the fact, or any one of its surface forms, ignoring case."""
    haystack = text.casefold()
    forms = [fact] if isinstance(fact, str) else fact
    return any(form.casefold() in haystack for form in forms)


def _read_gold(path: Path, source: GoldSource) -> dict[str, tuple[list[Fact], GoldSource]]:
    if not path.is_file():
        raise FileNotFoundError(f"gold facts file missing: {path}")
    raw: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    gold = {}
    for test_id, entry in raw.items():
        if test_id.startswith("_"):
            continue
        facts = entry["required_facts"]
        for fact in facts:
            if not (isinstance(fact, str) or (isinstance(fact, list) and all(isinstance(f, str) for f in fact))):
                raise ValueError(f"{path}: {test_id}: a fact must be a string or a list of strings: {fact!r}")
        if source == "shipped":
            facts = _apply_fixes(facts, SHIPPED_FACT_FIXES.get(test_id, {}))
        gold[test_id] = (facts, source)
    return gold


def _apply_fixes(facts: list[Fact], fixes: dict[tuple[str, ...], tuple[str, ...]]) -> list[Fact]:
    fixed: list[Fact] = []
    for fact in facts:
        forms = (fact,) if isinstance(fact, str) else tuple(fact)
        fixed.append([*forms, *fixes[forms]] if forms in fixes else fact)
    return fixed


def _parse_case(path: Path, layer: Layer, gold: dict[str, tuple[list[Fact], GoldSource]]) -> EvalCase:
    data = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)
    test_id = data["test_id"]
    if data.get("category", layer) != layer:
        raise ValueError(f"{path}: category {data['category']!r} does not match its folder {layer!r}")
    if test_id not in gold:
        raise ValueError(f"{path}: no gold facts for {test_id!r} in {SHIPPED_GOLD_NAME} or {DERIVED_GOLD_PATH}")
    facts, source = gold[test_id]
    sessions = [
        EvalSession(
            timestamp=_timestamp(history["timestamp"]),
            messages=[{"role": str(m["role"]), "content": str(m["content"])} for m in history["messages"]],
        )
        for history in data["conversation_histories"]
    ]
    return EvalCase(
        test_id=test_id,
        layer=layer,
        title=data["title"],
        sessions=sessions,
        user_question=data["user_question"],
        required_facts=facts,
        gold_source=source,
    )


def _timestamp(value: str | datetime) -> datetime:
    """YAML gives quoted timestamps as strings and unquoted ones as datetimes."""
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)
