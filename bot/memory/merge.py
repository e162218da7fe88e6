"""Merge overlapping history snapshots of one call into one ordered list of utterances.

Agora returns a call's history as the latest `max_history` messages (role and content only). Successive
snapshots overlap, old messages fall off the front, the last assistant message may still be growing, and short
messages ("yes", "okay") repeat. A snapshot shorter than `max_history` is the whole conversation so far, so it
is anchored at the start.

Stored turns form *segments*: runs known to be contiguous. Between two segments lies a gap of unknown size
(no snapshot covered it). A new snapshot is placed where it overlaps stored turns the most; it extends a
segment, fills a gap (joining two segments), or, overlapping nothing, becomes a segment of its own placed by
capture order (snapshots are tail windows, so a later capture never ends earlier).

Limit, inherent to content-only history: when a snapshot begins or ends on a message whose text also occurs
elsewhere ("yes"), a placement that matches the other occurrence can look as good as the true one, and the
larger overlap is chosen. Checkpoints are frequent, so true overlaps are long (most of `max_history`) and a
false one needs a whole run of repeated messages that long.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from bot.store.models import Role, TurnRecord


@dataclass(frozen=True)
class Utterance:
    """A stored or incoming message. `turn_id` is None for messages not stored yet."""

    role: Role
    content: str
    turn_id: int | None = None
    segment: int = 0
    partial: bool = False
    captured: int = 0
    interrupted: bool = False
    """A reply the member spoke over: `content` is what they heard of it."""


def utterance(t: TurnRecord) -> Utterance:
    """A stored line as the merge reads it."""
    return Utterance(t.role, t.content, t.turn_id, t.segment, t.partial, t.captured, t.interrupted)


@dataclass(frozen=True)
class MergeResult:
    turns: list[Utterance]
    anchored: bool
    added: int
    grown: int
    gaps: int
    """Unclosed gaps: between segments, plus one before the first segment if the start was never seen."""


def count_gaps(segments: int, anchored: bool) -> int:
    if segments == 0:
        return 0
    return segments - 1 + (0 if anchored else 1)


def _compatible(stored: Utterance, role: Role, content: str, incoming_is_last: bool, heard: bool = False) -> str | None:
    """'eq', 'grow' (one is a prefix of the other: a reply captured mid-sentence, or one the member cut short
    when ``heard``), or None."""
    if stored.role != role:
        return None
    if stored.content == content or not stored.content:  # a stored line with no text was forgotten: its place
        return "eq"
    if role == "assistant" and (stored.partial or incoming_is_last or heard):
        if content.startswith(stored.content) or stored.content.startswith(content):
            return "grow"
    return None


def _kept(content: str, before: str, authoritative: bool) -> str:
    """The text a merge keeps for a line both hold: the incoming one when it is ``authoritative`` (what the member
    heard of an interrupted reply, or the agent's final history), else the longer (a reply still growing)."""
    if authoritative:
        return content
    return content if len(content) > len(before) else before


def _merged(before: Utterance, content: str, authoritative: bool, heard: bool) -> Utterance:
    """``before`` as a merge keeps it given the incoming ``content`` of the same line (see `_kept`): marked
    interrupted when the member is known to have cut it short, or the authoritative text is shorter than stored."""
    if not before.content:
        return replace(before, partial=False)  # forgotten: the agent's history never brings its text back
    kept = _kept(content, before.content, authoritative)
    interrupted = before.interrupted or heard or len(kept) < len(before.content)
    return replace(before, content=kept, partial=False, interrupted=interrupted)


def _spoken(window: Sequence[tuple[Role, str]], heard: frozenset[int]) -> tuple[list[tuple[Role, str]], frozenset[int]]:
    """The window's non-empty user and assistant lines, and ``heard`` renumbered to match them."""
    kept: list[tuple[Role, str]] = []
    renumbered: set[int] = set()
    for i, (r, c) in enumerate(window):
        if c and c.strip() and r in ("user", "assistant"):
            if i in heard:
                renumbered.add(len(kept))
            kept.append((r, c))
    return kept, frozenset(renumbered)


def _best_offset(
    segment: Sequence[Utterance], window: Sequence[tuple[Role, str]], heard: frozenset[int] = frozenset()
) -> tuple[int, int] | None:
    """The offset of window[0] in `segment` with the largest all-matching overlap (rightmost on ties)."""
    n, m = len(segment), len(window)
    best: tuple[int, int] | None = None
    for offset in range(n - 1, -m, -1):
        lo, hi = max(0, offset), min(n, offset + m)
        overlap = hi - lo
        if overlap <= 0 or (best is not None and overlap <= best[1]):
            continue
        for pos in range(lo, hi):
            role, content = window[pos - offset]
            if _compatible(segment[pos], role, content, pos - offset == m - 1, pos - offset in heard) is None:
                break
        else:
            best = (offset, overlap)
            if overlap == m:
                break
    return best


def merge_snapshot(
    stored: Sequence[Utterance],
    window: Sequence[tuple[Role, str]],
    *,
    captured: int,
    complete: bool,
    final: bool = False,
    anchored: bool = False,
    heard: frozenset[int] = frozenset(),
) -> MergeResult:
    """Merge one snapshot into the stored turns of a call.

    `captured` orders snapshots in time; `complete` says the window starts at the conversation's start;
    `final` says nothing will follow (the history delivered after the agent stopped), so the last
    message is not still growing and each line's text is the one the agent kept. `heard`: positions in
    `window` of replies the member cut short, whose text is what was spoken. Empty messages are ignored.
    """
    window, heard = _spoken(window, heard)
    segments: list[list[Utterance]] = []
    for turn in stored:
        if not segments or turn.segment != segments[-1][0].segment:
            segments.append([])
        segments[-1].append(turn)
    if not window:
        anchored_now = anchored or (complete and not stored)
        return MergeResult(list(stored), anchored_now, 0, 0, count_gaps(len(segments), anchored_now))

    placements = {i: p for i, seg in enumerate(segments) if (p := _best_offset(seg, window, heard)) is not None}
    chosen = _contiguous_run(placements, segments, len(window))

    added = grown = 0
    merged: list[Utterance] = []
    m = len(window)
    if chosen:
        first, last = chosen[0], chosen[-1]
        first_offset = placements[first][0]
        merged.extend(segments[first][: max(first_offset, 0)])
        covered: dict[int, Utterance] = {}
        for i in chosen:
            offset = placements[i][0]
            for pos, turn in enumerate(segments[i]):
                if 0 <= pos - offset < m:
                    covered[pos - offset] = turn
        for j, (role, content) in enumerate(window):
            if j in covered:
                before = covered[j]
                after = _merged(before, content, final or j in heard, j in heard)
                grown += after.content != before.content
                merged.append(after)
            else:
                added += 1
                merged.append(Utterance(role, content, interrupted=j in heard))
        last_offset = placements[last][0]
        tail = segments[last][last_offset + m :]
        if not tail:
            end = merged[-1]
            merged[-1] = replace(
                end,
                partial=end.role == "assistant" and not final,
                captured=max(end.captured, captured),
            )
        merged.extend(tail)
        new_segments = segments[:first] + [merged] + segments[last + 1 :]
        anchored_now = anchored or (complete and first == 0 and first_offset <= 0)
    else:
        fresh = [
            Utterance(
                r, c, partial=(j == m - 1 and r == "assistant" and not final), captured=captured, interrupted=j in heard
            )
            for j, (r, c) in enumerate(window)
        ]
        added = m
        if complete:
            position = 0
        else:
            position = len(segments)
            while position > 0 and segments[position - 1][-1].captured > captured:
                position -= 1
            if position == 0 and anchored and segments:
                position = 1
        new_segments = segments[:position] + [fresh] + segments[position:]
        anchored_now = anchored or complete

    turns = [replace(t, segment=s) for s, seg in enumerate(new_segments) for t in seg]
    return MergeResult(turns, anchored_now, added, grown, count_gaps(len(new_segments), anchored_now))


def _contiguous_run(placements: dict[int, tuple[int, int]], segments: list[list[Utterance]], m: int) -> list[int]:
    """The segments the window overlaps, if they form one consistent run; otherwise the single best one."""
    if not placements:
        return []
    indices = sorted(placements)
    consistent = indices == list(range(indices[0], indices[-1] + 1))
    if consistent and len(indices) > 1:
        offsets = [placements[i][0] for i in indices]
        for k, i in enumerate(indices):
            offset, n = offsets[k], len(segments[i])
            if k > 0 and offset > 0:
                consistent = False
            if k < len(indices) - 1 and offset + m < n:
                consistent = False
        for k in range(1, len(indices)):
            # In window coordinates segment k must start after segment k-1 ends.
            prev_end = -offsets[k - 1] + len(segments[indices[k - 1]])
            if -offsets[k] < prev_end:
                consistent = False
    if consistent:
        return indices
    return [max(indices, key=lambda i: (placements[i][1], i))]


@dataclass(frozen=True)
class Append:
    """The common case of a live call: the snapshot continues the stored tail. Only the tail is touched."""

    new: list[Utterance]
    replaced_last: Utterance | None


def try_append(
    tail: Sequence[Utterance],
    window: Sequence[tuple[Role, str]],
    *,
    captured: int,
    final: bool = False,
    heard: frozenset[int] = frozenset(),
) -> Append | None:
    """Cheap path for a snapshot whose start overlaps the end of the stored call.

    `tail` is the end of the stored call (a few times the window length). Returns None when the snapshot does
    not simply continue the last segment (out of order, a gap, a bridge), or would change a stored line other
    than the last (a reply cut short earlier): the caller then merges in full.
    """
    window, heard = _spoken(window, heard)
    if not tail or not window:
        return None
    last_segment = tail[-1].segment
    start = len(tail)
    while start > 0 and tail[start - 1].segment == last_segment:
        start -= 1
    segment = tail[start:]
    m = len(window)
    # The overlap must leave at least one loaded turn before it, so no longer placement can hide in turns
    # that were not loaded.
    for k in range(min(len(segment) - 1, m), 0, -1):
        matched = True
        for j in range(k):
            stored = segment[len(segment) - k + j]
            if _compatible(stored, window[j][0], window[j][1], j == m - 1, j in heard) is None:
                matched = False
                break
            if j < k - 1 and (final or j in heard) and _merged(stored, window[j][1], True, j in heard) != stored:
                return None  # an earlier line is cut to what was heard: only a full merge rewrites it
        if not matched:
            continue
        last = segment[-1]
        kept = _merged(last, window[k - 1][1], final or k - 1 in heard, k - 1 in heard)
        new = [Utterance(r, c, segment=last_segment, interrupted=k + i in heard) for i, (r, c) in enumerate(window[k:])]
        if new:
            end = new[-1]
            new[-1] = replace(end, partial=end.role == "assistant" and not final, captured=captured)
            replaced = kept
        else:
            replaced = replace(
                kept, partial=last.role == "assistant" and not final, captured=max(last.captured, captured)
            )
        return Append(new, None if replaced == last else replaced)
    return None


def forgotten_positions(stored: Sequence[Utterance], window: Sequence[tuple[Role, str]]) -> frozenset[int]:
    """The positions in ``window`` (the agent's lines, oldest first) of lines the call holds with no text: lines
    forgotten while the call ran. The window is placed where it overlaps the stored lines most, as a merge places
    it; a window that overlaps no segment whole holds none that can be told apart."""
    if all(u.content for u in stored):
        return frozenset()
    at = [i for i, (role, text) in enumerate(window) if text and text.strip() and role in ("user", "assistant")]
    spoken = [window[i] for i in at]
    segments: dict[int, list[Utterance]] = {}
    for utterance in stored:
        segments.setdefault(utterance.segment, []).append(utterance)
    best: tuple[list[Utterance], int, int] | None = None
    for segment in segments.values():
        found = _best_offset(segment, spoken)
        if found is not None and (best is None or found[1] > best[2]):
            best = (segment, *found)
    if best is None:
        return frozenset()
    segment, offset, _ = best
    placed = range(max(0, offset), min(len(segment), offset + len(spoken)))
    return frozenset(at[pos - offset] for pos in placed if not segment[pos].content)
