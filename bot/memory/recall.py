"""What a query-aware memory block adds to ranking: the core it keeps, the words it ranks by, and each hit's
neighbouring lines. Each rule was chosen on real long conversations (bench/locomo.py), not on histories we wrote.

- **The core.** Whatever the utterance, the block keeps the facts the member told it (``keep_core``, within
  ``CORE_SHARE`` of the budget); the rest goes to what the utterance needs, as far as it matches anything: what it
  does not fill is filled as a call start would be. (A fixed 70% share for the call
  start's block cost a third of the evidence on real conversations.)
- **Distinctive words.** A word of the utterance that the member's lines use all the time (their own name, the
  agent's, a pet word) selects nothing: in more than ``COMMON_SHARE`` of their recent lines, it is left out of the
  words and of the meaning searched for (``distinctive``), unless nothing else is left.
- **Dates named.** A question that names a day or a month ("what did I share on October 13, 2023?", "in May
  2023", "last week") is about what was said then: every line said in that period (``named_periods``) scores
  ``PERIOD_WEIGHT`` of the best match more, a line that matches nothing included (``said_in_periods``). On
  LoCoMo's questions that name a date, evidence recall rose from 0.76 to 0.91.
- **Conversations.** A question's evidence is mostly said in one or two calls: the conversation whose best lines
  match well above the others raises its lines, and those around its best hits are read and raised too
  (``conversation_leads``); among fewer than ``CALLS_TO_COMPARE`` conversations, nothing is.
- **Openings.** A conversation's first lines say what it is about: what the member called for, the news they bring.
  On LoCoMo 37% of the evidence is said in the first fifth of its session (7% in the last), and on memory-eval's
  two- and three-call histories 57% of the facts are first said there. A line that matches, said in the first
  ``OPENING_SHARE`` of its conversation, scores up to ``OPENING_WEIGHT`` of the best match more, the most at the
  conversation's first line (``in_openings``).
- **Neighbours.** A retrieved line is often the question whose answer is the next line, or an answer whose subject
  is in the line before. A line's score is raised by ``NEIGHBOUR_WEIGHT`` of its neighbours' (``with_neighbours``),
  and each of the best ``NEIGHBOURED_HITS`` brings the line before and the line after it in its conversation, when
  they fit. The block shows a conversation's lines in their order and each line once, so a neighbour that is a hit
  of its own, or part of the core, is not repeated.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from bot.store.models import TurnRecord
from bot.store.terms import words

CORE_SHARE = 0.5
"""The most of a query-aware block's budget its core (the facts the member told it) may take."""
NEIGHBOURED_HITS = 16
"""The best hits that bring their neighbours: further down, a hit's neighbours would crowd out better hits
(bench/locomo.py: 8 and 32 both found less evidence)."""
NEIGHBOUR_WEIGHT = 0.5
COMMON_SHARE = 0.1
COMMON_MIN_LINES = 40
"""Fewer recent lines than this say nothing about which words are common."""
Position = tuple[str, int]


class Budgeted(Protocol):
    """The block being filled (``bot.memory.block.BudgetedBlock``), as far as the core needs it."""

    budget: int

    def capped(self, used: int) -> AbstractContextManager[None]:
        """Fill within ``used`` tokens in all, then have the whole budget again."""
        ...

    def snapshot(self) -> tuple[Any, ...]: ...

    def restore(self, snapshot: tuple[Any, ...]) -> None: ...


def conversation(turn: TurnRecord) -> str:
    return turn.call_id or turn.chat_id or ""


def neighbour_positions(hits: Sequence[TurnRecord]) -> list[Position]:
    """Where the line before and the line after each of the first ``NEIGHBOURED_HITS`` hits are."""
    return [(conversation(t), t.seq + step) for t in hits[:NEIGHBOURED_HITS] for step in (-1, 1) if t.seq + step >= 0]


def neighbours(
    hits: Sequence[TurnRecord], turns_at: Callable[[list[Position]], list[TurnRecord]]
) -> dict[int, tuple[TurnRecord, ...]]:
    """For each of the first ``NEIGHBOURED_HITS`` hits (by turn id), the lines next to it that exist: the one
    before, then the one after."""
    hits = hits[:NEIGHBOURED_HITS]
    found = {(conversation(t), t.seq): t for t in turns_at(neighbour_positions(hits))}
    around: dict[int, tuple[TurnRecord, ...]] = {}
    for hit in hits:
        near = (found.get((conversation(hit), hit.seq + step)) for step in (-1, 1))
        around[hit.turn_id] = tuple(t for t in near if t is not None)
    return around


async def keep_core(
    block: Budgeted,
    fill: Callable[[], Awaitable[None]],
    share: float | None = None,
    *,
    kept: dict[str, object] | None = None,
) -> None:
    """Fill ``block`` (empty) with ``fill`` within ``share`` (``CORE_SHARE``) of its budget; then give it its whole
    budget back. With ``kept`` (what is derived from the member's index, which a change replaces), the result is
    filled once per index, budget and share (each share is one filler: the told facts at ``CORE_SHARE``, the call
    start's block at 1) and restored on later utterances: about 2 ms of CPU each otherwise."""
    share = CORE_SHARE if share is None else share
    if share <= 0:
        return
    key = f"core:{block.budget}:{share}"
    snapshot = kept.get(key) if kept is not None else None
    if isinstance(snapshot, tuple):
        block.restore(snapshot)
        return
    with block.capped(int(block.budget * share)):
        await fill()
    if kept is not None:
        kept[key] = block.snapshot()


SMALL_TALK_WORDS = frozenset(
    [
        "bye",
        "goodbye",
        "good",
        "morning",
        "afternoon",
        "evening",
        "night",
        "haha",
        "hahaha",
        "lol",
        "cool",
        "nice",
        "great",
        "awesome",
        "fine",
        "wow",
        "welcome",
        "sounds",
    ]
)
"""Words of greetings and acknowledgements: an utterance made only of these (and stop words) asks for nothing in
particular, so it gets what a call start shows."""


def asks_something(terms: str) -> bool:
    """Whether an utterance's content words (``content_query``) name anything beyond small talk."""
    return any(word not in SMALL_TALK_WORDS for word in terms.split())


@functools.lru_cache(maxsize=1 << 16)
def word_set(text: str) -> frozenset[str]:
    """The distinct words of a line (``bot.store.terms.words``)."""
    return frozenset(words(text))


def common_words(recent: Sequence[TurnRecord], kept: dict[str, object] | None = None) -> frozenset[str]:
    """The words found in more than ``COMMON_SHARE`` of the member's ``recent`` lines (none when there are fewer than
    ``COMMON_MIN_LINES``). With ``kept`` (what is derived from the member's index), worked out once per index."""
    found = kept.get("common words") if kept is not None else None
    if isinstance(found, frozenset):
        return found
    counts: Counter[str] = Counter()
    if len(recent) >= COMMON_MIN_LINES:
        for turn in recent:
            counts.update(word_set(turn.content))
    common = frozenset(word for word, n in counts.items() if n > COMMON_SHARE * len(recent))
    if kept is not None:
        kept["common words"] = common
    return common


def distinctive(terms: str, query: str, common: frozenset[str]) -> tuple[str, str]:
    """``terms`` and ``query`` without the member's ``common_words`` (as they are when that would leave no term). On
    LoCoMo's conversations the two speakers' names are in 10-30% of the lines, and a question naming one ranked
    greetings ("Hey Caroline!") above the evidence: by meaning, left out, evidence recall rose from 0.40 to 0.66."""
    wanted = dict.fromkeys(terms.split())
    dropped = sorted(word for word in wanted if word in common)
    kept = [word for word in wanted if word not in common]
    if not dropped or not kept:
        return terms, query
    pattern = re.compile(r"\b(?:" + "|".join(re.escape(word) for word in dropped) + r")(?:'s)?\b", re.IGNORECASE)
    return " ".join(kept), " ".join(pattern.sub(" ", query).split())


def with_neighbours(ranked: Sequence[tuple[TurnRecord, float]]) -> list[tuple[TurnRecord, float]]:
    """The lines of ``ranked``, each scored with ``NEIGHBOUR_WEIGHT`` times the scores of the lines before and
    after it (when they are ranked too), best first."""
    score_at = {(conversation(turn), turn.seq): score for turn, score in ranked}
    rescored = [
        (
            turn,
            score
            + NEIGHBOUR_WEIGHT
            * (
                score_at.get((conversation(turn), turn.seq - 1), 0.0)
                + score_at.get((conversation(turn), turn.seq + 1), 0.0)
            ),
        )
        for turn, score in ranked
    ]
    rescored.sort(key=lambda item: -item[1])
    return rescored


CALL_WEIGHT = 0.2
"""What the lines of the conversation that matches best gain, as a share of the best line's score
(``conversation_leads``)."""
CALL_HITS = 2
CALLS_TO_COMPARE = 5
"""Among fewer conversations with a match, one standing out says little (memory-eval's two or three calls, all about
the same things, each holding a part of the answer: raising one of them lost facts)."""
CALL_WINDOW = 6
"""The lines this close to the best conversation's best hits are read and raised, those that matched nothing too."""


def conversation_leads(ranked: Sequence[tuple[TurnRecord, float]]) -> dict[str, float]:
    """What the lines of each conversation that stands out gain: a conversation's relevance is the sum of its best
    ``CALL_HITS`` scores in ``ranked`` (best first), and its lines gain ``CALL_WEIGHT`` of the best line's score
    times its lead over the mean conversation with a match, as a share of the best conversation's lead. None among
    fewer than ``CALLS_TO_COMPARE`` conversations with a match.

    On LoCoMo a question's evidence is mostly said in one or two calls, and a call where two lines match is more
    likely the one than a call where one line does."""
    best: dict[str, list[float]] = {}
    for turn, score in ranked:
        if score > 0:
            top = best.setdefault(conversation(turn), [])
            if len(top) < CALL_HITS:
                top.append(score)
    if len(best) < CALLS_TO_COMPARE:
        return {}
    totals = {convo: sum(scores) for convo, scores in best.items()}
    usual = sum(totals.values()) / len(totals)
    lead = max(totals.values()) - usual
    if lead <= 0:
        return {}
    scale = CALL_WEIGHT * ranked[0][1] / lead
    return {convo: scale * (total - usual) for convo, total in totals.items() if total > usual}


def standout_positions(ranked: Sequence[tuple[TurnRecord, float]], leads: dict[str, float]) -> list[Position]:
    """Where the lines within ``CALL_WINDOW`` of the leading conversation's best ``CALL_HITS`` hits are."""
    if not leads:
        return []
    convo = max(leads, key=leads.__getitem__)
    hits = [turn.seq for turn, score in ranked if score > 0 and conversation(turn) == convo][:CALL_HITS]
    return sorted({(convo, seq) for hit in hits for seq in range(max(0, hit - CALL_WINDOW), hit + CALL_WINDOW + 1)})


def in_conversations(
    ranked: Sequence[tuple[TurnRecord, float]], leads: dict[str, float], nearby: Sequence[TurnRecord] = ()
) -> list[tuple[TurnRecord, float]]:
    """``ranked`` with each line raised by its conversation's lead (``conversation_leads``), and the ``nearby``
    lines it does not hold (``standout_positions``) scored by their conversation's lead alone; best first."""
    scored = {turn.turn_id: (turn, score + leads.get(conversation(turn), 0.0)) for turn, score in ranked}
    for turn in nearby:
        if turn.turn_id not in scored:
            scored[turn.turn_id] = (turn, leads.get(conversation(turn), 0.0))
    return sorted(scored.values(), key=lambda item: -item[1])


OPENING_WEIGHT = 0.2
"""What the first line of a conversation scores above its relevance, as a share of the best match's; less further
in, nothing past ``OPENING_SHARE`` of the conversation."""
OPENING_SHARE = 0.2


def in_openings(ranked: Sequence[tuple[TurnRecord, float]], lengths: dict[str, int]) -> list[tuple[TurnRecord, float]]:
    """``ranked`` (best first) with each line that matches raised by how early in its conversation it was said: a
    line at position ``seq`` of a conversation of ``lengths[conversation]`` lines gains ``OPENING_WEIGHT`` of the
    best score times ``1 - seq / (OPENING_SHARE * length)`` when that is above zero; best first again. A line of a
    conversation whose length is not known gains nothing."""
    top = max((score for _, score in ranked), default=0.0)
    if top <= 0:
        return list(ranked)

    def early(turn: TurnRecord) -> float:
        length = lengths.get(conversation(turn), 0)
        return max(0.0, 1 - turn.seq / (OPENING_SHARE * length)) if length else 0.0

    raised = [(turn, score + OPENING_WEIGHT * top * early(turn) if score > 0 else score) for turn, score in ranked]
    raised.sort(key=lambda item: -item[1])
    return raised


PERIOD_WEIGHT = 0.5
"""What a line said in a period the utterance names scores above its relevance, as a share of the best match's."""


def said_in_periods(
    ranked: list[tuple[TurnRecord, float]], periods: Sequence[tuple[float, float]], said: Sequence[TurnRecord]
) -> list[tuple[TurnRecord, float]]:
    """``ranked`` (best first) with every line said within ``periods`` ([start, end) timestamps) scored
    ``PERIOD_WEIGHT`` of the best match more, and the lines ``said`` then (``MemorySource.said_in``) that matched
    nothing included, best first again."""
    if not periods:
        return ranked
    bonus = PERIOD_WEIGHT * (max((score for _, score in ranked), default=0.0) or 1.0)

    def said_then(turn: TurnRecord) -> bool:
        return any(start <= turn.spoken_at < end for start, end in periods)

    scored = {turn.turn_id: (turn, score + bonus if said_then(turn) else score) for turn, score in ranked}
    for turn in said:
        if turn.turn_id not in scored and said_then(turn):
            scored[turn.turn_id] = (turn, bonus)
    return sorted(scored.values(), key=lambda item: -item[1])


STRONG_SHARE = 0.5
"""A line whose relevance is at least this share of the best line's has earned its room outright."""


def earned(
    ranked: list[tuple[TurnRecord, float]],
) -> tuple[list[tuple[TurnRecord, float]], list[tuple[TurnRecord, float]]]:
    """``ranked`` (best first) split into the lines that earned their room (relevance at least ``STRONG_SHARE`` of
    the best's), which go in first by relevance, and the rest, which compete with what a call start would show
    (``bot.memory.priors.by_score``)."""
    top = ranked[0][1] if ranked else 0.0
    if top <= 0:
        return [], ranked
    at = next((i for i, (_, score) in enumerate(ranked) if score < STRONG_SHARE * top), len(ranked))
    return ranked[:at], ranked[at:]
