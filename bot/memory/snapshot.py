"""A window of a call's conversation planned against its stored lines: the pure part of a snapshot merge, which
decides what to write (`bot.memory.service.MemoryService` reads and writes around it), and the window made storable."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bot.memory.merge import Append, MergeResult, count_gaps, merge_snapshot, try_append, utterance
from bot.store.live_plan import LivePlanNeeds
from bot.store.models import NewTurn, Role, TurnRecord, TurnsWrite, TurnUpdate


@dataclass(frozen=True)
class Snapshot:
    """One window of a call's conversation to merge into its stored lines: the pure part of a merge, which
    decides what to write from what is stored (`record_snapshot` reads and writes around it in separate steps,
    `record_live_turn` in one store operation)."""

    window: Sequence[tuple[Role, str]]
    complete: bool
    """The window is the whole conversation so far (shorter than the agent's history, or an import)."""
    capture: int
    final: bool
    at: float
    heard: frozenset[int] = frozenset()
    """Positions in `window` of replies the member cut short (their text is what was spoken)."""
    language: str = "en"
    """The call's language, which its lines keep (``CallRecord.language``)."""

    @property
    def tail(self) -> int:
        """How many of the call's last lines to read first: enough to place a window that continues them."""
        return 2 * len(self.window) + 2

    @property
    def live_tail(self) -> int:
        """How many of the call's last lines a live line's write reads first: enough for `try_append` to place
        the window (an overlap of at most the whole window, and the line before it). Reading `tail` would give
        it the same answer from twice the rows; when the tail is not enough, the plan asks for the whole call."""
        return len(self.window) + 1

    def plan(
        self, stored: list[TurnRecord], whole: bool, anchored: bool
    ) -> tuple[TurnsWrite | None, MergeResult] | None:
        """What to write given the call's last stored lines (every one when ``whole``), and the merge's account;
        None when they are not enough (read every line and plan again)."""
        if anchored or not self.complete:
            appended = try_append(
                [utterance(t) for t in stored], self.window, captured=self.capture, final=self.final, heard=self.heard
            )
            if appended is not None:
                return _appended_write(stored, appended, self.at, anchored, self.language)
        if not whole:
            return None
        result = merge_snapshot(
            [utterance(t) for t in stored],
            self.window,
            captured=self.capture,
            complete=self.complete,
            final=self.final,
            anchored=anchored,
            heard=self.heard,
        )
        old = {t.turn_id: t for t in stored}
        inserts: list[NewTurn] = []
        updates: list[TurnUpdate] = []
        for seq, turn in enumerate(result.turns):
            if turn.turn_id is None:
                new = NewTurn(
                    turn.role,
                    turn.content,
                    self.at,
                    seq,
                    turn.segment,
                    turn.partial,
                    turn.captured,
                    interrupted=turn.interrupted,
                    language=self.language,
                )
                inserts.append(new)
                continue
            was = old[turn.turn_id]
            if (was.seq, was.content, was.segment, was.partial, was.captured, was.interrupted) != (
                seq,
                turn.content,
                turn.segment,
                turn.partial,
                turn.captured,
                turn.interrupted,
            ):
                updates.append(
                    TurnUpdate(
                        turn.turn_id,
                        seq,
                        turn.content,
                        turn.segment,
                        turn.partial,
                        turn.captured,
                        interrupted=turn.interrupted,
                        language=self.language,
                    )
                )
        if inserts or updates or result.anchored != anchored:
            return TurnsWrite(inserts, updates, result.anchored), result
        return None, result

    def live_plan(self, stored: list[TurnRecord], whole: bool, anchored: bool) -> TurnsWrite | LivePlanNeeds | None:
        """`plan` as `ConversationStore.write_live_turn` asks it."""
        planned = self.plan(stored, whole, anchored)
        return LivePlanNeeds.WHOLE_CALL if planned is None else planned[0]


def _appended_write(
    tail: list[TurnRecord], appended: Append, at: float, anchored: bool, language: str
) -> tuple[TurnsWrite | None, MergeResult]:
    """The write of a window that continues the stored tail (`try_append`): its new lines, and the last stored
    line when the window grew it."""
    last = tail[-1]
    updates = []
    if appended.replaced_last is not None:
        r = appended.replaced_last
        updates.append(
            TurnUpdate(
                last.turn_id,
                last.seq,
                r.content,
                r.segment,
                r.partial,
                r.captured,
                interrupted=r.interrupted,
                language=language,
            )
        )
    inserts = [
        NewTurn(
            u.role,
            u.content,
            at,
            last.seq + 1 + i,
            u.segment,
            u.partial,
            u.captured,
            interrupted=u.interrupted,
            language=language,
        )
        for i, u in enumerate(appended.new)
    ]
    grown = appended.replaced_last is not None and appended.replaced_last.content != last.content
    result = MergeResult([], anchored, len(appended.new), int(grown), count_gaps(last.segment + 1, anchored))
    return (TurnsWrite(inserts, updates, anchored) if inserts or updates else None), result


def storable(window: Sequence[tuple[Role, str]]) -> Sequence[tuple[Role, str]]:
    """The lines with any lone surrogate (which JSON can spell, as "\\ud800", but no UTF-8 store can hold)
    replaced, so one odd character can never stop a whole call from being stored."""
    if all(text.isascii() or _utf8(text) for _, text in window):
        return window
    return [(role, text if _utf8(text) else text.encode("utf-8", "replace").decode("utf-8")) for role, text in window]


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
