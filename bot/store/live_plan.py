"""A live line written in one store operation: the plan that travels to the database and back.

Live recall stores each line of a running call the moment the bot's LLM route sees it, on the voice turn's path
(``MemoryService.record_live_turn``). Rather than reading the call's last lines, merging the agent's window into
them and writing the result in three round trips, the memory service hands the store a *plan*
(``LivePlan``: its merge, a pure function) and the store runs it inside the write's own transaction, between
reading the lines and writing them (``ConversationStore.write_live_turn``): on SQLite under the store's write lock
(``bot.store.sqlite.trips.write_live_turn``), on PostgreSQL holding the call's row
(``bot.store.postgres.conversations``). The encrypting layer hands the plan on wrapped (``layered``): the lines it
is given opened, the write it returns sealed, wherever it runs. Nothing else writes the call meanwhile, so no
version check and no retry.

Kept because it pays: the plain version (the service reads the key and the tail, merges, and writes with the
versioned ``apply_call_turns``: three round trips) cost 18% and 30% more of the bot's CPU per proxied turn in two
runs of ``bench/live_recall.py --members 20 --levels 20`` side by side with this one (16.46 against 13.96 ms, 18.31
against 14.04 ms; SQLite, the plan then run in one trip to the database thread), above the 10% a speed mechanism
must save to stay.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from bot.store.models import TurnRecord, TurnsWrite


class LivePlanNeeds(Enum):
    WHOLE_CALL = "whole call"
    """The tail was not enough to place the line: plan again with every line of the call."""


LivePlan = Callable[[list[TurnRecord], bool, bool], TurnsWrite | LivePlanNeeds | None]
"""``plan(stored, whole, anchored)``: what to write, given the end of the call's stored lines (oldest first;
``whole`` when they are all of them) and whether its history is anchored; None when there is nothing to write.
Pure and quick: it runs inside the write's transaction, which holds the call meanwhile."""


class LiveWrite(Enum):
    """What became of one live line (``ConversationStore.write_live_turn``)."""

    WRITTEN = "written"
    UNCHANGED = "unchanged"
    """Nothing new to write (a checkpoint had it already); its key is remembered."""
    SEEN = "seen"
    """Its key was stored before: a retried request."""
    REFUSED = "refused"
    """The memory fence refused it (forgotten or paused since, or the call is gone or private)."""


def layered(
    plan: LivePlan, read: Callable[[TurnRecord], TurnRecord], write: Callable[[TurnsWrite], TurnsWrite]
) -> LivePlan:
    """``plan`` as a layer in front of the store hands it on: it sees each stored line as ``read`` gives it, and
    what it writes goes through ``write``."""

    def planned(stored: list[TurnRecord], whole: bool, anchored: bool) -> TurnsWrite | LivePlanNeeds | None:
        result = plan([read(turn) for turn in stored], whole, anchored)
        return write(result) if isinstance(result, TurnsWrite) else result

    return planned
