"""The order a block takes lines in: by prior (what a line carries, weighted by recency) and, for a query, by
relevance plus prior.

A line's prior is its specifics (``bot.store.specifics``: names, numbers, dates, decisions), an assistant's line
weighing less, decayed with age; a call start takes the latest exchange first (``opening_of``), then lines by prior
(``by_informativeness``, or ``RankedLines`` straight from the store's rows); a query's candidates are ranked by BM25
relevance plus ``QUERY_PRIOR_WEIGHT`` times the prior (``by_score``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from bot.store.models import RecentLines, TurnRecord
from bot.store.specifics import specifics

LATEST_EXCHANGE = 4
ASSISTANT_WEIGHT = 0.5
HALF_LIFE_DAYS = 30.0
RECENCY_FLOOR = 0.5
QUERY_PRIOR_WEIGHT = 0.2
"""Weight of the specifics prior next to BM25 relevance (scaled so the best match scores 1) for a query."""


_Item = TypeVar("_Item")


def opening_of(lines: Sequence[_Item], conversation: Callable[[_Item], str | None]) -> list[_Item]:
    """Of ``lines`` (oldest first), the last LATEST_EXCHANGE in the newest line's conversation (all of them when it
    has fewer), oldest first. Found from the newest line back."""
    if not lines or not LATEST_EXCHANGE:
        return []
    latest = conversation(lines[-1])
    found: list[_Item] = []
    for line in reversed(lines):
        if conversation(line) == latest:
            found.append(line)
            if len(found) == LATEST_EXCHANGE:
                break
    found.reverse()
    return found


class RankedLines:
    """The lines of ``recent`` that carry something, best prior first, newer first among equals: the order
    ``by_informativeness`` gives their records (the same priors, ``_prior_weight``), computed from the rows'
    columns; records are made as the caller goes on."""

    def __init__(self, recent: RecentLines):
        self.recent = recent

    def __iter__(self) -> Iterator[TurnRecord]:
        recent = self.recent
        rows = recent.rows
        if not rows:
            return
        spoken, seq, role, count = RecentLines.SPOKEN_AT, RecentLines.SEQ, RecentLines.ROLE, RecentLines.SPECIFICS
        newest = max(row[spoken] for row in rows)
        weights = [
            _prior_weight(
                specifics(recent.line(at).content) if row[count] is None else row[count], row[role], row[spoken], newest
            )
            for at, row in enumerate(rows)
        ]
        top = max(weights) or 1.0
        priors = [weight / top for weight in weights]
        kept = [at for at, prior in enumerate(priors) if prior > 0]
        kept.sort(key=lambda at: (priors[at], rows[at][spoken], rows[at][seq]), reverse=True)
        for at in kept:
            yield recent.line(at)


def by_score(
    ranked: list[tuple[TurnRecord, float]], priors: dict[int, float], base: QueryBase, recent: Sequence[TurnRecord]
) -> Iterator[tuple[TurnRecord, bool]]:
    """Candidate lines for a query, best first, each with whether it matched: relevance (BM25 scaled so the best
    match scores 1) plus QUERY_PRIOR_WEIGHT times the prior; newer first among equals, then the recent lines in
    order, then the other matches in rank order. ``base`` holds the recent lines (``recent``) with a prior in that order
    already, so only the matches need sorting: the two orders are merged."""
    top = max((score for _, score in ranked), default=0.0) or 1.0
    lines = len(base.positions)
    hits = sorted(
        (
            (
                -(score / top + QUERY_PRIOR_WEIGHT * priors.get(turn.turn_id, 0.0)),
                -turn.spoken_at,
                base.positions.get(turn.turn_id, lines + rank),
            ),
            turn,
        )
        for rank, (turn, score) in enumerate(ranked)
    )
    matched = {position for turn, _ in ranked if (position := base.positions.get(turn.turn_id)) is not None}
    at = 0
    for key in base.order:
        if key[2] in matched:
            continue
        while at < len(hits) and hits[at][0] < key:
            yield hits[at][1], True
            at += 1
        yield recent[key[2]], False
    for _, turn in hits[at:]:
        yield turn, True


@dataclass(frozen=True)
class QueryBase:
    """The recent lines that carry something, in the order a query ranks them before relevance is added, with
    their sort keys; and every recent line's position."""

    order: tuple[tuple[float, float, int], ...]
    """Sort keys, the line's position in the recent lines last."""
    positions: dict[int, int]
    """Position by turn id."""

    @classmethod
    def of(cls, lines: Sequence[TurnRecord], priors: dict[int, float]) -> QueryBase:
        keys = sorted(
            (-QUERY_PRIOR_WEIGHT * priors[t.turn_id], -t.spoken_at, position)
            for position, t in enumerate(lines)
            if priors[t.turn_id] > 0
        )
        return cls(tuple(keys), {t.turn_id: position for position, t in enumerate(lines)})


def _prior_weight(count: int, role: str, spoken_at: float, newest: float) -> float:
    """A line's informativeness (its specifics, ``bot.store.specifics``; an assistant's line weighing less) weighted
    by recency (half-life in days, counted from ``newest``, the newest line's time)."""
    age_days = (newest - spoken_at) / 86400
    decay: float = RECENCY_FLOOR + (1 - RECENCY_FLOOR) * 0.5 ** (age_days / HALF_LIFE_DAYS)
    return count * (1.0 if role == "user" else ASSISTANT_WEIGHT) * decay


def line_priors(lines: Sequence[TurnRecord]) -> dict[int, float]:
    """Each line's ``_prior_weight`` (its specifics as stored, or counted here for a line written before they
    were), scaled so the best line scores 1; by turn id."""
    if not lines:
        return {}
    newest = max(t.spoken_at for t in lines)
    weights = {
        t.turn_id: _prior_weight(
            specifics(t.content) if t.specifics is None else t.specifics, t.role, t.spoken_at, newest
        )
        for t in lines
    }
    top = max(weights.values()) or 1.0
    return {turn_id: weight / top for turn_id, weight in weights.items()}


def by_informativeness(lines: Sequence[TurnRecord], priors: dict[int, float]) -> list[TurnRecord]:
    """Lines that carry something, best prior first, newer first among equals."""
    return [lines[at] for at in informative_order(lines, priors)]


def informative_order(lines: Sequence[TurnRecord], priors: dict[int, float]) -> tuple[int, ...]:
    """The positions of ``by_informativeness``'s lines in ``lines``, in its order."""
    kept = [at for at, t in enumerate(lines) if priors[t.turn_id] > 0]
    kept.sort(key=lambda at: (priors[lines[at].turn_id], lines[at].spoken_at, lines[at].seq), reverse=True)
    return tuple(kept)
