"""What the agent is told at the start of a call, for each utterance, or in a text chat: persona, then memory.

The block is framed as notes the user shared, never as instructions. Every remembered text is rendered as a
JSON string literal (quotes, newlines and control characters escaped) inside <memory> ... </memory>, and whatever
reads as the block's tags or a chat template's tokens is defused (``bot.memory.defuse``), so remembered text
cannot close the block or pose as a system instruction. The block never exceeds the token budget
(``bot.memory.block``). What goes in comes from the member's memory (``bot.memory.sources``: the store, or their
index while they are in a call), ordered by relevance and priors (``bot.memory.priors``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from itertools import chain
from typing import TYPE_CHECKING

from bot.memory.block import MEMORY_HEADER, BudgetedBlock, content_words, quoted, render_fact_line, render_turn_line
from bot.memory.dates import named_periods
from bot.memory.identifiers import identifier_lines, keep_identifiers
from bot.memory.index import MemberIndexes, Renderer
from bot.memory.priors import by_score
from bot.memory.recall import (
    asks_something,
    common_words,
    conversation,
    conversation_leads,
    distinctive,
    earned,
    in_conversations,
    in_openings,
    keep_core,
    said_in_periods,
    standout_positions,
    with_neighbours,
    word_set,
)
from bot.memory.salience import member_salience
from bot.memory.sources import (
    CALL_START_LINES,
    ContextStore,
    Facts,
    IndexedMemory,
    MemorySource,
    StoredMemory,
    current_facts,
    indexed_lines,
)
from bot.memory.speakers import SideFocus, address_words, named_side, vocatives
from bot.memory.tokens import count_tokens
from bot.store.models import TurnRecord
from bot.store.specifics import holds_identifier, specifics
from bot.store.terms import content_query, stem

if TYPE_CHECKING:
    from bot.memory.dense import DenseRetriever

__all__ = ["CALL_START_LINES", "MEMORY_HEADER", "TEXT_CACHES", "ContextBuilder", "ContextStore"]

FACT_CANDIDATES = 50
MIN_LINE_CANDIDATES = 40
TOKENS_PER_CANDIDATE = 10
"""Lines fetched from the index for a query: one per this many tokens of budget. Lines average about 30 tokens, so
three times what fits: with neighbours scored and the weaker hits competing with the call start, 75 candidates at
1,500 tokens found less evidence on LoCoMo than 150 (bench/locomo.py, 0.712 against 0.720)."""
CALL_START_FACT_SHARE = 0.5
MAX_QUERY_CHARS = 4000
"""A query is ranked by its first this many characters (a Discord message's longest): its first terms are what
ranking uses anyway, and a voice turn's build stays bounded (a 740 KB utterance took 200 ms of the event loop)."""


class ContextBuilder:
    def __init__(self, store: ContextStore, *, budget_tokens: int, persona: str):
        self.store = store
        self.budget_tokens = budget_tokens
        self.persona = persona
        self.indexes = MemberIndexes(
            store, renderer=Renderer(render_turn_line, render_fact_line), prepare=indexed_lines
        )
        self.dense: DenseRetriever | None = None
        """Optional dense retrieval (``llm.embedding_model``): fused with BM25 in query-aware builds."""
        self.clock: Callable[[], float] = time.time
        """Now, for what an utterance names relative to it ("yesterday", "last week")."""

    async def build(
        self,
        user_id: int,
        *,
        persona: str | None = None,
        budget_tokens: int | None = None,
        query: str | None = None,
        include_memory: bool = True,
        exclude_call_id: str | None = None,
        stamp: tuple[int, int] | None = None,
    ) -> list[dict[str, str]]:
        messages = [{"role": "system", "content": persona or self.persona}]
        if not include_memory:
            return messages
        block = await self.memory_block(
            user_id, budget_tokens or self.budget_tokens, query=query, exclude_call_id=exclude_call_id, stamp=stamp
        )
        if block is not None:
            messages.append({"role": "system", "content": block})
        return messages

    async def memory_block(
        self,
        user_id: int,
        budget: int,
        *,
        query: str | None = None,
        exclude_call_id: str | None = None,
        stamp: tuple[int, int] | None = None,
    ) -> str | None:
        """The memory message for ``budget`` tokens: ranked for ``query`` when given, else for a call start.

        With ``exclude_call_id`` (the member's call in progress, whose lines the agent already has) the member's
        other memory is read from their in-memory index (``bot.memory.index``), kept while the store says it is
        current (``stamp``: the member's ``memory_stamp`` when the caller has just read it): the live path builds
        on every utterance."""
        query = query[:MAX_QUERY_CHARS] if query else None
        terms = content_query(query) if query else ""
        if not asks_something(terms):  # "hi", "thanks, bye": what a call start shows
            terms = ""
        source: MemorySource
        if exclude_call_id is None:
            source = StoredMemory(self.store, user_id, None)
        else:
            source = IndexedMemory(await self.indexes.get(user_id, exclude_call_id, stamp))
        block = BudgetedBlock(budget, source.rendered_lines, source.rendered_facts)
        if terms:
            await self._fill_for_query(block, source, user_id, terms, exclude_call_id, query or "")
        else:
            await self._fill_call_start_kept(block, source)
            if exclude_call_id is None:  # a call starting: its utterances will need the index
                self.indexes.prefetch(user_id)
        return None if block.empty else block.render()

    async def _fill_for_query(
        self, block: BudgetedBlock, source: MemorySource, user_id: int, terms: str, exclude: str | None, query: str
    ) -> None:
        """The facts the member told (``keep_core``), facts matching the utterance, the member's lines holding an
        identifier in room made to measure for them (``bot.memory.identifiers``), then the member's lines by
        relevance: BM25 from the stemmed index plus the nearest by meaning (``DenseRetriever.fuse``), words the
        member says all the time left out of both (``distinctive``), each line raised by its neighbours' relevance
        and by how early in its conversation it was said, and the best bringing their neighbours
        (``bot.memory.recall``); when the utterance names one of the two
        people, that person's own lines (``bot.memory.speakers``: the names select whose lines, not which, so they
        are left out of the words as well); when it names a day, a month or the past relative to now, the lines
        said then score higher (``said_in_periods``); then the rest of the facts, summaries and the latest lines
        while anything fits. When the utterance matches nothing, that rest is the call start."""
        lines, priors, base = await source.recent()
        periods = named_periods(query, self.clock())
        address = address_words(lines, source.kept)
        side = named_side(terms, address)
        terms, query = distinctive(terms, query, common_words(lines, source.kept) | address.keys())
        candidates = max(MIN_LINE_CANDIDATES, block.budget // TOKENS_PER_CANDIDATE)
        ranked_facts, ranked = await source.rank(terms, FACT_CANDIDATES, candidates)
        if self.dense is not None:
            ranked_facts, ranked = await self.dense.fuse(
                user_id,
                query,
                ranked_facts,
                ranked,
                limit=candidates,
                exclude_call_id=exclude,
                lines_by_id=source.lines_by_id,
                salience=lambda: member_salience(lines, source.kept),
            )
        if periods:
            ranked = said_in_periods(ranked, periods, await source.said_in(periods))
        leads = conversation_leads(ranked)
        if leads:
            ranked = in_conversations(ranked, leads, await source.lines_at(standout_positions(ranked, leads)))
        ranked = with_neighbours(ranked)
        ranked = in_openings(ranked, await source.lengths(list(dict.fromkeys(conversation(t) for t, _ in ranked))))
        if not ranked and not ranked_facts:
            await self._fill_call_start_kept(block, source)
            return
        around = await source.around([t for t, _ in ranked])
        # the told facts: the same for every utterance of a call, kept with the member's index
        await keep_core(block, lambda: self._fill_core(block, source), kept=source.kept)
        for fact, _ in ranked_facts:
            if fact.current:
                block.add_fact(fact)
        keep_identifiers(block, identifier_lines(lines, priors, source.kept))
        focus = SideFocus.of(side, ranked)
        strong, weak = earned(ranked)
        for turn, _ in chain(((turn, True) for turn, _ in strong), by_score(weak, priors, base, lines)):
            if block.full:
                break
            if not focus.shown(turn) or block.add_turn(turn):
                for near in focus.near(around.get(turn.turn_id, ())):
                    block.add_turn(near)
        await self._fill_rest(block, source, reversed(lines))

    async def _fill_core(self, block: BudgetedBlock, source: MemorySource) -> None:
        """What a query-aware block keeps whatever the utterance: the facts the member told it (read with the
        facts alone, not the call start's lines)."""
        async for fact in current_facts(source.facts(max(block.budget // 8, 16))):
            if fact.told and not block.add_fact(fact):
                break

    async def _fill_call_start_kept(self, block: BudgetedBlock, source: MemorySource) -> None:
        """What a call start shows, for an utterance that names nothing or matches nothing: on the live path filled
        once per member index and restored for the next such utterance (``keep_core``)."""
        await keep_core(block, lambda: self._fill_for_call_start(block, source), share=1.0, kept=source.kept)

    async def _fill_for_call_start(self, block: BudgetedBlock, source: MemorySource) -> None:
        """Current facts first, then the latest exchange, then the lines most likely to matter again (names,
        numbers, dates, decisions), newer ones first among equals; then whatever recent lines still fit."""
        start = await source.call_start(max(block.budget // 8, 16))
        fact_share = block.budget * CALL_START_FACT_SHARE
        async for fact in current_facts(start.facts):
            if block.budget - block.left >= fact_share or not block.add_fact(fact):
                break
        for turn in start.opening:
            block.add_turn(turn)
        for turn in start.informative:
            if block.full:
                break
            block.add_turn(turn)
        await self._fill_rest(block, source, start.newest_first, start.facts)

    def forget_cached(self, user_id: int | None = None) -> None:
        """Drop what is held of one member (their index, their vectors), or of everyone."""
        self.indexes.drop(user_id)
        if self.dense is not None:
            self.dense.forget_cached(user_id)

    def forget(self, user_id: int | None = None) -> None:
        """After something was forgotten: drop what is held of the member, and empty the process-wide caches
        keyed by text (rendered lines and their token counts, word sets, query words) whole. Finding one
        member's entries would cost more than refilling them, and forgetting is rare; so nothing a member forgot
        stays readable in this process either."""
        self.forget_cached(user_id)
        for cached in TEXT_CACHES:
            cached.cache_clear()

    async def _fill_rest(
        self,
        block: BudgetedBlock,
        source: MemorySource,
        newest_first: Iterable[TurnRecord],
        facts: Facts | None = None,
    ) -> None:
        """Whatever still fits: the other current facts, the latest summaries, then the newest lines."""
        if block.full:
            return
        async for fact in current_facts(source.facts(max(block.budget // 8, 16)) if facts is None else facts):
            if not block.add_fact(fact):
                break
        for convo in await source.summaries():
            if not block.add_summary(convo):
                break
        for turn in newest_first:
            if block.full:
                break
            block.add_turn(turn)


TEXT_CACHES = (quoted, content_words, count_tokens, holds_identifier, specifics, stem, word_set, vocatives)
"""The process-wide caches keyed by what members said (quoted lines, their words, token counts, specifics, stems):
emptied whole when anything is forgotten (``ContextBuilder.forget``)."""
