"""After a call or a text chat: one LLM call turns the stored transcript into facts and a summary.

Work comes from the store's durable queue (kinds ``post_call`` and ``post_chat``), so a crash or restart
resumes it: a claimed job whose worker died becomes due again when its lease runs out. Everything one job
writes (new facts, confirmations, superseded facts, the summary, and the job's own "done") is committed by one
``Store.apply_extraction`` transaction, fenced by the claim's attempt number: a job is processed once, a crash
leaves nothing half-written, and a worker whose lease ran out cannot write over the one that took over.

Output that is not valid extraction JSON gets one more LLM call; if that is invalid too the job is marked
``failed`` (not retried: the same transcript would most likely fail again) and nothing is written. The
transcript stays, so the conversation is still remembered as lines and can be re-queued. An unreachable LLM
is retried with exponential backoff, up to ``max_attempts`` claims.

With dense retrieval on (``llm.embedding_model``, ``bot.memory.dense``), a settled conversation job queues an
``embed`` job that embeds the member's lines and facts still without a vector, batch by batch (see there); and a
``greeting`` job that prepares what the member hears first at their next call (``bot.memory.greeting``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from bot.llm.client import LLMClient
from bot.llm.errors import LLMError
from bot.memory.dense import MemberEmbedder
from bot.memory.extraction import (
    ExtractedFact,
    Extraction,
    ExtractionError,
    build_messages,
    grounded_facts,
    normalise,
    parse_reply,
)
from bot.memory.greeting import GREETING_JOB, GreetingWriter
from bot.memory.importer import POST_CALL_JOB
from bot.store.models import CallRecord, ChatRecord, Conversation, FactRecord, Job, TurnRecord, UserRecord
from bot.store.repository import StorageFull
from bot.store.terms import content_query


class LearnedStore(Protocol):
    """What telling how much a conversation taught reads."""

    async def facts_from(self, convo: Conversation) -> list[FactRecord]: ...
    async def job_state(self, kind: str, ref_id: str) -> str | None: ...


class PostCallStore(LearnedStore, Protocol):
    """What post-call processing reads and writes (and how much a conversation taught, ``facts_learned``)."""

    async def apply_extraction(
        self,
        job_id: int,
        attempt: int,
        user_id: int,
        at: float,
        convo: Conversation,
        *,
        new_facts: Sequence[tuple[str, Sequence[int]]] = (),
        confirmed: Sequence[int] = (),
        summary: str | None = None,
        generation: int | None = None,
    ) -> int | None: ...
    async def call_turns(self, call_id: str) -> list[TurnRecord]: ...
    async def chat_turns(self, chat_id: str) -> list[TurnRecord]: ...
    async def claim_job(self, at: float, lease_seconds: float) -> Job | None: ...
    async def enqueue_job(self, kind: str, ref_id: str, at: float, *, not_before: float = 0.0) -> bool: ...
    async def fail_job(self, job_id: int, at: float, error: str, *, retry_at: float | None) -> None: ...
    async def finish_job(self, job_id: int, at: float) -> None: ...
    async def get_call(self, call_id: str) -> CallRecord | None: ...
    async def get_chat(self, chat_id: str) -> ChatRecord | None: ...
    async def get_user(self, user_id: int) -> UserRecord | None: ...
    async def list_facts(
        self,
        user_id: int,
        *,
        include_superseded: bool = False,
        superseded_only: bool = False,
        offset: int = 0,
        limit: int = 100,
    ) -> list[FactRecord]: ...
    async def memory_generation(self, user_id: int) -> int: ...
    async def search_facts(self, user_id: int, query: str, limit: int) -> list[FactRecord]: ...


log = logging.getLogger(__name__)

FAILING_BACKOFF_MAX_SECONDS = 60.0


def _log_failure(exc: Exception, wait: float) -> None:
    if isinstance(exc, StorageFull):
        log.warning("post-call queue: the database is full; trying again in %.0f s (%s)", wait, exc)
    else:
        log.exception("post-call queue: could not take or settle a job; trying again in %.0f s", wait)


POST_CHAT_JOB = "post_chat"
EMBED_JOB = "embed"
"""Dense retrieval (``bot.memory.dense``): queued when a conversation's post-call job is settled, ref
``<post_call|post_chat>:<id>`` (``#n`` for the n-th continuation of a long backfill)."""
_KINDS: dict[str, Literal["call", "chat"]] = {POST_CALL_JOB: "call", POST_CHAT_JOB: "chat"}
_JOB_FOR = {"call": POST_CALL_JOB, "chat": POST_CHAT_JOB, POST_CALL_JOB: POST_CALL_JOB, POST_CHAT_JOB: POST_CHAT_JOB}

RECENT_FACTS_IN_PROMPT = 60
RELATED_FACTS_PER_LINE = 3
MAX_FACTS_IN_PROMPT = 120
EXTRACTION_MAX_TOKENS = 4000
EXTRACTION_TEMPERATURES = (0.1, 0.5)
"""The first try, then the one retry after invalid output (a little warmer, so it does not repeat itself)."""

OnProcessed = Callable[[str, str, int], Awaitable[None]]


@dataclass(frozen=True)
class _Conversation:
    kind: Literal["call", "chat"]
    ref_id: str
    user_id: int
    started_at: float
    ended_at: float | None
    private: bool
    finished: bool


@dataclass(frozen=True)
class WritePlan:
    """What one conversation adds: new facts (text, ids they supersede) and ids of facts said again."""

    new_facts: list[tuple[str, list[int]]]
    confirmed: list[int]


def reconcile(facts: Sequence[ExtractedFact], current: Sequence[FactRecord]) -> WritePlan:
    """Turn grounded facts into writes against the user's current facts.

    A fact the model marks as a duplicate of a current fact, or whose normalised text equals one, confirms that
    fact instead of adding a row. ``replaces`` keeps only ids of the user's current facts. Repeats within the
    conversation are added once."""
    by_id = {f.fact_id for f in current}
    by_text = {normalise(f.text): f.fact_id for f in current}
    new_facts: list[tuple[str, list[int]]] = []
    confirmed: list[int] = []
    added: set[str] = set()
    replaced: set[int] = set()
    for fact in facts:
        key = normalise(fact.text)
        target = fact.duplicate_of if fact.duplicate_of in by_id else by_text.get(key)
        if target is not None:
            if target not in confirmed:
                confirmed.append(target)
            continue
        if key in added:
            continue
        added.add(key)
        replaces = [i for i in dict.fromkeys(fact.replaces) if i in by_id and i not in replaced]
        replaced.update(replaces)
        new_facts.append((fact.text, replaces))
    return WritePlan(new_facts, confirmed)


async def facts_learned(store: LearnedStore, kind: str, ref_id: str) -> int | None:
    """None while the conversation's job is pending or running (or there is none), else its fact count.

    ``kind`` is the job kind (``post_call``/``post_chat``) or the conversation kind (``call``/``chat``)."""
    job_kind = _JOB_FOR.get(kind)
    if job_kind is None:
        raise ValueError(f"unknown conversation kind {kind!r}")
    state = await store.job_state(job_kind, ref_id)
    if state not in ("done", "failed"):
        return None
    return len(await store.facts_from(Conversation(_KINDS[job_kind], ref_id)))


class PostCallProcessor:
    def __init__(
        self,
        store: PostCallStore,
        llm: LLMClient | None,
        *,
        clock: Callable[[], float] = time.time,
        on_processed: OnProcessed | None = None,
        lease_seconds: float = 300.0,
        max_attempts: int = 5,
        retry_base_seconds: float = 60.0,
        embedder: MemberEmbedder | None = None,
        greetings: GreetingWriter | None = None,
    ):
        """``greetings``: prepares the member's next greeting after each conversation (a ``greeting`` job)."""
        self.store = store
        self.llm = llm
        self.embedder = embedder
        self.greetings = greetings
        self._clock = clock
        self._on_processed = on_processed
        self.lease_seconds = lease_seconds
        self.max_attempts = max_attempts
        self.retry_base_seconds = retry_base_seconds

    async def facts_learned(self, kind: str, ref_id: str) -> int | None:
        return await facts_learned(self.store, kind, ref_id)

    async def run(self, stop: asyncio.Event, poll_seconds: float = 1.0) -> None:
        """Process due jobs until ``stop`` is set; sleep ``poll_seconds`` whenever the queue is empty. While taking
        or settling a job fails (a full disk), the wait doubles up to ``FAILING_BACKOFF_MAX_SECONDS`` and the failure
        is logged when it starts and then once per longest wait, not every second."""
        failures = 0
        while not stop.is_set():
            wait = poll_seconds
            try:
                busy = await self.run_once()
            except Exception as exc:
                failures += 1
                wait = min(poll_seconds * 2 ** (failures - 1), FAILING_BACKOFF_MAX_SECONDS)
                if failures == 1 or wait == FAILING_BACKOFF_MAX_SECONDS:
                    _log_failure(exc, wait)
                busy = False
            else:
                if failures:
                    log.info("post-call queue: jobs are taken and settled again")
                failures = 0
            if busy:
                await asyncio.sleep(0)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)

    async def run_once(self) -> bool:
        """Process one due job; False when there was none."""
        job = await self.store.claim_job(self._clock(), self.lease_seconds)
        if job is None:
            return False
        try:
            await self._process(job)
        except LLMError as exc:
            await self._retry_later(job, f"llm: {type(exc).__name__} (status {exc.status})")
        except Exception as exc:
            log.debug("post-call job %d failed", job.job_id, exc_info=True)
            await self._retry_later(job, f"error: {type(exc).__name__}")
        return True

    # ---- one job ---------------------------------------------------------------------------------------

    async def _process(self, job: Job) -> None:
        if job.kind == EMBED_JOB:
            await self._embed(job)
            return
        if job.kind == GREETING_JOB:
            await self._greet(job)
            return
        kind = _KINDS.get(job.kind)
        if kind is None:
            log.warning("post-call queue: job %d has unknown kind %r; marked failed", job.job_id, job.kind)
            await self.store.fail_job(job.job_id, self._clock(), "unknown job kind", retry_at=None)
            return
        convo = await self._conversation(kind, job.ref_id)
        if convo is None:
            await self._finish(job, "conversation no longer exists")
            return
        if not convo.finished:
            now = self._clock()
            await self.store.fail_job(job.job_id, now, "conversation still open", retry_at=now + self.lease_seconds)
            return
        generation = await self.store.memory_generation(convo.user_id)  # before anything is read: see the fence
        user = await self.store.get_user(convo.user_id)
        if convo.private or (user is not None and not user.memory_enabled):
            await self._finish(job, "private or memory paused")
            return
        if self.llm is None:
            await self._finish(job, "no LLM configured")
            return
        turns = await self._turns(convo)
        user_lines = [t.content for t in turns if t.role == "user" and t.content.strip()]
        if not user_lines:
            await self._finish(job, "nothing said by the user")
            return

        current = await self._current_facts(convo.user_id)
        shown = await self._facts_for_prompt(convo.user_id, current, user_lines)
        messages = build_messages(turns, shown, started_at=convo.started_at, kind=kind)
        extraction = await self._extract(job, messages)
        if extraction is None:
            await self.store.fail_job(job.job_id, self._clock(), "invalid extraction output", retry_at=None)
            await self._notify(job, 0)
            return

        facts, dropped = grounded_facts(extraction, user_lines)
        for reason in dropped:
            log.debug("post-call job %d: dropped a fact: %s", job.job_id, reason)
        plan = reconcile(facts, current)
        at = convo.ended_at or convo.started_at
        count = await self.store.apply_extraction(
            job.job_id,
            job.attempts,
            convo.user_id,
            at,
            Conversation(kind, convo.ref_id),
            new_facts=plan.new_facts,
            confirmed=plan.confirmed,
            summary=extraction.summary or None,
            generation=generation,
        )
        if count is None:
            log.info("post-call job %d: lease lost to another worker; its result was discarded", job.job_id)
            return
        log.info(
            "post-call job %d (%s): %d facts (%d new, %d confirmed, %d dropped)",
            job.job_id,
            job.kind,
            count,
            len(plan.new_facts),
            len(plan.confirmed),
            len(dropped),
        )
        await self._notify(job, count)

    async def _extract(self, job: Job, messages: list[dict[str, str]]) -> Extraction | None:
        assert self.llm is not None
        for attempt, temperature in enumerate(EXTRACTION_TEMPERATURES, start=1):
            raw = await self.llm.complete(
                messages, json_mode=True, temperature=temperature, max_tokens=EXTRACTION_MAX_TOKENS
            )
            try:
                return parse_reply(raw)
            except ExtractionError as exc:
                log.warning(
                    "post-call job %d: invalid extraction output (%s), try %d of %d",
                    job.job_id,
                    exc.kind,
                    attempt,
                    len(EXTRACTION_TEMPERATURES),
                )
        return None

    async def _finish(self, job: Job, why: str) -> None:
        await self.store.finish_job(job.job_id, self._clock())
        log.info("post-call job %d (%s): nothing stored (%s)", job.job_id, job.kind, why)
        await self._notify(job, await facts_learned(self.store, job.kind, job.ref_id) or 0)

    async def _retry_later(self, job: Job, error: str) -> None:
        now = self._clock()
        if job.attempts >= self.max_attempts:
            log.warning("post-call job %d: giving up after %d attempts (%s)", job.job_id, job.attempts, error)
            await self.store.fail_job(job.job_id, now, error, retry_at=None)
            await self._notify(job, 0)
            return
        delay = min(self.retry_base_seconds * 2 ** (job.attempts - 1), 3600.0)
        log.warning("post-call job %d: %s; retrying in %.0f s", job.job_id, error, delay)
        await self.store.fail_job(job.job_id, now, error, retry_at=now + delay)

    async def _embed(self, job: Job) -> None:
        """Embed the member's lines and facts that have no vector yet (this conversation's and any earlier
        ones'), batch by batch; when more remain than one job embeds, queue the next part."""
        base, _, part = job.ref_id.partition("#")
        job_kind, _, ref_id = base.partition(":")
        kind = _KINDS.get(job_kind)
        convo = await self._conversation(kind, ref_id) if kind is not None else None
        user = await self.store.get_user(convo.user_id) if convo is not None else None
        if self.embedder is None or convo is None or (user is not None and not user.memory_enabled):
            await self.store.finish_job(job.job_id, self._clock())
            log.info("embed job %d: nothing embedded (off, conversation gone or memory paused)", job.job_id)
            return
        stored, more = await self.embedder.embed_member(convo.user_id)
        if more:
            await self.store.enqueue_job(EMBED_JOB, f"{base}#{int(part or 1) + 1}", self._clock())
        await self.store.finish_job(job.job_id, self._clock())
        log.info("embed job %d: %d vectors stored%s", job.job_id, stored, ", more queued" if more else "")

    async def _greet(self, job: Job) -> None:
        """Prepare the member's next greeting (``bot.memory.greeting``): the ref names the conversation that
        ended, or the member whose memory changed."""
        first, _, rest = job.ref_id.partition(":")
        user_id: int | None = None
        if first == "member":
            user_id = int(rest.partition(":")[0])
        elif first in _KINDS:
            convo = await self._conversation(_KINDS[first], rest)
            user_id = convo.user_id if convo is not None else None
        if self.greetings is not None and user_id is not None:
            await self.greetings.prepare(user_id)
        await self.store.finish_job(job.job_id, self._clock())

    async def _queue_greeting(self, job: Job) -> None:
        """After a conversation's job is settled: the member's next greeting is prepared by a job of its own."""
        if self.greetings is None or job.kind not in _KINDS:
            return
        try:
            await self.store.enqueue_job(GREETING_JOB, f"{job.kind}:{job.ref_id}", self._clock())
        except Exception:  # the conversation's job is settled already: it must not be retried for this
            log.exception("post-call job %d: could not queue the member's next greeting", job.job_id)

    async def _queue_embedding(self, job: Job) -> None:
        """After a conversation's job is settled: its lines and new facts are embedded by a job of their own (a
        crash between the two leaves them to the member's next conversation, whose job embeds what is missing)."""
        if self.embedder is None or job.kind not in _KINDS:
            return
        try:
            await self.store.enqueue_job(EMBED_JOB, f"{job.kind}:{job.ref_id}", self._clock())
        except StorageFull:  # a full disk is said as one line: the queue's own back-off reports the episode
            log.warning("post-call job %d: its embedding waits for the next conversation (storage full)", job.job_id)
        except Exception:  # the conversation's job is settled already: it must not be retried for this
            log.exception(
                "post-call job %d: could not queue its embedding; the next conversation's does it", job.job_id
            )

    async def _notify(self, job: Job, count: int) -> None:
        await self._queue_embedding(job)
        await self._queue_greeting(job)
        if self._on_processed is None:
            return
        try:
            await self._on_processed(job.kind, job.ref_id, count)
        except Exception:
            log.exception("post-call job %d: the on_processed callback failed", job.job_id)

    # ---- reading ---------------------------------------------------------------------------------------

    async def _conversation(self, kind: Literal["call", "chat"], ref_id: str) -> _Conversation | None:
        if kind == "call":
            call = await self.store.get_call(ref_id)
            if call is None:
                return None
            return _Conversation(
                "call",
                ref_id,
                call.user_id,
                call.started_at,
                call.ended_at,
                call.private,
                call.state in ("ended", "failed"),
            )
        chat = await self.store.get_chat(ref_id)
        if chat is None:
            return None
        return _Conversation(
            "chat", ref_id, chat.user_id, chat.started_at, chat.ended_at, chat.private, chat.ended_at is not None
        )

    async def _turns(self, convo: _Conversation) -> list[TurnRecord]:
        if convo.kind == "call":
            return await self.store.call_turns(convo.ref_id)
        return await self.store.chat_turns(convo.ref_id)

    async def _current_facts(self, user_id: int, page: int = 500) -> list[FactRecord]:
        facts: list[FactRecord] = []
        while True:
            batch = await self.store.list_facts(user_id, offset=len(facts), limit=page)
            facts.extend(batch)
            if len(batch) < page:
                return facts

    async def _facts_for_prompt(
        self, user_id: int, current: list[FactRecord], user_lines: list[str]
    ) -> list[FactRecord]:
        """The most recently confirmed facts plus those related to what the user said, for reconciliation."""
        if len(current) <= MAX_FACTS_IN_PROMPT:
            return current
        chosen = {f.fact_id: f for f in current[:RECENT_FACTS_IN_PROMPT]}
        for line in user_lines:
            terms = content_query(line)
            if not terms:
                continue
            for fact in await self.store.search_facts(user_id, terms, RELATED_FACTS_PER_LINE):
                chosen.setdefault(fact.fact_id, fact)
            if len(chosen) >= MAX_FACTS_IN_PROMPT:
                break
        return sorted(chosen.values(), key=lambda f: f.fact_id)
