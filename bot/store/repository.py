"""The persistence interfaces, one narrow protocol per aggregate (accounts and consent, server settings,
conversations, facts, jobs and notices, privacy), `Store`, all of them together, which the composition root holds,
and `Backend`, what each database (SQLite, PostgreSQL) implements: `Store` and what only the encrypting layer in
front of it calls. No SQL or driver types cross them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from bot.store.live_plan import LivePlan, LiveWrite
from bot.store.models import (
    CallEnd,
    CallMemoryState,
    CallRecord,
    CallStartCheck,
    CallState,
    ChatRecord,
    Conversation,
    ConversationSummary,
    FactRecord,
    ForgetResult,
    GuildSettings,
    Job,
    NewTurn,
    PreparedGreeting,
    RecentLines,
    TurnRecord,
    TurnUpdate,
    UserRecord,
)
from bot.store.vectors import VectorStore

if TYPE_CHECKING:
    from bot.store.health import WriteHealth

NOTICE_KEEP_SECONDS = 7 * 86400
"""How long webhook notice ids are kept for de-duplication; older deliveries are refused by their signed
timestamp (Agora's retries end within minutes), so a replay can never outlive its notice id."""


class StorageFull(Exception):
    """The database could not be written because the disk is full (or the file has reached its size limit)."""


class SchemaTooNew(Exception):
    """The database was written by a newer version of the bot."""


class TurnsChanged(Exception):
    """Another writer (perhaps another bot process) changed the call's turns since they were read: merge again."""


class OpenCallExists(Exception):
    """The member already has a call that is not ended (one open call per member, enforced by the store)."""


class StoreLifecycle(Protocol):
    # lifecycle
    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def schema_version(self) -> int: ...
    async def ping(self) -> None: ...
    @property
    def write_health(self) -> WriteHealth:
        """Counts of failed writes by kind, and why the last one failed (no member text)."""
        ...


class AccountStore(Protocol):
    """Members and their consent (the rule itself is `bot.store.models.remembers`)."""

    # users and consent
    async def get_user(self, user_id: int) -> UserRecord | None: ...
    async def set_consent(self, user_id: int, remember: bool, at: float) -> UserRecord: ...
    async def set_memory_enabled(self, user_id: int, enabled: bool, at: float) -> UserRecord: ...
    async def set_user_language(self, user_id: int, language: str | None, at: float) -> UserRecord:
        """The language the member chose for their calls; None drops the choice."""
        ...

    async def set_user_locale(self, user_id: int, locale: str) -> None:
        """The member's Discord locale, kept only on the row of a member who chose to be remembered and has not
        paused (`bot.memory.locales`); never creates a row."""
        ...

    async def set_personal_greetings(self, user_id: int, enabled: bool, at: float) -> UserRecord:
        """Whether the member's calls may open with a greeting of their own; off also deletes the one prepared."""
        ...


class GreetingStore(Protocol):
    """Members' prepared greetings (`bot.memory.greeting`). A greeting goes, in the same transaction, with any line,
    conversation or fact it drew on (``PreparedGreeting.call_id``, ``chat_id``, ``fact_ids``) and with the member."""

    async def save_greeting(self, user_id: int, greeting: PreparedGreeting, *, generation: int) -> bool:
        """Replace the member's prepared greeting, behind the memory fence (see `memory_generation`): False,
        writing nothing, when a forget or pause since ``generation`` refuses it."""
        ...

    async def get_greeting(self, user_id: int) -> PreparedGreeting | None: ...
    async def drop_greeting(self, user_id: int) -> None: ...


class GuildSettingsStore(Protocol):
    # per-server settings
    async def get_guild_settings(self, guild_id: int) -> GuildSettings: ...
    async def update_guild_settings(self, guild_id: int, at: float, **changes: Any) -> GuildSettings: ...
    async def delete_guild_settings(self, guild_id: int) -> None: ...
    async def retention_policies(self) -> list[tuple[int, int]]:
        """(guild_id, retention_days) for every server that set a transcript retention."""
        ...


class ConversationStore(Protocol):
    """Calls, chats and their turns and summaries."""

    # calls
    async def create_call(self, call: CallRecord) -> None: ...
    async def get_call(self, call_id: str) -> CallRecord | None: ...
    async def get_call_by_link_hash(self, link_hash: str) -> CallRecord | None: ...
    async def get_call_by_agent_id(self, agent_id: str) -> CallRecord | None: ...
    async def open_call_for_user(self, user_id: int) -> CallRecord | None: ...
    async def open_calls(self) -> list[CallRecord]: ...
    async def count_open_calls(self) -> int: ...
    async def calls_with_agent_to_stop(self) -> list[CallRecord]:
        """Ended calls whose agent Agora would not stop yet (`agent_stop_pending`)."""
        ...

    async def count_guild_calls_since(self, guild_id: int, since: float) -> int: ...
    async def transition_call(
        self, call_id: str, from_states: Sequence[CallState], to_state: CallState, **fields: Any
    ) -> bool:
        """Move a call to `to_state` only if it is in one of `from_states`; True if this caller won."""
        ...

    async def update_call(self, call_id: str, **fields: Any) -> None: ...
    async def take_call_lease(self, call_id: str, owner: str, now: float, until: float) -> bool:
        """Take or renew the lease on an open call: True when `owner` already holds it or it ran out (or was never
        taken, or was released); the lease then runs until `until`."""
        ...

    async def release_call_leases(self, owner: str) -> None:
        """A process handing its calls off (shutdown): another may take them at once."""
        ...

    async def bind_call_browser(self, call_id: str, browser_hash: str) -> bool:
        """Bind the call's link to a browser unless it is bound already; True when bound to this one."""
        ...

    # chats
    async def create_chat(self, chat: ChatRecord) -> None: ...
    async def get_chat(self, chat_id: str) -> ChatRecord | None: ...
    async def open_chat_for_user(self, user_id: int) -> ChatRecord | None: ...
    async def idle_chats(self, last_message_before: float) -> list[ChatRecord]: ...
    async def end_chat(self, chat_id: str, at: float) -> bool: ...

    # turns
    async def call_turns(self, call_id: str) -> list[TurnRecord]: ...
    async def call_tail(self, call_id: str, limit: int) -> list[TurnRecord]: ...
    async def count_call_turns(self, call_id: str) -> int: ...
    async def chat_turns(self, chat_id: str) -> list[TurnRecord]: ...
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
    ) -> bool:
        """Apply one merge result atomically (all or nothing). False, writing nothing, when the memory fence
        refuses it (see `memory_generation`). With `expected_version` (the call's `turns_version` when its turns
        were read), raise TurnsChanged, writing nothing, when another writer (perhaps another process) came first.
        `live_key` (live recall's turn key) is remembered in the same transaction: a line and its key are stored
        together or not at all."""
        ...

    async def append_chat_turn(
        self,
        chat_id: str,
        user_id: int,
        role: str,
        content: str,
        at: float,
        *,
        generation: int | None = None,
        specifics: int | None = None,
    ) -> int | None:
        """The new turn's id, or None when the memory fence refuses the write. ``specifics``: of the plain text,
        when the caller counted it (see ``bot.store.specifics.stored_specifics``)."""
        ...

    async def memory_generation(self, user_id: int) -> int:
        """The member's memory generation. A writer reads it before it starts reading what it will write and
        passes it to the write: every forget and every pause bumps it, so a write that started before one of
        them is refused inside its own transaction. The write is also refused while memory is paused or when
        its call or chat is gone or private."""
        ...

    async def call_memory_state(self, call_id: str) -> CallMemoryState | None:
        """The call (``get_call``) with its member's memory generation, pause flag and ``memory_stamp``, in one
        round trip; None when there is no such call."""
        ...

    async def memory_stamp(self, user_id: int) -> tuple[int, int]:
        """(memory version, memory generation) of the member. The version changes with every change to what
        their memory holds (lines, facts, summaries, a call ending or turning private), by any writer, except
        the lines of a call still open; the generation with every forget and pause. What was read while both
        stayed the same is still current (``bot.memory.index``)."""
        ...

    async def search_turns(
        self, user_id: int, query: str, limit: int, *, exclude_call_id: str | None = None
    ) -> list[TurnRecord]: ...
    async def rank_turns(
        self, user_id: int, query: str, limit: int, *, exclude_call_id: str | None = None
    ) -> list[tuple[TurnRecord, float]]: ...
    async def recent_turns_of(
        self, user_id: int, limit: int, *, exclude_call_id: str | None = None, before: float | None = None
    ) -> list[TurnRecord]: ...
    async def turns_at(self, positions: Sequence[tuple[str, int]]) -> list[TurnRecord]: ...
    async def conversation_lengths(self, refs: Sequence[str]) -> dict[str, int]:
        """How many positions each conversation (a call's or a chat's id) has: its last line's seq plus one."""
        ...

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
    ) -> LiveWrite:
        """Store one line of a running call as live recall sees it, atomically and in one round trip where the
        backend can: unless ``turn_key`` was stored before (SEEN), read the call's last ``tail`` lines, ask
        ``plan`` what to write (again with every line when it needs them), and write that with the key (WRITTEN),
        or only the key when there is nothing new (UNCHANGED). REFUSED, writing nothing, when the memory fence
        refuses it (see `memory_generation`). Nothing else writes the call's turns meanwhile."""
        ...

    async def count_turns(self, user_id: int, *, outside_call_id: str | None = None) -> int: ...

    async def latest_summaries(self, user_id: int, limit: int) -> list[ConversationSummary]: ...
    async def list_conversations(
        self, user_id: int, *, offset: int = 0, limit: int = 10
    ) -> list[ConversationSummary]: ...
    async def count_conversations(self, user_id: int) -> int: ...


class FactStore(Protocol):
    # facts and summaries
    async def get_fact(self, fact_id: int) -> FactRecord | None: ...
    async def list_facts(
        self,
        user_id: int,
        *,
        include_superseded: bool = False,
        superseded_only: bool = False,
        offset: int = 0,
        limit: int = 100,
    ) -> list[FactRecord]: ...

    async def count_facts(self, user_id: int, *, include_superseded: bool = False) -> int: ...
    async def search_facts(self, user_id: int, query: str, limit: int) -> list[FactRecord]: ...
    async def rank_facts(self, user_id: int, query: str, limit: int) -> list[tuple[FactRecord, float]]: ...
    async def facts_from(self, convo: Conversation) -> list[FactRecord]: ...
    async def add_told_fact(
        self,
        user_id: int,
        text: str,
        at: float,
        *,
        convo: Conversation | None = None,
        supersedes: Sequence[int] = (),
        generation: int | None = None,
    ) -> int | None:
        """Store a fact in the member's own words (``told``), said in ``convo`` when given, superseding their
        current facts ``supersedes`` (ids that are not theirs are ignored), in one transaction behind the memory
        fence; None (nothing written) when a forget or pause since ``generation`` fences it out."""
        ...

    # post-call extraction results
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
    ) -> int | None:
        """Write one conversation's facts and summary and finish its job, all in one transaction.

        `new_facts` are (text, ids of the user's current facts it supersedes); `confirmed` are ids of the user's
        current facts mentioned again. Ids that are not this user's current facts are ignored. Nothing is written
        (but the job is finished) when the conversation is gone or private, or the user's memory is paused.
        Returns the number of facts sourced from the conversation, or None, writing nothing, when this claim
        (`attempt`) no longer holds the job (it finished, or its lease ran out and another worker took it)."""
        ...


class PrivacyStore(Protocol):
    # forgetting, export, retention
    async def forget_fact(
        self,
        user_id: int,
        fact_id: int,
        *,
        turn_ids: Sequence[int] = (),
        summaries: Sequence[Conversation] = (),
    ) -> FactRecord | None:
        """Delete the member's fact and, in the same transaction, their lines ``turn_ids`` and the summaries of
        the conversations ``summaries`` that repeat it; None (nothing deleted) when the fact is not theirs."""
        ...

    async def forget_call(self, user_id: int, call_id: str) -> ForgetResult | None: ...
    async def forget_chat(self, user_id: int, chat_id: str) -> ForgetResult | None: ...
    async def forget_preview(self, convo: Conversation) -> ForgetResult:
        """What forgetting ``convo`` would delete (its lines, the facts that came only from it), deleting nothing:
        counts only, for the member to confirm first."""
        ...

    async def begin_forget(self, user_id: int) -> int:
        """The first step of forgetting everything of the member, committed on its own: their generation moves
        (fencing off writes in flight) and the forget is recorded as under way, which refuses every write of
        their memory until ``forget_user(begun=...)`` ends it. Returns the generation it set (``begun``)."""
        ...

    async def forget_user(self, user_id: int, *, begun: int | None = None) -> ForgetResult:
        """Deletes every row of the member in one transaction and moves their generation; with ``begun`` (what
        ``begin_forget`` returned), ends that forget, unless another one has begun since."""
        ...

    async def interrupted_forgets(self) -> list[int]:
        """The members whose forget of everything has begun and not ended (a process killed part-way, or one
        still under way), in order."""
        ...

    async def scrub(self) -> bool:
        """Remove residue of deleted text from indexes, free pages and the write-ahead log. False when it could
        not complete yet (another connection holds a read transaction); the pending scrub stays recorded."""
        ...

    async def pending_scrub(self) -> bool:
        """Whether deleted text still waits for a complete scrub (recorded in the deleting transaction)."""
        ...

    async def export_user(self, user_id: int) -> dict[str, Any]: ...
    async def purge_transcripts(self, *, guild_id: int | None, older_than: float) -> int: ...


class JobStore(Protocol):
    """The durable post-call queue, webhook de-duplication and small key/value state."""

    # durable post-call queue
    async def enqueue_job(self, kind: str, ref_id: str, at: float, *, not_before: float = 0.0) -> bool: ...
    async def expedite_job(self, kind: str, ref_id: str, at: float) -> bool:
        """Make a pending job due at ``at`` if it was due later; True when it was."""
        ...

    async def claim_job(self, at: float, lease_seconds: float) -> Job | None: ...
    async def finish_job(self, job_id: int, at: float) -> None: ...
    async def fail_job(self, job_id: int, at: float, error: str, *, retry_at: float | None) -> None: ...
    async def job_state(self, kind: str, ref_id: str) -> str | None: ...
    async def job_queue(self) -> tuple[int, float | None]: ...

    # webhook de-duplication and small key/value state
    async def notice_seen(self, notice_id: str) -> bool: ...
    async def remember_notice(self, notice_id: str, at: float) -> bool: ...
    async def get_meta(self, key: str) -> str | None: ...
    async def set_meta(self, key: str, value: str) -> None: ...


class CallStepStore(Protocol):
    """The call lifecycle's steps that would otherwise take several round trips each: one trip to the database
    apiece (one statement on PostgreSQL). Under a burst of calls every round trip queues behind the others'
    (the SQLite thread, the PostgreSQL pool), so these keep a start and a hang-up short."""

    async def call_start_check(self, user_id: int, guild_id: int | None, since: float) -> CallStartCheck:
        """The server's settings (defaults for ``guild_id=None``, as for a direct message), the member (None
        when unknown), their open call's id, their calls in this server since ``since`` that did not fail, the
        open calls of every member, and for a member who chose to be remembered their prepared greeting and
        whether they have lines or current facts remembered."""
        ...

    async def call_and_generation(self, call_id: str) -> tuple[CallRecord, int] | None:
        """The call's row and its member's memory generation (`memory_generation`) read together: a checkpoint's
        first step, the generation fencing the history read that follows; None for an unknown call."""
        ...

    async def begin_call_ending(
        self, call_id: str, from_states: Sequence[CallState], **fields: Any
    ) -> tuple[CallRecord, int] | None:
        """`transition_call` to 'ending' that also returns the call's row as it now stands and the member's
        memory generation read after the transition (the fence of the final history read that follows); None
        when the call was not in ``from_states``."""
        ...

    async def end_call(
        self,
        call_id: str,
        *,
        ended_at: float,
        agent_stop_pending: bool,
        post_call_job: str | None = None,
        not_before: float = 0.0,
    ) -> CallEnd:
        """Move an 'ending' call to 'ended', count its turns and, when it is this caller's to end and holds
        turns, queue ``post_call_job`` for it (if given) due at ``not_before``: all or nothing."""
        ...


class CallStartStore(Protocol):
    """What a call start's memory block reads, in one trip to the database (one statement on PostgreSQL): it is
    built while the member waits for the agent to answer."""

    async def call_start_memory(self, user_id: int, *, facts: int, lines: int) -> tuple[list[FactRecord], RecentLines]:
        """The member's first ``facts`` current facts in ``list_facts`` order, and their latest ``lines`` lines
        (newest by ``spoken_at``, then ``seq``, then id), oldest first, with their text."""
        ...


class Store(
    StoreLifecycle,
    AccountStore,
    GuildSettingsStore,
    ConversationStore,
    CallStepStore,
    CallStartStore,
    FactStore,
    PrivacyStore,
    JobStore,
    VectorStore,
    GreetingStore,
    Protocol,
):
    """Every aggregate: what a backend implements and what the composition root holds. A service declares only
    the narrow protocols it uses."""


class Backend(Store, Protocol):
    """A database behind `Store`, with what only the encrypting layer in front of it (``bot.keys.encrypted``)
    calls."""

    async def reseal_texts(self, reseal: Callable[[int, str, str], Awaitable[str | None]]) -> int:
        """Replace every member text ``(user_id, column, value)`` for which ``reseal`` gives a new value (encrypts
        a database from before encryption in place); how many were replaced."""
        ...

    async def count_specifics(self, count: Callable[[int, str], Awaitable[int | None]]) -> int:
        """Fill in the specifics of lines stored without them with ``count(user_id, content)``; how many."""
        ...

    def search_hashed_terms(self) -> None:
        """From now on queries carry keyed hashes of terms, not words."""
        ...
