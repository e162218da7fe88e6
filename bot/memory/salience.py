"""How much each word says among a member's lines: the weights of the embedded model's pooling.

A static model's text vector is the mean of its tokens' vectors, every word counting the same. In one member's
history some words are everywhere (what they talk about in every call: their job, their children, "mental health"),
and in a plain mean those words pull every line toward the same point, so the lines that share the question's
rarer words do not stand out. ``Salience`` weighs each word by its inverse document frequency among the member's
latest ``SALIENCE_LINES`` lines (IDF pooling, the weighting BM25 gives the same words). Lines are weighed when they
are embedded, with the member's lines as they were then, and the utterance with their lines as they are: idf moves
slowly as a history grows (on LoCoMo, weighing each call's lines with only the calls before it kept 0.007 of the
0.011 the weighting adds at 1,500 tokens).

Only the embedded model is weighed: a server's model reads each text in context and weighs its words itself.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from bot.memory.recall import word_set
from bot.memory.sources import CALL_START_LINES
from bot.store.models import TurnRecord
from bot.store.terms import words

SALIENCE_LINES = CALL_START_LINES
"""The member's latest lines the weights are counted over: the lines a build has already read for a call start,
so the utterance and the lines the post-call job embeds are weighed over the same number of lines."""


@dataclass(frozen=True)
class Salience:
    """Each word's weight among ``lines`` lines, of which ``counts[word]`` hold the word."""

    lines: int
    counts: dict[str, int]

    @classmethod
    def of(cls, texts: Iterable[str]) -> Salience:
        counts: Counter[str] = Counter()
        lines = 0
        for text in texts:
            counts.update(word_set(text))
            lines += 1
        return cls(lines, dict(counts))

    def weight(self, word: str) -> float:
        """``log(1 + lines / (1 + lines holding it))`` for the word's first part ("Caroline's": "caroline"). A
        number weighs as a word in every line: its tokens' vectors say little of what a line is about, and as the
        rarest words of a line (an account number) they would pull its vector away from what it is about."""
        part = next((part for part in words(word) if not part.isdigit()), None)
        held = self.lines if part is None else self.counts.get(part, 0)
        return math.log1p(max(self.lines, 1) / (1 + held))


def member_salience(recent: Sequence[TurnRecord], kept: dict[str, object] | None = None) -> Salience:
    """The weights among the member's ``recent`` lines (the latest ``SALIENCE_LINES``). With ``kept`` (what is
    derived from the member's index), counted once per index."""
    found = kept.get("salience") if kept is not None else None
    if isinstance(found, Salience):
        return found
    salience = Salience.of(turn.content for turn in recent[-SALIENCE_LINES:])
    if kept is not None:
        kept["salience"] = salience
    return salience
