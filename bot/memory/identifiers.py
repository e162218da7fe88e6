"""Room for identifiers in a query-aware block: the member's lines that hold a confirmation code, an account number,
an amount with thousands (``bot.store.specifics.holds_identifier``).

A question about the state of things ("what's the status of my wire transfer?", "what services do I have
scheduled?") rarely shares a word with the line that holds the reference number or the account it needs; ranked by
relevance, that line loses to the many lines that do share the question's words, while a call start, which ranks
by specifics alone, keeps it. So a query-aware block first keeps such lines, the most specific first, newer first
among equals, in room made to measure for the member: ``IDENTIFIER_ROOM`` times the share of the member's recent
words said in lines holding an identifier, at most ``IDENTIFIER_ROOM_MAX`` of the budget. A member whose
conversations are about accounts and bookings gets room for them; one who talks about their life gets almost none
(LoCoMo's real conversations: 2 of 2,960 lines hold an identifier, and no room is made).

Measured (bench/memory_quality.py, memory-eval, query-aware against call start): at 1,500 tokens 0.950 -> 0.980
against 0.970 (layer 2 0.900 -> 0.960 against 0.940); at 500 0.633 -> 0.665 against 0.630 (layer 2 still under
call start: 0.470 against 0.503). LoCoMo dev (bench/locomo.py) unchanged. A plateau, not a peak: once the share
gives 0.960 at 1,500, one and a half 0.975, three 0.980; at most 0.3 or all of the budget, 0.975.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bot.memory.block import BudgetedBlock
from bot.memory.tokens import count_tokens
from bot.store.models import TurnRecord
from bot.store.specifics import holds_identifier

IDENTIFIER_ROOM = 2.0
IDENTIFIER_ROOM_MAX = 0.5
_KEPT = "identifier lines"


@dataclass(frozen=True)
class IdentifierLines:
    """The member's recent lines holding an identifier, in the order they are kept, and their share of the words
    (tokens) of all their recent lines."""

    lines: tuple[TurnRecord, ...]
    share: float


def identifier_lines(
    recent: Sequence[TurnRecord], priors: dict[int, float], kept: dict[str, object] | None = None
) -> IdentifierLines:
    """Of ``recent``, the lines holding an identifier, best prior first (``bot.memory.priors``), newer first among
    equals. With ``kept`` (what is derived from the member's index), worked out once per index."""
    found = kept.get(_KEPT) if kept is not None else None
    if isinstance(found, IdentifierLines):
        return found
    held = [turn for turn in recent if holds_identifier(turn.content)]
    total = sum(count_tokens(turn.content) for turn in recent)
    share = sum(count_tokens(turn.content) for turn in held) / total if total else 0.0
    held.sort(key=lambda turn: (priors.get(turn.turn_id, 0.0), turn.spoken_at, turn.seq), reverse=True)
    found = IdentifierLines(tuple(held), share)
    if kept is not None:
        kept[_KEPT] = found
    return found


def keep_identifiers(block: BudgetedBlock, found: IdentifierLines) -> None:
    """Add ``found``'s lines to ``block`` while they fit in their room; then give the block its whole budget back."""
    room = int(block.budget * min(IDENTIFIER_ROOM_MAX, IDENTIFIER_ROOM * found.share))
    if not found.lines or room <= 0:
        return
    with block.capped(block.used + room):
        for turn in found.lines:
            if block.full:
                break
            block.add_turn(turn)
