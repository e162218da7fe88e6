"""A member's memory held in process memory while they are in a call, so each utterance's build is in-memory work.

The live voice path builds a query-aware memory block on every turn of a call, leaving out the call's own lines.
Reading and ranking the member's lines from the database each time costs several milliseconds of Python on the
event loop (postings decoded, rows turned into records) for the same few thousand lines. ``MemberIndex`` reads the
member's lines outside the call, their current facts and latest summaries once, with the terms of each line
(stemmed as the full-text index stems them, ``bot.store.terms``), and ranks an utterance over them with the same
BM25 as the backends (``bot.store.ranking``).

It is used only while it is current: before each use the member's ``memory_stamp`` is read from the store (one
indexed lookup): the memory version, which database triggers bump on every change to the member's lines, facts
and summaries by any writer (another process included) except the lines of a call still open, and the memory
generation, which every forget and pause bumps. The stamp is read before the rows, so a write that lands while
the index loads makes the next build load again. Forgetting also drops the member's index at once.

The index holds plaintext only in this process's memory (decrypted by the encrypting store, if any); it is never
written anywhere. At most ``INDEXED_MEMBERS`` members are held, least recently used dropped first.

Each line's rendering and token count (``Renderer``) is worked out once, when the index is read, instead of on
every utterance. The index holds its lines and facts as records, made once when it is read (it held them as rows
of column values, each record made again whenever a build read it, so that the garbage collector would not walk
them: that saved no CPU per voice turn, measured with ``bench/live_recall.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol, cast

import numpy as np
from numpy.typing import NDArray

from bot.store.models import CallRecord, ConversationSummary, FactRecord, TurnRecord
from bot.store.ranking import rank_arrays
from bot.store.terms import ENGLISH, language_stems, language_terms, line_terms, query_words

INDEXED_MEMBERS = 128
"""Members whose index is held at once, least recently used dropped first: enough for every call a process runs
at once (`agora.max_concurrent_agents`, 20 by default) with room for those that just ended. About 3 MB per member
with 5,000 lines; most members have far fewer."""
ALL = 1 << 31
log = logging.getLogger(__name__)
SUMMARIES = 3
LOAD_SLICE = 48
"""Lines tokenized and rendered between two yields to the event loop while an index is read (about a
millisecond)."""


class IndexStore(Protocol):
    """What an index reads."""

    async def latest_summaries(self, user_id: int, limit: int) -> list[ConversationSummary]: ...
    async def list_facts(
        self,
        user_id: int,
        *,
        include_superseded: bool = False,
        superseded_only: bool = False,
        offset: int = 0,
        limit: int = 100,
    ) -> list[FactRecord]: ...
    async def memory_stamp(self, user_id: int) -> tuple[int, int]: ...
    async def open_call_for_user(self, user_id: int) -> CallRecord | None: ...
    async def recent_turns_of(
        self, user_id: int, limit: int, *, exclude_call_id: str | None = None, before: float | None = None
    ) -> list[TurnRecord]: ...


class Renderer(NamedTuple):
    """How the memory block renders a line and a fact, each as (text, its tokens with its newline): given by
    the block's builder (``bot.memory.context``), so the index works them out once per line."""

    line: Callable[[str, str], tuple[str, int]]
    """(role, content) -> rendered line"""
    fact: Callable[[str, float], tuple[str, int]]
    """(text, confirmed_at) -> rendered fact"""


class _Postings:
    """Row numbers by term, and each row's length in terms, as arrays for ``rank_arrays``; rows said in another
    language also by their terms in it (``bot.store.terms.language_terms``), as the backends index them."""

    def __init__(self) -> None:
        self.rows: dict[str, NDArray[np.int32]] = {}
        self.language_rows: dict[str, NDArray[np.int32]] = {}
        self.languages: tuple[str, ...] = ()
        """The languages of the rows that have language terms: a query word is looked up by its stems in them."""
        self.lengths: NDArray[np.float64] = np.zeros(0)

    @classmethod
    async def of(
        cls,
        texts: Sequence[str],
        each: Callable[[int], object] | None = None,
        languages: Sequence[Sequence[str]] | None = None,
    ) -> _Postings:
        """Built in slices of ``LOAD_SLICE`` texts, letting the event loop serve other calls between them;
        ``each(row)`` runs for every row too (in the same slices). ``languages``: each text's besides English."""
        rows: dict[str, list[int]] = {}
        language_rows: dict[str, list[int]] = {}
        held: set[str] = set()
        lengths: list[int] = []
        for row, text in enumerate(texts):
            if row and not row % LOAD_SLICE:
                await asyncio.sleep(0)
            terms, length = line_terms(text)
            lengths.append(length)
            for term in terms:
                rows.setdefault(term, []).append(row)
            for language in () if languages is None else languages[row]:
                native = None if language == ENGLISH else language_terms(text, language)
                if native is not None:
                    held.add(language)
                    for term in native.split():
                        language_rows.setdefault(term, []).append(row)
            if each is not None:
                each(row)
        postings = cls()
        postings.rows = {term: np.array(found, dtype=np.int32) for term, found in rows.items()}
        postings.language_rows = {term: np.array(found, dtype=np.int32) for term, found in language_rows.items()}
        postings.languages = tuple(sorted(held))
        postings.lengths = np.array(lengths, dtype=np.float64)
        return postings

    def rank(self, query: str, limit: int) -> list[tuple[int, float]]:
        """(row number, BM25 score) of the best ``limit`` rows holding any word of ``query`` (by its English term,
        or by its stem in a language of the rows), best first."""
        found: list[NDArray[np.int32]] = []
        for word, term in query_words(query):
            english = self.rows.get(term)
            native = [self.language_rows[s] for s in language_stems(word, self.languages) if s in self.language_rows]
            if native:
                found.append(np.unique(np.concatenate([*native, *([english] if english is not None else [])])))
            elif english is not None:
                found.append(english)
        return rank_arrays(found, self.lengths, limit)


class Rendered:
    """Rendered texts and their token counts by id."""

    def __init__(self) -> None:
        self._rendered: dict[int, tuple[str, int]] = {}

    def put(self, key: int, rendered: tuple[str, int]) -> None:
        self._rendered[key] = rendered

    def get(self, key: int) -> tuple[str, int] | None:
        return self._rendered.get(key)

    def __len__(self) -> int:
        return len(self._rendered)


class MemberIndex:
    """One member's lines outside one call (chronological), current facts (newest confirmed first) and latest
    summaries, with postings for ranking and, when read with a ``Renderer``, each line and fact as the memory
    block renders it (``rendered_lines`` by turn id, ``rendered_facts`` by fact id)."""

    def __init__(
        self,
        stamp: tuple[int, int],
        lines: list[TurnRecord],
        facts: list[FactRecord],
        summaries: list[ConversationSummary],
    ):
        self.stamp = stamp
        self._lines = lines
        self.facts = facts
        """Current facts, newest confirmed first (as ``list_facts`` lists them)."""
        self.summaries = summaries
        self._line_postings = _Postings()
        self._fact_postings = _Postings()
        self._by_position = {(t.call_id or t.chat_id, t.seq): row for row, t in enumerate(lines)}
        self._by_id = {t.turn_id: row for row, t in enumerate(lines)}
        self.rendered_lines = Rendered()
        self.rendered_facts = Rendered()
        self.derived: dict[str, object] = {}
        """What a caller computes once from the index (e.g. the call-start candidates' priors)."""

    @classmethod
    async def read(
        cls,
        stamp: tuple[int, int],
        lines: list[TurnRecord],
        facts: list[FactRecord],
        summaries: list[ConversationSummary],
        renderer: Renderer | None = None,
    ) -> MemberIndex:
        index = cls(stamp, lines, facts, summaries)
        render_line = render_fact = None
        if renderer is not None:
            rendered_lines, rendered_facts = index.rendered_lines, index.rendered_facts

            def render_line(row: int) -> None:
                turn = lines[row]
                rendered_lines.put(turn.turn_id, renderer.line(turn.role, turn.content))

            def render_fact(row: int) -> None:
                fact = facts[row]
                rendered_facts.put(fact.fact_id, renderer.fact(fact.text, fact.confirmed_at))

        index._line_postings = await _Postings.of(
            [turn.content for turn in lines], render_line, [(turn.language,) for turn in lines]
        )
        spoken = index._line_postings.languages  # facts carry no language: they are in those of the lines
        index._fact_postings = await _Postings.of([fact.text for fact in facts], render_fact, [spoken] * len(facts))
        return index

    def __len__(self) -> int:
        return len(self._lines)

    def _line(self, row: int) -> TurnRecord:
        return self._lines[row]

    def rank_turns(self, query: str, limit: int) -> list[tuple[TurnRecord, float]]:
        """The lines matching any word of ``query`` (stemmed), best BM25 first, with the score: the lexical
        ranking's seam (a ranked list of candidates)."""
        ranked = self._line_postings.rank(query, limit)
        return [(self._line(row), score) for row, score in ranked]

    def rank_facts(self, query: str, limit: int) -> list[tuple[FactRecord, float]]:
        ranked = self._fact_postings.rank(query, limit)
        facts = self.facts
        return [(facts[row], score) for row, score in ranked]

    def turns_at(self, positions: Sequence[tuple[str, int]]) -> list[TurnRecord]:
        found = (self._by_position.get(position) for position in positions)
        return [self._line(row) for row in found if row is not None]

    def turns_by_id(self, turn_ids: Sequence[int]) -> list[TurnRecord]:
        """The lines of ``turn_ids`` that the index holds (dense retrieval's hits, without a trip to the store)."""
        found = (self._by_id.get(turn_id) for turn_id in turn_ids)
        return [self._line(row) for row in found if row is not None]

    def recent(self, limit: int) -> list[TurnRecord]:
        """The latest ``limit`` lines, oldest first."""
        return self._lines[-limit:] if limit else []

    def said_between(self, start: float, end: float, limit: int) -> list[TurnRecord]:
        """The latest ``limit`` lines said in [``start``, ``end``), oldest first: what the store's
        ``recent_turns_of(before=end)`` returns from then on. The lines are held in the order they were said."""
        times = cast(list[float], self.derive("said at", lambda index: [turn.spoken_at for turn in index._lines]))
        first, last = bisect_left(times, start), bisect_left(times, end)
        return self._lines[max(first, last - limit) : last] if limit else []

    def conversation_lengths(self, refs: Sequence[str]) -> dict[str, int]:
        """What the store's ``conversation_lengths`` returns for ``refs``, from the index's lines (worked out once)."""
        lengths = cast(dict[str, int], self.derive("lengths", _lengths))
        return {ref: lengths[ref] for ref in refs if ref in lengths}

    def derive(self, name: str, compute: Callable[[MemberIndex], object]) -> object:
        """``compute(self)``, once."""
        if name not in self.derived:
            self.derived[name] = compute(self)
        return self.derived[name]


def _lengths(index: MemberIndex) -> dict[str, int]:
    lengths: dict[str, int] = {}
    for ref, seq in index._by_position:
        if ref is not None:
            lengths[ref] = max(lengths.get(ref, 0), seq + 1)
    return lengths


class MemberIndexes:
    """The indexes held in this process, by (member, call left out), least recently used dropped first."""

    def __init__(
        self,
        store: IndexStore,
        *,
        capacity: int = INDEXED_MEMBERS,
        renderer: Renderer | None = None,
        prepare: Callable[[MemberIndex], object] | None = None,
    ):
        self.store = store
        self.capacity = capacity
        self.renderer = renderer
        self.prepare = prepare
        """Run on each index once read (``derive`` what every build needs): when the index is read ahead at a call
        start, the call's first utterance then finds that done too."""
        self._held: OrderedDict[tuple[int, str], MemberIndex] = OrderedDict()
        self._locks: dict[tuple[int, str], asyncio.Lock] = {}
        self._prefetching: dict[int, asyncio.Task[None]] = {}
        self._reading_ahead = asyncio.Semaphore(1)
        self.loads = 0
        """How many indexes were read from the store (for tests and benchmarks)."""
        self.load_seconds: list[float] = []
        """How long each read took (for benchmarks)."""
        self.read_ahead = True
        """Whether `prefetch` reads ahead at all: only the live route (live recall) uses a call's index, so
        without it a call start's read-ahead would only load the store and the event loop for nothing."""

    async def get(self, user_id: int, exclude_call_id: str, stamp: tuple[int, int] | None = None) -> MemberIndex:
        """The member's current index of everything outside ``exclude_call_id`` (the call in progress), read
        afresh when the store's stamp changed since it was read. ``stamp``: the member's ``memory_stamp`` as the
        caller has just read it (the live route reads it with the key check), else read here."""
        key = (user_id, exclude_call_id)
        if stamp is None:
            stamp = await self.store.memory_stamp(user_id)
        held = self._held.get(key)
        if held is not None and held.stamp == stamp:
            self._held.move_to_end(key)
            return held
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            held = self._held.get(key)
            if held is None or held.stamp != stamp:
                held = await self._load(user_id, exclude_call_id, stamp)
                self._held[key] = held
            self._held.move_to_end(key)
            while len(self._held) > self.capacity:
                dropped, _ = self._held.popitem(last=False)
                self._locks.pop(dropped, None)
        return held

    async def _load(self, user_id: int, exclude_call_id: str, stamp: tuple[int, int]) -> MemberIndex:
        """``stamp`` was read before the rows: a write meanwhile makes the index stale at the next use."""
        began = time.perf_counter()
        lines = await self.store.recent_turns_of(user_id, ALL, exclude_call_id=exclude_call_id)
        facts = await self.store.list_facts(user_id, limit=ALL)
        summaries = await self.store.latest_summaries(user_id, SUMMARIES)
        index = await MemberIndex.read(stamp, lines, facts, summaries, self.renderer)
        if self.prepare is not None:
            self.prepare(index)
        self.loads += 1
        self.load_seconds.append(time.perf_counter() - began)
        return index

    def prefetch(self, user_id: int) -> None:
        """Read the index of the member's open call in the background (at call start: the call's first utterance
        then finds it ready instead of reading a few thousand lines on the agent's time)."""
        if not self.read_ahead or user_id in self._prefetching:
            return
        task = asyncio.get_running_loop().create_task(self._prefetch(user_id))
        self._prefetching[user_id] = task
        task.add_done_callback(lambda done: self._prefetched(user_id, done))

    def _prefetched(self, user_id: int, task: asyncio.Task[None]) -> None:
        if self._prefetching.get(user_id) is task:
            del self._prefetching[user_id]

    async def _prefetch(self, user_id: int) -> None:
        try:
            async with self._reading_ahead:  # one at a time: many calls starting at once do not crowd the loop
                call = await self.store.open_call_for_user(user_id)
                if call is not None:
                    await self.get(user_id, call.call_id)
        except Exception as exc:  # the first utterance reads it instead (and reports a failure to read)
            log.warning("reading member %s's memory index ahead failed (%s)", user_id, type(exc).__name__)

    async def idle(self) -> None:
        """Wait until nothing is being read ahead (benchmarks, tests)."""
        while self._prefetching:
            await asyncio.gather(*list(self._prefetching.values()), return_exceptions=True)

    def drop(self, user_id: int | None = None) -> None:
        """Drop the indexes of one member, or of everyone (forget, retention purge), and stop reading ahead."""
        for key in [k for k in self._held if user_id is None or k[0] == user_id]:
            del self._held[key]
        for member in [m for m in self._prefetching if user_id is None or m == user_id]:
            self._prefetching.pop(member).cancel()
