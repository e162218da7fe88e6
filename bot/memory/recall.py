"""What a query-aware memory block adds to ranking: the call-start core it keeps, and each hit's neighbouring lines.

- **The core.** Knowing what was just said must not lose what a call start would have shown: the member's facts
  and most salient lines (names, numbers, dates, decisions) and the latest exchange. A query-aware block first gets
  the call start's own block cut to ``CORE_SHARE`` of the budget (the same builder, the same order: facts first,
  then the latest exchange, then the lines most likely to matter again); the rest of the budget goes to what the
  utterance needs.
- **Neighbours.** A retrieved line is often the question whose answer is the next line, or an answer whose subject
  is in the line before. Each line retrieved for the utterance brings the line before and the line after it in its
  conversation, when they fit. The block shows a conversation's lines in their order and each line once, so a
  neighbour that is a hit of its own, or part of the core, is not repeated.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from bot.store.models import TurnRecord

CORE_SHARE = 0.7
"""The share of a query-aware block's budget kept for the call start's core (measured: bench/memory_quality.py)."""
NEIGHBOURED_HITS = 8
"""The best hits that bring their neighbours: further down, a hit's neighbours would crowd out better hits."""
Position = tuple[str, int]


class Budgeted(Protocol):
    """The block being filled (``bot.memory.block.BudgetedBlock``), as far as the core needs it."""

    budget: int

    def reopen(self) -> None:
        """Forget that the last lines tried did not fit (the budget grew)."""
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
    fill_call_start: Callable[[], Awaitable[None]],
    share: float | None = None,
    *,
    kept: dict[str, object] | None = None,
) -> None:
    """Fill ``block`` (empty) as a call start would, within ``share`` (``CORE_SHARE``) of its budget; then give it
    its whole budget back. With ``kept`` (what is derived from the member's index, which a change replaces), the
    core is filled once per index and budget and restored on later utterances: about 2 ms of CPU each otherwise."""
    share = CORE_SHARE if share is None else share
    if share <= 0:
        return
    key = f"core:{block.budget}:{share}"
    snapshot = kept.get(key) if kept is not None else None
    if isinstance(snapshot, tuple):
        block.restore(snapshot)
        return
    budget = block.budget
    block.budget = int(budget * share)
    try:
        await fill_call_start()
    finally:
        block.budget = budget
        block.reopen()
    if kept is not None:
        kept[key] = block.snapshot()
