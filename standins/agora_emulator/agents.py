"""An agent as the emulator keeps it: its join body, status and timestamps, and its conversation, the short-term
memory that ``/history``, NCS 103, ``/turns`` and the custom LLM's requests are built from."""

from __future__ import annotations

import secrets
import string
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from standins.agora_emulator.contract import ACTIVE_STATUSES, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_HISTORY

if TYPE_CHECKING:
    from standins.agora_emulator.engine_tools import ToolCall


@dataclass
class Message:
    role: str
    content: str
    turn_id: int
    timestamp_ms: int
    source: str
    interrupted: bool = False
    original: str | None = None
    user: str | None = None
    """The speaker's RTC uid, for a user message from speech (``metadata.user``)."""
    interrupt_timestamp_ms: int | None = None

    def metadata(self) -> dict[str, Any]:
        """Agora's short-term-memory ``metadata`` (spec §4.11)."""
        metadata: dict[str, Any] = {"source": self.source}
        if self.user is not None:
            metadata["user"] = self.user
        if self.interrupted:
            metadata.update(interrupted=True, interrupt_timestamp=self.interrupt_timestamp_ms, original=self.original)
        return metadata

    def as_llm_message(self, *, custom: bool) -> dict[str, Any]:
        """What a request to ``llm.url`` holds for this message: every short-term-memory field with
        ``llm.vendor = "custom"``, only ``role`` and ``content`` otherwise (DOCS-STM)."""
        if not custom:
            return {"role": self.role, "content": self.content}
        return self.as_history_item()

    def as_history_item(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "content": self.content,
            "turn_id": self.turn_id,
            "timestamp": self.timestamp_ms,
            "metadata": self.metadata(),
        }


@dataclass
class LLMTurn:
    """One utterance sent to a custom LLM: what was sent, how it ended and what the agent kept."""

    request: dict[str, Any]
    headers: dict[str, str]
    outcome: Literal["ok", "interrupted", "failed"]
    status: int | None
    reply: str
    error: str | None = None
    seconds: float = 0.0
    deltas: tuple[str, ...] = ()
    """The content deltas received, in order."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The tool calls the answer streamed, assembled from their pieces (spec §13.1)."""
    finish_reason: str | None = None
    """The last ``finish_reason`` the answer gave (``"tool_calls"`` when it asks the engine to run its calls)."""

    @property
    def kind(self) -> Literal["speech", "tool_calls", "mixed", "empty"]:
        """What the answer is: words to speak, tool calls only (nothing to speak), both, or nothing."""
        if self.tool_calls:
            return "mixed" if self.reply else "tool_calls"
        return "speech" if self.reply else "empty"


@dataclass
class EmulatedAgent:
    """One agent. ``request`` is the join body exactly as received; ``properties`` reflects later updates."""

    agent_id: str
    name: str
    channel: str
    request: dict[str, Any]
    properties: dict[str, Any]
    status: str
    create_ts: int
    start_ts: int
    sequence: int
    stop_ts: int | None = None
    message: str = ""
    conversation: list[Message] = field(default_factory=list)
    user_present: bool = False
    user_left_at: float | None = None
    joins: int = 0
    current_turn: int = 0
    updates: list[dict[str, Any]] = field(default_factory=list)
    spoken: list[dict[str, Any]] = field(default_factory=list)
    thoughts: list[dict[str, Any]] = field(default_factory=list)
    interrupts: int = 0
    token_warning_sent_for: str | None = None
    llm_turns: list[LLMTurn] = field(default_factory=list)

    @property
    def llm(self) -> dict[str, Any]:
        llm = self.properties.get("llm")
        return llm if isinstance(llm, dict) else {}

    @property
    def system_messages(self) -> list[dict[str, Any]]:
        return list(self.llm.get("system_messages") or [])

    @property
    def llm_params(self) -> dict[str, Any]:
        return dict(self.llm.get("params") or {})

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.properties.get("labels") or {})

    @property
    def token(self) -> str:
        return str(self.properties.get("token", ""))

    @property
    def agent_rtc_uid(self) -> str:
        return str(self.properties["agent_rtc_uid"])

    @property
    def remote_rtc_uids(self) -> list[str]:
        return list(self.properties["remote_rtc_uids"])

    @property
    def idle_timeout(self) -> int:
        value = self.properties.get("idle_timeout")
        return DEFAULT_IDLE_TIMEOUT if value is None else int(value)

    @property
    def max_history(self) -> int:
        value = self.llm.get("max_history")
        return DEFAULT_MAX_HISTORY if value is None else int(value)

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    def window(self) -> list[Message]:
        """What ``/history`` (and NCS 103) returns: the last ``max_history`` messages."""
        return self.conversation[-self.max_history :]

    def history_contents(self) -> list[dict[str, Any]]:
        return [message.as_history_item() for message in self.window()]


def random_id(length: int) -> str:
    alphabet = string.ascii_uppercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(length))
