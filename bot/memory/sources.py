"""Where a memory block's material comes from: the store, read for one build, or the member's index in memory.

A build asks the same questions of either (``MemorySource``): the facts and lines that match an utterance, the
latest lines with their priors, the lines next to a hit, a call start's facts and lines, the other facts, the
latest summaries. ``StoredMemory`` answers from the store (a call start, a text chat); ``IndexedMemory`` from the
member's index while they are in a call (``bot.memory.index``), where every utterance builds a block: the index
holds each line rendered and counted, its lines ranked by prior, and the call start's core
(``bot.memory.recall.keep_core``), each worked out once per index instead of on every utterance.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import NamedTuple, Protocol, cast

from bot.memory.index import SUMMARIES, IndexStore, MemberIndex, Rendered
from bot.memory.priors import QueryBase, RankedLines, informative_order, line_priors, opening_of
from bot.memory.recall import Position, neighbour_positions, neighbours
from bot.store.models import ConversationSummary, FactRecord, RecentLines, TurnRecord

CALL_START_LINES = 400
PERIOD_LINES = 100
"""The latest lines of a period an utterance names that are read for it: a day's calls, most often."""
FACT_PAGE = 64
"""Facts read at a time at a call start: about 40 fill the facts' share of a 1,500-token block."""


class ContextStore(IndexStore, Protocol):
    """What building a memory block reads (and what the member indexes it builds read)."""

    async def call_start_memory(
        self, user_id: int, *, facts: int, lines: int
    ) -> tuple[list[FactRecord], RecentLines]: ...
    async def rank_facts(self, user_id: int, query: str, limit: int) -> list[tuple[FactRecord, float]]: ...
    async def rank_turns(
        self, user_id: int, query: str, limit: int, *, exclude_call_id: str | None = None
    ) -> list[tuple[TurnRecord, float]]: ...
    async def turns_at(self, positions: Sequence[tuple[str, int]]) -> list[TurnRecord]: ...
    async def conversation_lengths(self, refs: Sequence[str]) -> dict[str, int]: ...


class FactPages:
    """The member's current facts in the store's ``list_facts`` order (see ``current_facts``), read a page at a
    time up to ``limit`` as they are consumed, from ``first`` (the first page, read with the lines): a call start
    reads (and, encrypted, opens) only about the facts that fit, not all ``limit`` of them. Pages read are kept,
    so a second pass reads nothing again."""

    def __init__(self, store: ContextStore, user_id: int, limit: int, first: list[FactRecord] | None = None):
        self.store = store
        self.user_id = user_id
        self.limit = limit
        self.read: list[FactRecord] = []
        self._exhausted = False
        if first is not None:
            self.read = first[:limit]
            self._exhausted = len(first) < min(FACT_PAGE, limit)

    async def __aiter__(self) -> AsyncIterator[FactRecord]:
        at = 0
        while True:
            if at == len(self.read):
                if self._exhausted or at >= self.limit:
                    return
                size = min(FACT_PAGE, self.limit - at)
                page = await self.store.list_facts(self.user_id, offset=at, limit=size)
                self.read.extend(page)
                self._exhausted = len(page) < size
                continue
            yield self.read[at]
            at += 1


Facts = Sequence[FactRecord] | FactPages


async def current_facts(facts: Facts) -> AsyncIterator[FactRecord]:
    """Current facts, most recently confirmed and most often mentioned first: the order the store lists them in
    (``list_facts``), which ``FactPages`` reads and the member's index keeps."""
    if isinstance(facts, FactPages):
        async for fact in facts:
            if fact.current:
                yield fact
    else:
        for fact in facts:
            if fact.current:
                yield fact


class Ranked(NamedTuple):
    """The facts and the lines matching a query, each best first with its score."""

    facts: list[tuple[FactRecord, float]]
    lines: list[tuple[TurnRecord, float]]


class Recent(NamedTuple):
    """The latest ``CALL_START_LINES`` lines (oldest first), their priors by turn id, and the order a query ranks
    them in before relevance is added."""

    lines: Sequence[TurnRecord]
    priors: dict[int, float]
    base: QueryBase


class CallStart(NamedTuple):
    """What a call start's block is filled from, in that order: facts, the latest exchange, the lines most likely
    to matter again, then the newest lines."""

    facts: Facts
    opening: list[TurnRecord]
    informative: Iterable[TurnRecord]
    newest_first: Iterable[TurnRecord]


class MemorySource(Protocol):
    """One member's memory as a build reads it (outside the call in progress, if any)."""

    rendered_lines: Rendered | None
    """Lines as rendered, with their token counts, by turn id, when worked out ahead (else rendered by the block)."""
    rendered_facts: Rendered | None
    kept: dict[str, object] | None
    """Where the call start's core is kept between builds (``keep_core``), when it stays the same."""
    lines_by_id: Callable[[Sequence[int]], list[TurnRecord]] | None
    """Lines by turn id without a trip to the store, for dense retrieval's hits (else it reads them)."""

    async def rank(self, terms: str, facts: int, lines: int) -> Ranked: ...

    async def recent(self) -> Recent: ...

    async def around(self, hits: Sequence[TurnRecord]) -> dict[int, tuple[TurnRecord, ...]]:
        """``bot.memory.recall.neighbours`` of ``hits``."""
        ...

    async def said_in(self, periods: Sequence[tuple[float, float]]) -> list[TurnRecord]:
        """The latest ``PERIOD_LINES`` lines said in each period ([start, end) timestamps)."""
        ...

    async def lines_at(self, positions: Sequence[Position]) -> list[TurnRecord]:
        """The lines at (conversation id, seq) ``positions`` that exist."""
        ...

    async def lengths(self, conversations: Sequence[str]) -> dict[str, int]:
        """How many positions each of ``conversations`` has (its last line's seq plus one)."""
        ...

    async def call_start(self, facts: int) -> CallStart: ...

    def facts(self, limit: int) -> Facts: ...

    async def summaries(self) -> Sequence[ConversationSummary]: ...


class StoredMemory:
    """The member's memory read from the store for one build (implements ``MemorySource``)."""

    def __init__(self, store: ContextStore, user_id: int, exclude_call_id: str | None) -> None:
        self.store = store
        self.user_id = user_id
        self.exclude_call_id = exclude_call_id
        self.rendered_lines: Rendered | None = None
        self.rendered_facts: Rendered | None = None
        self.kept: dict[str, object] | None = None
        self.lines_by_id: Callable[[Sequence[int]], list[TurnRecord]] | None = None

    async def rank(self, terms: str, facts: int, lines: int) -> Ranked:
        ranked_facts = await self.store.rank_facts(self.user_id, terms, facts)
        ranked = await self.store.rank_turns(self.user_id, terms, lines, exclude_call_id=self.exclude_call_id)
        return Ranked(ranked_facts, ranked)

    async def recent(self) -> Recent:
        lines = await self.store.recent_turns_of(self.user_id, CALL_START_LINES, exclude_call_id=self.exclude_call_id)
        priors = line_priors(lines)
        return Recent(lines, priors, QueryBase.of(lines, priors))

    async def around(self, hits: Sequence[TurnRecord]) -> dict[int, tuple[TurnRecord, ...]]:
        found = await self.store.turns_at(neighbour_positions(hits))
        return neighbours(hits, lambda _: found)

    async def lines_at(self, positions: Sequence[Position]) -> list[TurnRecord]:
        return await self.store.turns_at(positions) if positions else []

    async def lengths(self, conversations: Sequence[str]) -> dict[str, int]:
        return await self.store.conversation_lengths(conversations)

    async def said_in(self, periods: Sequence[tuple[float, float]]) -> list[TurnRecord]:
        said: list[TurnRecord] = []
        for start, end in periods:
            before = await self.store.recent_turns_of(
                self.user_id, PERIOD_LINES, exclude_call_id=self.exclude_call_id, before=end
            )
            said.extend(turn for turn in before if turn.spoken_at >= start)
        return said

    async def call_start(self, facts: int) -> CallStart:
        """Everything from one read (``call_start_memory``): the first page of facts and the latest lines, ranked
        by their columns; records are made only of the lines tried."""
        page, recent = await self.store.call_start_memory(
            self.user_id, facts=min(FACT_PAGE, facts), lines=CALL_START_LINES
        )
        rows = recent.rows
        call, chat = RecentLines.CALL_ID, RecentLines.CHAT_ID
        opening = [recent.line(at) for at in opening_of(range(len(rows)), lambda at: rows[at][call] or rows[at][chat])]
        return CallStart(
            FactPages(self.store, self.user_id, facts, page), opening, RankedLines(recent), recent.newest_first()
        )

    def facts(self, limit: int) -> Facts:
        return FactPages(self.store, self.user_id, limit)

    async def summaries(self) -> Sequence[ConversationSummary]:
        return await self.store.latest_summaries(self.user_id, SUMMARIES)


class IndexedMemory:
    """The member's memory from their index (implements ``MemorySource``): no read of the store at all."""

    def __init__(self, index: MemberIndex) -> None:
        self.index = index
        self.rendered_lines: Rendered | None = index.rendered_lines
        self.rendered_facts: Rendered | None = index.rendered_facts
        self.kept: dict[str, object] | None = index.derived
        self.lines_by_id: Callable[[Sequence[int]], list[TurnRecord]] | None = index.turns_by_id

    async def rank(self, terms: str, facts: int, lines: int) -> Ranked:
        return Ranked(self.index.rank_facts(terms, facts), self.index.rank_turns(terms, lines))

    async def recent(self) -> Recent:
        lines, priors, _, base = indexed_lines(self.index)
        return Recent(lines, priors, base)

    async def around(self, hits: Sequence[TurnRecord]) -> dict[int, tuple[TurnRecord, ...]]:
        return neighbours(hits, self.index.turns_at)

    async def said_in(self, periods: Sequence[tuple[float, float]]) -> list[TurnRecord]:
        return [turn for start, end in periods for turn in self.index.said_between(start, end, PERIOD_LINES)]

    async def lines_at(self, positions: Sequence[Position]) -> list[TurnRecord]:
        return self.index.turns_at(positions)

    async def lengths(self, conversations: Sequence[str]) -> dict[str, int]:
        return self.index.conversation_lengths(conversations)

    async def call_start(self, facts: int) -> CallStart:
        lines, _, informative, _ = indexed_lines(self.index)
        opening = opening_of(lines, lambda turn: turn.call_id or turn.chat_id)
        return CallStart(self.facts(facts), opening, (lines[at] for at in informative), reversed(lines))

    def facts(self, limit: int) -> Facts:
        return self.index.facts[:limit]

    async def summaries(self) -> Sequence[ConversationSummary]:
        return self.index.summaries


IndexedLines = tuple[list[TurnRecord], dict[int, float], tuple[int, ...], QueryBase]


def indexed_lines(index: MemberIndex) -> IndexedLines:
    """The index's latest CALL_START_LINES lines, their priors, the positions of those that carry something in the
    order of their prior (``informative_order``) and the lines in a query's order (``QueryBase``): computed once
    per index (``MemberIndexes``' ``prepare``)."""

    def compute(index: MemberIndex) -> IndexedLines:
        lines = index.recent(CALL_START_LINES)
        priors = line_priors(lines)
        return lines, priors, informative_order(lines, priors), QueryBase.of(lines, priors)

    return cast(IndexedLines, index.derive("lines", compute))
