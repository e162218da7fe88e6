"""Memory operations: record what was said, read it back, forget it for real, export it, expire it."""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from bot.keys import MemberKeys
from bot.memory.context import ContextBuilder, ContextStore
from bot.memory.forgetting import FactTraces, fact_terms, search_text, traces_of
from bot.memory.merge import Append, MergeResult, count_gaps, merge_snapshot, try_append, utterance
from bot.memory.own_words import OwnWordsStore
from bot.store.live_plan import LivePlan, LivePlanNeeds, LiveWrite
from bot.store.models import (
    CallRecord,
    Conversation,
    ConversationSummary,
    FactRecord,
    ForgetResult,
    NewTurn,
    Role,
    TurnRecord,
    TurnsWrite,
    TurnUpdate,
    needs_consent,
)
from bot.store.repository import TurnsChanged


class MemoryStore(ContextStore, OwnWordsStore, Protocol):
    """What the memory service reads, merges and forgets, with what the parts built on it read and write: its
    context builder (``ContextStore``) and ``OwnWords`` (``OwnWordsStore``)."""

    async def apply_call_turns(
        self,
        call_id: str,
        user_id: int,
        inserts: Sequence[NewTurn],
        updates: Sequence[TurnUpdate],
        *,
        anchored: bool,
        checkpoint_at: float,
        generation: int | None = None,
        expected_version: int | None = None,
        live_key: str | None = None,
    ) -> bool: ...
    async def call_tail(self, call_id: str, limit: int) -> list[TurnRecord]: ...
    async def call_turns(self, call_id: str) -> list[TurnRecord]: ...
    async def count_conversations(self, user_id: int) -> int: ...
    async def count_facts(self, user_id: int, *, include_superseded: bool = False) -> int: ...
    async def export_user(self, user_id: int) -> dict[str, Any]: ...
    async def forget_call(self, user_id: int, call_id: str) -> ForgetResult | None: ...
    async def forget_chat(self, user_id: int, chat_id: str) -> ForgetResult | None: ...
    async def forget_fact(
        self, user_id: int, fact_id: int, *, turn_ids: Sequence[int] = (), summaries: Sequence[Conversation] = ()
    ) -> FactRecord | None: ...
    async def forget_user(self, user_id: int) -> ForgetResult: ...
    async def get_call(self, call_id: str) -> CallRecord | None: ...
    async def list_conversations(
        self, user_id: int, *, offset: int = 0, limit: int = 10
    ) -> list[ConversationSummary]: ...
    async def pending_scrub(self) -> bool: ...
    async def purge_transcripts(self, *, guild_id: int | None, older_than: float) -> int: ...
    async def scrub(self) -> bool: ...
    async def search_turns(
        self, user_id: int, query: str, limit: int, *, exclude_call_id: str | None = None
    ) -> list[TurnRecord]: ...
    async def write_live_turn(
        self,
        call_id: str,
        user_id: int,
        turn_key: str | None,
        *,
        tail: int,
        plan: LivePlan,
        checkpoint_at: float,
        generation: int,
    ) -> LiveWrite: ...


log = logging.getLogger(__name__)

SCRUB_RETRY_DELAYS = (0.05, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
"""Waits between scrub attempts while another connection keeps deleted pages alive (about 2 minutes in all)."""

FINAL_CAPTURE = 2**53
MERGE_ATTEMPTS = 5
"""A snapshot merge that lost a race with another writer of the call is read and merged again, this many times."""
TRACE_SCAN_LINES = 2000
TRACE_SCAN_SUMMARIES = 1000
"""Capture order of the history delivered after the agent stopped: nothing can come later."""


@dataclass(frozen=True)
class MemoryPage:
    facts: list[FactRecord]
    superseded: list[FactRecord]
    conversations: list[ConversationSummary]
    fact_count: int
    conversation_count: int
    memory_enabled: bool
    chosen: bool = True
    """Whether the member has answered the memory choice (Remember me or without memory): not before their first
    call or chat, nor after /forget everything (their next call or chat asks again)."""
    call_language: str | None = None
    """The language the member chose for their calls (`bot.calls.language`); None: their Discord language."""


@dataclass(frozen=True)
class _Snapshot:
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


class MemoryService:
    def __init__(
        self,
        store: MemoryStore,
        *,
        budget_tokens: int,
        persona: str,
        keys: MemberKeys | None = None,
        read_ahead: bool = True,
    ):
        """``read_ahead``: read a member's index ahead when their call starts (see `MemberIndexes.prefetch`);
        worth it only when live recall will use it."""
        self.store = store
        self.keys = keys
        self.context = ContextBuilder(store, budget_tokens=budget_tokens, persona=persona)
        self.context.indexes.read_ahead = read_ahead
        # Weak: a call's lock lives while a merge holds or awaits it (a late webhook after the end adds none for good).
        self._call_locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._scrub_task: asyncio.Task[None] | None = None
        self._scrub_again = False

    # ---- recording -------------------------------------------------------------------------------------

    async def record_snapshot(
        self,
        call: CallRecord,
        window: Sequence[tuple[Role, str]],
        *,
        max_history: int | None,
        captured: int | None = None,
        final: bool = False,
        at: float | None = None,
        generation: int | None = None,
        current: CallRecord | None = None,
    ) -> MergeResult:
        """Merge one history snapshot of a call into its stored turns, atomically.

        `max_history=None` means the window is known to be the whole conversation (an import). `generation` is
        the member's memory generation read before the snapshot was taken (default: now): a forget or pause
        since then makes the write a no-op. `current` is the call's row as the caller has just read it: the
        first merge attempt starts from it instead of reading it again (the merge is versioned, so a row that
        changed meanwhile only costs a retry, which reads it afresh)."""
        at = time.time() if at is None else at
        window = storable(window)
        if generation is None:
            generation = await self.store.memory_generation(call.user_id)
        snapshot = _Snapshot(
            window,
            complete=max_history is None or len(window) < max_history,
            capture=FINAL_CAPTURE if final else (captured if captured is not None else int(at * 1000)),
            final=final,
            at=at,
            language=call.language,
        )
        lock = self._call_locks.setdefault(call.call_id, asyncio.Lock())
        async with lock:
            for attempt in range(1, MERGE_ATTEMPTS + 1):
                try:
                    return await self._merge(call, snapshot, generation, current)
                except TurnsChanged:  # another process wrote meanwhile: read and merge again
                    if attempt == MERGE_ATTEMPTS:
                        raise
                    current = None
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _merge(
        self, call: CallRecord, snapshot: _Snapshot, generation: int, current: CallRecord | None
    ) -> MergeResult:
        if current is None or current.call_id != call.call_id:
            current = await self.store.get_call(call.call_id)
        anchored = bool(current and current.history_anchored)
        version = None if current is None else current.turns_version
        limit = snapshot.tail
        if anchored or not snapshot.complete:
            stored = await self.store.call_tail(call.call_id, limit)
            planned = snapshot.plan(stored, len(stored) < limit, anchored)
        else:
            planned = None
        if planned is None:
            planned = snapshot.plan(await self.store.call_turns(call.call_id), True, anchored)
        assert planned is not None  # with every line there is always a plan
        write, result = planned
        if write is None:
            return result
        written = await self.store.apply_call_turns(
            call.call_id,
            call.user_id,
            write.inserts,
            write.updates,
            anchored=write.anchored,
            checkpoint_at=snapshot.at,
            generation=generation,
            expected_version=version,
        )
        if not written:
            log.info("call %s: memory was forgotten or paused meanwhile; the snapshot is dropped", call.call_id)
            return MergeResult([], anchored, 0, 0, 0)
        return result

    async def record_live_turn(
        self,
        call: CallRecord,
        window: Sequence[tuple[Role, str]],
        *,
        max_history: int,
        turn_key: str | None,
        at: float | None = None,
        captured: int | None = None,
        generation: int | None = None,
        heard: frozenset[int] = frozenset(),
    ) -> bool:
        """Store one line of a running call the moment the bot's LLM route sees it (live recall).

        `window` is the conversation as the agent holds it, ending with the new line: the agent's short-term
        history (at most `max_history` messages) is a tail window like a checkpoint's, so it merges with
        checkpoints and webhook 103 in any order without duplicates, exactly as `record_snapshot` merges it.
        `turn_key` (Agora's turn_id and the role) makes a retried request a no-op. `generation` is the member's
        memory generation read when the request arrived: a forget or pause since then drops the line (forget
        wins). `heard`: positions in `window` of replies the member interrupted, stored as what was spoken
        (Agora's `metadata.interrupted`). Returns False when the line was already stored under its key.

        On the voice turn's path, so one store operation (`write_live_turn`), which reads the call's tail and
        writes the line and its key in the same transaction."""
        at = time.time() if at is None else at
        window = storable(window)
        dropped = max(0, len(window) - max_history)
        window = window[dropped:]
        if generation is None:
            generation = await self.store.memory_generation(call.user_id)
        snapshot = _Snapshot(
            window,
            complete=len(window) < max_history,
            capture=captured if captured is not None else int(at * 1000),
            final=False,
            at=at,
            heard=frozenset(i - dropped for i in heard if i >= dropped),
            language=call.language,
        )
        written = await self.store.write_live_turn(
            call.call_id,
            call.user_id,
            turn_key,
            tail=snapshot.live_tail,
            plan=snapshot.live_plan,
            checkpoint_at=at,
            generation=generation,
        )
        if written is LiveWrite.REFUSED:
            log.info("call %s: memory was forgotten or paused meanwhile; the live line is dropped", call.call_id)
        return written is not LiveWrite.SEEN

    def release_call(self, call_id: str) -> None:
        self._call_locks.pop(call_id, None)

    # ---- reading ---------------------------------------------------------------------------------------

    async def page(
        self, user_id: int, *, page: int = 0, facts_per_page: int = 8, calls_per_page: int = 3
    ) -> MemoryPage:
        facts = await self.store.list_facts(user_id, offset=page * facts_per_page, limit=facts_per_page)
        superseded = (
            await self.store.list_facts(user_id, superseded_only=True, limit=facts_per_page) if page == 0 else []
        )
        conversations = await self.store.list_conversations(user_id, offset=page * calls_per_page, limit=calls_per_page)
        user = await self.store.get_user(user_id)
        return MemoryPage(
            facts=facts,
            superseded=superseded,
            conversations=conversations,
            fact_count=await self.store.count_facts(user_id),
            conversation_count=await self.store.count_conversations(user_id),
            memory_enabled=user.memory_enabled if user else True,
            chosen=not needs_consent(user),
            call_language=user.language if user else None,
        )

    async def build_context(
        self,
        user_id: int,
        *,
        persona: str | None = None,
        budget_tokens: int | None = None,
        query: str | None = None,
        exclude_call_id: str | None = None,
        memory_enabled: bool | None = None,
    ) -> list[dict[str, str]]:
        """The system messages for this member: persona, then memory within the token budget.

        The one entry point for context: without ``query``, what a call starts with; with ``query`` (an
        utterance or a chat message), memory ranked for it. ``exclude_call_id`` leaves out the lines of that
        call, e.g. the one in progress, whose lines the agent already has. ``memory_enabled`` is whether the
        member's memory is on, when the caller has just read the member (a call start): not read again."""
        if memory_enabled is None:
            user = await self.store.get_user(user_id)
            memory_enabled = user is None or user.memory_enabled
        include = memory_enabled
        return await self.context.build(
            user_id,
            persona=persona,
            budget_tokens=budget_tokens,
            query=query,
            include_memory=include,
            exclude_call_id=exclude_call_id,
        )

    async def export(self, user_id: int) -> dict[str, Any]:
        return await self.store.export_user(user_id)

    # ---- forgetting ------------------------------------------------------------------------------------

    async def fact_traces(self, user_id: int, fact_id: int) -> FactTraces | None:
        """The member's fact with the lines it was drawn from and the summaries that repeat it (see
        ``bot.memory.forgetting``); None when it is not theirs."""
        fact = await self.store.get_fact(fact_id)
        if fact is None or fact.user_id != user_id:
            return None
        lines = await self.store.search_turns(user_id, search_text(fact_terms(fact.text)), TRACE_SCAN_LINES)
        summaries = await self.store.latest_summaries(user_id, TRACE_SCAN_SUMMARIES)
        return traces_of(
            fact,
            [(t.turn_id, t.content) for t in lines],
            [(c.kind, c.ref_id, c.summary or "") for c in summaries],
        )

    async def forget_fact(self, user_id: int, fact_id: int) -> FactTraces | None:
        """Forget the fact and its traces, so no later context quotes it in any form."""
        traces = await self.fact_traces(user_id, fact_id)
        if traces is None:
            return None
        fact = await self.store.forget_fact(user_id, fact_id, turn_ids=traces.turn_ids, summaries=traces.summaries)
        self.context.forget(user_id)
        if fact is None:
            return None
        self._schedule_scrub()
        return traces

    async def forget_conversation(self, user_id: int, kind: str, ref_id: str) -> ForgetResult | None:
        if kind == "call":
            result = await self.store.forget_call(user_id, ref_id)
        else:
            result = await self.store.forget_chat(user_id, ref_id)
        self.context.forget(user_id)
        if result is not None:
            self._schedule_scrub()
        return result

    async def forget_everything(self, user_id: int) -> ForgetResult:
        """The member's key is destroyed first, in its own committed transaction (from then on nothing of theirs
        can be decrypted, in any copy), then their rows are deleted and the files scrubbed."""
        if self.keys is not None:
            await self.keys.delete(user_id)
        result = await self.store.forget_user(user_id)
        self.context.forget(user_id)
        self._schedule_scrub()
        return result

    async def purge_expired(self, guild_id: int | None, retention_days: int, *, now: float | None = None) -> int:
        now = time.time() if now is None else now
        removed = await self.store.purge_transcripts(guild_id=guild_id, older_than=now - retention_days * 86400)
        self.context.forget()
        if removed:
            self._schedule_scrub()
        return removed

    def _schedule_scrub(self) -> None:
        """Rows are gone at once; the index and log residue is scrubbed right after, off the caller's path.

        The deleting transaction recorded the scrub, so a crash before it completes is finished at the next
        start (`finish_pending_scrubs`); a reader that keeps old pages alive is waited out by retrying."""
        if self._scrub_task is not None and not self._scrub_task.done():
            self._scrub_again = True
            return
        self._scrub_task = asyncio.get_running_loop().create_task(self._scrub_loop())

    async def _scrub_loop(self) -> None:
        delays = iter(SCRUB_RETRY_DELAYS)
        while True:
            self._scrub_again = False
            try:
                complete = await self.store.scrub()
            except Exception:
                log.exception("scrubbing deleted memory from the database file failed; retrying")
                complete = False
            if complete and not self._scrub_again:
                return
            if not complete:
                delay = next(delays, None)
                if delay is None:
                    log.warning(
                        "deleted memory is still in the database file: another program (a backup, a database "
                        "shell) keeps it open; the periodic sweep and the next start scrub it"
                    )
                    return
                await asyncio.sleep(delay)

    async def finish_pending_scrubs(self) -> bool:
        """At start-up and from the periodic sweep: complete a scrub a crash or a busy reader left pending.
        True when nothing is pending any more."""
        if self._scrub_task is not None and not self._scrub_task.done():
            return False
        if not await self.store.pending_scrub():
            return True
        try:
            return await self.store.scrub()
        except Exception:
            log.exception("finishing a pending scrub failed; the next sweep tries again")
            return False

    async def stop_scrubbing(self) -> None:
        """Stop retrying (shutdown): the recorded scrub is finished at the next start."""
        task, self._scrub_task = self._scrub_task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def wait_scrubbed(self, within: float | None = None) -> bool:
        """Wait until deleted text is gone from indexes and the write-ahead log too. False when that could not
        be done (yet) `within` that many seconds, or after the retries ran out."""
        try:
            async with asyncio.timeout(within):
                while self._scrub_task is not None and not self._scrub_task.done():
                    await asyncio.shield(self._scrub_task)
        except TimeoutError:
            return False
        return not await self.store.pending_scrub()


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
