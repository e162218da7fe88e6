"""Plain records that cross the store boundary. Times are Unix seconds (float, UTC)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

CallState = Literal["starting", "active", "ending", "ended", "failed"]
OPEN_CALL_STATES: tuple[CallState, ...] = ("starting", "active", "ending")
EndReason = Literal[
    "hangup",  # /hangup
    "hangup_button",  # the card's Hang up
    "hangup_page",  # the call page's End call
    "page_closed",  # the call page's tab was closed (its beacon, after the grace)
    "max_duration",  # the call's time limit
    "idle_timeout",  # Agora: nobody in the channel for agora.idle_timeout_seconds
    "agent_lifetime",  # Agora: the agent's task lifetime ran out
    "agent_failed",  # Agora: the agent could not connect, or lost its RTC connection
    "agent_stopped",  # Agora: the agent stopped for another reason, or is gone
    "start_failed",  # the call never started (Agora refused, or the bot restarted meanwhile)
    "duplicate_open_call",  # a second open call of one member, closed by migration 6
    "imported",  # an imported transcript, never a live call
    "ended",  # no reason recorded
]
"""Why a call ended: stored as the call's ``end_reason``, shown by the call page, counted by route in /metrics."""
Role = Literal["user", "assistant"]
Source = Literal["voice", "text"]


@dataclass(frozen=True)
class UserRecord:
    user_id: int
    memory_enabled: bool
    consent: Literal["remember", "no_memory"] | None
    consent_at: float | None
    created_at: float
    language: str | None = None
    """The language the member chose for their calls (`bot.calls.language`); None: their Discord language."""
    locale: str | None = None
    """Their Discord locale as of their last interaction (`bot.memory.locales`); None: none known."""
    personal_greetings: bool = True
    """Whether their calls may open with a greeting of their own (`bot.memory.greeting`); off: the server's."""


def needs_consent(user: UserRecord | None) -> bool:
    """The member has not chosen yet whether the agent may remember them: ask before a remembered call or chat."""
    return user is None or user.consent is None


def remembers(user: UserRecord | None, *, private: bool = False) -> bool:
    """The consent rule, in one place: a conversation is remembered only when it is not private, the member chose
    "remember", and their memory is not paused."""
    return not private and user is not None and user.consent == "remember" and user.memory_enabled


@dataclass(frozen=True)
class GuildSettings:
    """Per-server overrides; None means "use the bot-wide default"."""

    guild_id: int
    calls_enabled: bool = True
    persona: str | None = None
    greeting: str | None = None
    max_call_minutes: int | None = None
    calls_per_member_per_day: int | None = None
    retention_days: int | None = None
    language: str | None = None
    """The language of calls here when a member chose none and Discord's is not one calls can be held in."""
    personal_greetings: bool = True
    """Whether members' calls here may open with a greeting of their own (`bot.memory.greeting`)."""


@dataclass(frozen=True)
class CallRecord:
    call_id: str
    user_id: int
    guild_id: int | None
    channel: str
    agent_name: str
    user_uid: int
    agent_uid: int
    state: CallState
    max_minutes: int
    started_at: float
    private: bool = False
    agent_id: str | None = None
    link_hash: str | None = None
    link_expires_at: float | None = None
    ended_at: float | None = None
    end_reason: EndReason | None = None
    history_anchored: bool = False
    last_checkpoint_at: float | None = None
    owner: str | None = None
    notify_token: str | None = None
    summary: str | None = None
    agent_stop_pending: bool = False
    transcript_purged_at: float | None = None
    browser_hash: str | None = None
    llm_key_hash: str | None = None
    """SHA-256 of the call's key for the bot's LLM route (live recall); the key itself is never stored."""
    lease_until: float | None = None  # `owner` (a bot process) looks after the call until then
    card_message_id: int | None = None  # the member's Discord card (with `notify_token`), editable by any process
    turns_version: int = 0  # counts the writes of the call's turns, so concurrent merges cannot both apply
    lines_lost: int = 0
    """Things the member said that were never stored: counted by Agora's turn analytics after the call's agent
    stopped while no bot process watched it and its history webhook never came (`bot.calls.recovery`)."""
    language: str = "en"
    """The language the call was held in (a code of `bot.calls.language.LANGUAGES`): what its lines were said in."""


@dataclass(frozen=True)
class CallMemoryState:
    """A call's row with its member's memory state, read in one trip: what a live-recall turn reads first (the
    key check, whether and under which generation it may remember, and whether the member's index is current)."""

    call: CallRecord
    generation: int
    """``memory_generation`` of the member"""
    enabled: bool
    """memory not paused (no user row: enabled)"""
    version: int
    """the memory version of ``memory_stamp``"""
    forgotten: bool = False
    """the member forgot everything while the call ran (``calls.forgotten``): nothing said until then is theirs to
    keep"""

    @property
    def stamp(self) -> tuple[int, int]:
        """``memory_stamp`` of the member."""
        return self.version, self.generation


@dataclass(frozen=True)
class PreparedGreeting:
    """A member's next opening line, prepared after their conversations (`bot.memory.greeting`): the name to greet
    them by and one question on their last conversation, with what it drew on (a forget of any of it deletes the
    greeting in the same transaction)."""

    language: str
    """The language ``follow_up`` is in (a code of `bot.calls.language.LANGUAGES`)."""
    prepared_at: float
    name: str | None = None
    """The name the member told or that was learned; None: their Discord display name."""
    follow_up: str | None = None
    """One short question on their last conversation; None: the welcome alone."""
    call_id: str | None = None
    chat_id: str | None = None
    fact_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class CallStartCheck:
    """What starting a call checks, read in one trip: the server's settings, the member, their open call, how
    many calls they started here today and how many calls are open in all."""

    guild: GuildSettings
    user: UserRecord | None
    open_call_id: str | None
    calls_today: int
    open_calls: int
    greeting: PreparedGreeting | None = None
    """The member's prepared greeting, if one is ready."""
    returning: bool = False
    """The member has something to come back to: lines or facts remembered from earlier conversations."""


@dataclass(frozen=True)
class CallEnd:
    """The outcome of `end_call`: whether this caller ended the call, and the turns it holds then."""

    won: bool
    turns: int


@dataclass(frozen=True)
class ChatRecord:
    chat_id: str
    user_id: int
    guild_id: int | None
    private: bool
    started_at: float
    last_message_at: float
    ended_at: float | None = None
    summary: str | None = None


@dataclass(frozen=True)
class TurnRecord:
    turn_id: int
    user_id: int
    call_id: str | None
    chat_id: str | None
    seq: int
    role: Role
    content: str
    spoken_at: float
    source: Source
    segment: int = 0
    partial: bool = False
    captured: int = 0
    specifics: int | None = field(default=None, compare=False, repr=False)
    """``bot.store.specifics`` of the plain text, stored with the line; None for a line not yet counted."""
    interrupted: bool = False
    """A reply the member spoke over: ``content`` is what they heard of it (Agora's ``metadata.interrupted``)."""
    language: str = "en"
    """The language it was said in: its call's (``CallRecord.language``); English for a chat's."""


_TURN_FIELDS = [name for name in TurnRecord.__dataclass_fields__]


class RecentLines:
    """A member's latest lines, oldest first, as the rows the store read (values in ``TurnRecord``'s field order,
    the text as stored: sealed when encrypted). A call start ranks a few hundred lines by their columns (the
    positions below) and makes records, opening their text, only of the few dozen it uses: ``line(at)``, made
    once by ``record``."""

    TURN_ID = _TURN_FIELDS.index("turn_id")
    CALL_ID = _TURN_FIELDS.index("call_id")
    CHAT_ID = _TURN_FIELDS.index("chat_id")
    SEQ = _TURN_FIELDS.index("seq")
    ROLE = _TURN_FIELDS.index("role")
    SPOKEN_AT = _TURN_FIELDS.index("spoken_at")
    SPECIFICS = _TURN_FIELDS.index("specifics")

    def __init__(self, rows: Sequence[Any], record: Callable[[Any], TurnRecord]):
        self.rows = rows
        self._record = record
        self._made: dict[int, TurnRecord] = {}

    def __len__(self) -> int:
        return len(self.rows)

    def line(self, at: int) -> TurnRecord:
        made = self._made.get(at)
        if made is None:
            made = self._made[at] = self._record(self.rows[at])
        return made

    def newest_first(self) -> Iterator[TurnRecord]:
        return (self.line(at) for at in range(len(self.rows) - 1, -1, -1))


@dataclass(frozen=True)
class FactRecord:
    fact_id: int
    user_id: int
    text: str
    source_call_id: str | None
    source_chat_id: str | None
    created_at: float
    updated_at: float
    confirmed_at: float
    mentions: int
    superseded_by: int | None = None
    invalidated_at: float | None = None
    told: bool = False
    """The member asked for it to be remembered in these words (`/remember`, or by voice): kept above what was
    learned from conversations, which never supersedes it."""

    @property
    def current(self) -> bool:
        return self.superseded_by is None and self.invalidated_at is None


@dataclass(frozen=True)
class Conversation:
    """A call or a text chat, by id: the one place that knows where each kind lives (its table, and the column
    that points at it from turns, facts' sources and summaries)."""

    kind: Literal["call", "chat"]
    ref_id: str

    @classmethod
    def of(cls, *, call_id: str | None = None, chat_id: str | None = None) -> Conversation:
        if call_id:
            return cls("call", call_id)
        if chat_id:
            return cls("chat", chat_id)
        raise ValueError("a conversation needs a call_id or a chat_id")

    @classmethod
    def of_turn(cls, turn: TurnRecord) -> Conversation:
        return cls.of(call_id=turn.call_id, chat_id=turn.chat_id)

    @classmethod
    def named(cls, kind: str, ref_id: str) -> Conversation:
        """From a stored kind ("call" or "chat", as ConversationSummary.kind and the forget traces give it)."""
        if kind not in ("call", "chat"):
            raise ValueError(f"unknown conversation kind {kind!r}")
        return cls("call" if kind == "call" else "chat", ref_id)

    @property
    def table(self) -> str:
        return "calls" if self.kind == "call" else "chats"

    @property
    def column(self) -> str:
        return "call_id" if self.kind == "call" else "chat_id"


@dataclass(frozen=True)
class NewTurn:
    role: Role
    content: str
    spoken_at: float
    seq: int
    segment: int = 0
    partial: bool = False
    captured: int = 0
    specifics: int | None = None
    """Of the plain text, when the writer counted it (``bot.store.specifics.stored_specifics``)."""
    interrupted: bool = False
    language: str = "en"
    language_terms: str | None = None
    """Given by the encrypting layer (their keyed hashes, ``bot.store.terms.stored_language_terms``)."""


@dataclass(frozen=True)
class TurnUpdate:
    turn_id: int
    seq: int
    content: str
    segment: int
    partial: bool
    captured: int
    specifics: int | None = None
    interrupted: bool = False
    language: str = "en"
    language_terms: str | None = None


@dataclass(frozen=True)
class TurnsWrite:
    """What one merge writes to a call's turns (see ``ConversationStore.write_live_turn``)."""

    inserts: Sequence[NewTurn]
    updates: Sequence[TurnUpdate]
    anchored: bool


@dataclass(frozen=True)
class ConversationSummary:
    """One call or chat session as /memory lists it."""

    kind: Literal["call", "chat"]
    ref_id: str
    started_at: float
    ended_at: float | None
    turn_count: int
    summary: str | None
    first_lines: list[str] = field(default_factory=list)
    private: bool = False


@dataclass(frozen=True)
class Job:
    job_id: int
    kind: str
    ref_id: str
    attempts: int


@dataclass(frozen=True)
class ForgetResult:
    turns: int = 0
    facts: int = 0
    calls: int = 0
    chats: int = 0
