"""Members shape their memory in their own words: remember this, that is wrong, forget that.

The same three acts serve the voice agent's tools (``bot.memory.tools``) and the text commands. Each acts only on
the member the request belongs to: no words can name another member's memory, because nothing here takes a member
but the one the caller authenticated. A fact told by the member is stored as they said it and marked ``told``: what
is learned from conversations never supersedes it. A forget or a correction touches a fact only when the words
name one fact clearly; otherwise the caller is told which facts came close, so it can ask.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from bot.memory.greeting import GreetingQueueStore, queue_greeting
from bot.store.models import Conversation, FactRecord, UserRecord, remembers
from bot.store.terms import query_stems

if TYPE_CHECKING:
    from bot.memory.service import MemoryService

MAX_FACT_CHARS = 500
"""A told fact longer than this is cut: a fact is a short statement, and the memory block has a budget."""
CANDIDATES = 5
CLEAR_COVERAGE = 0.5
"""A description names a fact when at least this share of its words are the fact's, and no other fact has as
many."""
VAGUE_WORDS = frozenset(
    query_stems("that this what about said told fact facts thing things remember forget memory please know my me")
)
"""Words that say how to treat a fact, not which fact it is."""

Outcome = Literal[
    "remembered", "corrected", "forgotten", "unclear", "not_found", "refused", "empty", "too_many", "unreadable",
    "failed",
]  # fmt: skip
"""What an act came to; the last three only for the memory tools (``bot.memory.tools``): too many calls in one
answer, arguments no store can hold, the memory failing."""
Refusal = Literal["not_chosen", "declined", "paused"]
"""Why nothing a member tells can be remembered now: they never chose, chose without memory, or paused it."""


def refusal(user: UserRecord | None) -> Refusal | None:
    """Why ``user`` cannot have something remembered now (the consent rule, ``remembers``), or None when they
    can."""
    if remembers(user):
        return None
    if user is None or user.consent is None:
        return "not_chosen"
    return "declined" if user.consent != "remember" else "paused"


@dataclass(frozen=True)
class Act:
    """What happened, for the caller to say: the fact written or forgotten, or the facts that came close."""

    outcome: Outcome
    fact: str | None = None
    replaced: str | None = None
    close: list[str] = field(default_factory=list)


def _words(text: str) -> set[str]:
    return set(query_stems(text, max_terms=32)) - VAGUE_WORDS


def named_fact(description: str, ranked: list[FactRecord]) -> FactRecord | list[FactRecord] | None:
    """The one fact ``description`` names among ``ranked`` (best first), the facts it could mean when it names
    none clearly, or None when it comes close to none."""
    wanted = _words(description)
    if not wanted or not ranked:
        return None
    scored = [(len(wanted & _words(fact.text)) / len(wanted), fact) for fact in ranked]
    scored = [(score, fact) for score, fact in scored if score > 0]
    if not scored:
        return None
    scored.sort(key=lambda pair: pair[0], reverse=True)
    best, fact = scored[0]
    if best >= CLEAR_COVERAGE and (len(scored) == 1 or scored[1][0] < best):
        return fact
    return [fact for _, fact in scored[:3]]


class OwnWordsStore(GreetingQueueStore, Protocol):
    """What telling, correcting and forgetting in the member's own words read and write."""

    async def add_told_fact(
        self,
        user_id: int,
        text: str,
        at: float,
        *,
        convo: Conversation | None = None,
        supersedes: Sequence[int] = (),
        generation: int | None = None,
    ) -> int | None: ...
    async def get_fact(self, fact_id: int) -> FactRecord | None: ...
    async def get_user(self, user_id: int) -> UserRecord | None: ...
    async def memory_generation(self, user_id: int) -> int: ...
    async def rank_facts(self, user_id: int, query: str, limit: int) -> list[tuple[FactRecord, float]]: ...


class OwnWords:
    def __init__(self, memory: MemoryService, *, clock: Callable[[], float] = time.time) -> None:
        self.memory = memory
        self.store: OwnWordsStore = memory.store
        self.clock = clock

    async def remember(
        self, user_id: int, text: str, *, convo: Conversation | None = None, generation: int | None = None
    ) -> Act:
        """Store ``text`` as the member said it. ``generation`` as the caller read it (a forget or pause since
        then refuses the write); ``convo`` is where it was said (a private one refuses it)."""
        fact = " ".join(text.split())[:MAX_FACT_CHARS]
        if not fact:
            return Act("empty")
        written = await self.store.add_told_fact(user_id, fact, self.clock(), convo=convo, generation=generation)
        if written is None:
            return Act("refused")
        await queue_greeting(self.store, user_id, self.clock())
        return Act("remembered", fact)

    async def tell(self, user_id: int, text: str) -> Act | Refusal:
        """``/remember``: store ``text`` as the member said it, outside any conversation, when their memory is
        on; otherwise why not."""
        why = refusal(await self.store.get_user(user_id))
        if why is not None:
            return why
        generation = await self.store.memory_generation(user_id)
        act = await self.remember(user_id, text, generation=generation)
        return "paused" if act.outcome == "refused" else act

    async def correct(
        self,
        user_id: int,
        wrong: str,
        right: str,
        *,
        convo: Conversation | None = None,
        generation: int | None = None,
    ) -> Act:
        """Replace the fact ``wrong`` describes by ``right`` (the old one stays in history, superseded, until
        forgotten). With no fact close to ``wrong``, ``right`` is remembered; with several, nothing changes."""
        fact = " ".join(right.split())[:MAX_FACT_CHARS]
        if not fact:
            return Act("empty")
        found = await self._find(user_id, wrong)
        if isinstance(found, list):
            return Act("unclear", close=[f.text for f in found])
        supersedes = [] if found is None else [found.fact_id]
        written = await self.store.add_told_fact(
            user_id, fact, self.clock(), convo=convo, supersedes=supersedes, generation=generation
        )
        if written is None:
            return Act("refused")
        await queue_greeting(self.store, user_id, self.clock())
        return Act("corrected", fact, replaced=None if found is None else found.text)

    async def editable_fact(self, user_id: int, fact_id: int) -> FactRecord | None:
        """The member's fact ``fact_id`` when they may edit it: theirs, and not already replaced by another."""
        fact = await self.store.get_fact(fact_id)
        return fact if fact is not None and fact.user_id == user_id and fact.current else None

    async def correct_fact(self, user_id: int, fact_id: int, right: str) -> Act:
        """Replace the member's fact ``fact_id`` by ``right`` (an edit of a fact they picked)."""
        fact = " ".join(right.split())[:MAX_FACT_CHARS]
        old = await self.editable_fact(user_id, fact_id)
        if old is None:
            return Act("not_found")
        if not fact:
            return Act("empty")
        if fact == old.text:
            return Act("corrected", fact, replaced=old.text)
        written = await self.store.add_told_fact(user_id, fact, self.clock(), supersedes=[fact_id])
        if written is None:
            return Act("refused")
        await queue_greeting(self.store, user_id, self.clock())
        return Act("corrected", fact, replaced=old.text)

    async def forget(self, user_id: int, description: str) -> Act:
        """Forget the fact ``description`` clearly names, with its traces, exactly as ``/forget`` does."""
        found = await self._find(user_id, description)
        if found is None:
            return Act("not_found")
        if isinstance(found, list):
            return Act("unclear", close=[f.text for f in found])
        traces = await self.memory.forget_fact(user_id, found.fact_id)
        return Act("not_found") if traces is None else Act("forgotten", found.text)

    async def _find(self, user_id: int, description: str) -> FactRecord | list[FactRecord] | None:
        ranked = [fact for fact, _ in await self.store.rank_facts(user_id, description, CANDIDATES)]
        return named_fact(description, ranked)
