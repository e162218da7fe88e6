"""What forgetting one fact takes with it: the lines it was drawn from and the summaries that repeat it.

A fact is learned from the member's own words, and the next call's context quotes recent lines and summaries as
well as facts. Forgetting only the fact would leave "my cat is called Pixel" in the lines and "talked about
their cat Pixel" in a summary, so the agent would still know. A line or summary *repeats* a fact when it names
what the fact names (a capitalised name or a number in the fact, e.g. "Pixel", "2019"), or, for a fact without
one, when it contains most of the fact's content words.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from bot.store.models import Conversation, FactRecord
from bot.store.terms import STOP_WORDS

_WORD = re.compile(r"[\w'’-]+")
_EXTRA_STOPWORDS = frozenset({"called", "named", "likes", "loves", "since", "user", "member", "their", "his", "her"})
MIN_STEM = 4
WORD_SHARE = 0.6


@dataclass(frozen=True)
class FactTerms:
    names: frozenset[str]
    """Lower-cased capitalised words (not the first word) and numbers of the fact: what it is about."""
    words: frozenset[str]
    """Its other content words."""


def fact_terms(text: str) -> FactTerms:
    tokens = _WORD.findall(text)
    names = {
        t.lower().strip("'’-")
        for n, t in enumerate(tokens)
        if (n > 0 and t[:1].isupper() and t.lower() not in STOP_WORDS) or any(c.isdigit() for c in t)
    }
    words = {
        t.lower() for t in tokens if len(t) > 2 and t.lower() not in STOP_WORDS and t.lower() not in _EXTRA_STOPWORDS
    } - names
    return FactTerms(frozenset(n for n in names if n), frozenset(words))


def _same_word(a: str, b: str) -> bool:
    if a == b:
        return True
    stem = min(len(a), len(b))
    return stem >= MIN_STEM and a[:stem] == b[:stem]


def repeats(terms: FactTerms, text: str) -> bool:
    """Whether ``text`` (a line or a summary) repeats the fact with these terms."""
    tokens = {t.lower().strip("'’-") for t in _WORD.findall(text)}
    if terms.names:
        return any(name in tokens for name in terms.names)
    if not terms.words:
        return False
    present = sum(1 for word in terms.words if any(_same_word(word, token) for token in tokens))
    return present >= max(1, math.ceil(WORD_SHARE * len(terms.words)))


def search_text(terms: FactTerms) -> str:
    """Words for a full-text search that finds every candidate line (filtered by :func:`repeats` afterwards)."""
    return " ".join(sorted(terms.names | terms.words))


@dataclass(frozen=True)
class FactTraces:
    """A fact and what forgetting it also removes."""

    fact: FactRecord
    turn_ids: tuple[int, ...]
    summaries: tuple[Conversation, ...]
    """The calls and chats whose summaries repeat it."""

    @property
    def removes_more(self) -> bool:
        return bool(self.turn_ids or self.summaries)


def traces_of(
    fact: FactRecord, lines: Iterable[tuple[int, str]], summaries: Iterable[tuple[str, str, str]]
) -> FactTraces:
    """The lines ((turn_id, content)) and summaries ((kind, ref_id, text)) that repeat ``fact``."""
    terms = fact_terms(fact.text)
    return FactTraces(
        fact=fact,
        turn_ids=tuple(turn_id for turn_id, content in lines if repeats(terms, content)),
        summaries=tuple(Conversation.named(kind, ref) for kind, ref, text in summaries if repeats(terms, text)),
    )
