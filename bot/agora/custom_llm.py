"""What Agora's engine sends a custom LLM (``llm.vendor: "custom"``, specs/agora-convoai.md §4.11), read once.

Each message of the request carries Agora's short-term-memory extensions (``turn_id``, ``timestamp``, ``metadata``
with ``source``, ``user``, ``interrupted``, ``interrupt_timestamp``, ``original``) and the top level carries
``turn_id``, ``timestamp``, ``interruptable``, ``model`` and sometimes ``context``. An OpenAI-compatible server
refuses every one of them it does not know (400 "Unrecognized request argument supplied", or "Additional properties
are not allowed" for message fields), so what goes upstream is an allow-list of Chat Completions fields, and
Agora's fields are read here instead:

- ``metadata.source`` says whose words a line is: ``asr`` (speech) and ``message`` (text sent to the agent) are the
  member's; ``greeting``, ``llm``, ``silence`` (a reminder after silence) and ``llm_failure`` (the failure message
  spoken instead of a reply) are the agent's, and stay in the transcript as what the member heard; ``command``
  (an instruction injected through Agora's API) is nobody's words and is not part of the transcript.
- ``metadata.interrupted``: the member spoke over the reply, and ``content`` is what was spoken before that
  (``original`` the whole reply): the transcript keeps what the member heard.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

CHAT_COMPLETIONS_FIELDS = frozenset(
    {
        "model", "messages", "stream", "stream_options", "temperature", "top_p", "max_tokens",
        "max_completion_tokens", "n", "stop", "presence_penalty", "frequency_penalty", "logit_bias", "logprobs",
        "top_logprobs", "seed", "user", "tools", "tool_choice", "parallel_tool_calls", "response_format",
        "modalities", "audio", "prediction", "reasoning_effort", "service_tier", "store", "metadata",
    }
)  # fmt: skip
"""The top-level fields of OpenAI's Chat Completions request: nothing else is forwarded upstream."""
MESSAGE_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id")
"""What a forwarded message of a role OpenAI does not have keeps (the upstream answers it as invalid)."""
ROLE_FIELDS: dict[str, tuple[str, ...]] = {
    "system": ("role", "content", "name"),
    "developer": ("role", "content", "name"),
    "user": ("role", "content", "name"),
    "assistant": ("role", "content", "name", "tool_calls"),
    "tool": ("role", "content", "tool_call_id"),
}
"""What a forwarded message keeps, by role: the fields of OpenAI's message type for that role that Agora's engine
can send (a ``tool`` message has no ``name``, which Agora's reference server sends; spec §13.1)."""
MEMBER_SOURCES = frozenset({"asr", "message"})
"""The sources of a user message that are the member's own words."""
COMMAND_SOURCE = "command"
THINK_INJECTED = "[think API injected]"
"""How an instruction injected through the think API reads in the agent's history (Agora's docs example), where
the history carries no ``metadata``."""

Speaker = Literal["user", "assistant"]


def is_injected(item: Mapping[str, Any]) -> bool:
    """An instruction injected through Agora's API (``command``): nobody said it, so it is no line of the
    transcript. Read from ``metadata.source`` where the item has it (custom-LLM requests), else from the text."""
    metadata = item.get("metadata")
    if isinstance(metadata, Mapping) and metadata.get("source") == COMMAND_SOURCE:
        return True
    content = item.get("content")
    return item.get("role") == "user" and isinstance(content, str) and content.startswith(THINK_INJECTED)


def message_text(content: object) -> str | None:
    """A message's text: a string, or the text parts of OpenAI's content-part array; None for anything else."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            p["text"]
            for p in content
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        ]
        return "\n".join(texts) if texts else None
    return None


@dataclass(frozen=True)
class AgentRequest:
    """One request of the agent, split into what goes upstream and what the transcript and memory use."""

    upstream: dict[str, Any]
    """The request as an OpenAI-compatible server accepts it (the messages still as the agent sent them)."""
    transcript: list[tuple[Speaker, str]]
    """The conversation's spoken lines as the agent holds them, oldest first."""
    heard: frozenset[int]
    """Positions in ``transcript`` of replies the member interrupted: their text is what was spoken."""
    member_spoke_last: bool
    """The request answers the member's own words (not a greeting, a reminder or an injected instruction)."""
    turn_id: object
    lines_at: tuple[int, ...] = ()
    """Where in the request's messages each line of ``transcript`` is."""

    @property
    def utterance(self) -> str:
        """The member's newest words, which this turn's memory is built for."""
        return next((text for role, text in reversed(self.transcript) if role == "user"), "")


def _fields_of(role: object) -> tuple[str, ...]:
    return ROLE_FIELDS.get(role, MESSAGE_FIELDS) if isinstance(role, str) else MESSAGE_FIELDS


def read_request(request: Mapping[str, Any], messages: Sequence[Mapping[str, Any]]) -> AgentRequest:
    """``request``'s fields split as the module docstring says; ``messages`` are its messages (checked by the
    caller to be objects)."""
    upstream = {key: value for key, value in request.items() if key in CHAT_COMPLETIONS_FIELDS}
    upstream["messages"] = [{k: m[k] for k in _fields_of(m.get("role")) if k in m} for m in messages]
    transcript: list[tuple[Speaker, str]] = []
    heard: set[int] = set()
    lines_at: list[int] = []
    member_spoke_last = False
    for at, message in enumerate(messages):
        role = message.get("role")
        if role not in ("user", "assistant"):
            continue
        text = message_text(message.get("content"))
        if text is None:
            continue
        if is_injected(message):
            member_spoke_last = False
            continue
        metadata = message.get("metadata")
        source = metadata.get("source") if isinstance(metadata, Mapping) else None
        if role == "assistant" and isinstance(metadata, Mapping) and metadata.get("interrupted") is True:
            heard.add(len(transcript))
        transcript.append((role, text))
        lines_at.append(at)
        member_spoke_last = role == "user" and (source is None or source in MEMBER_SOURCES)
    turn_id = request.get("turn_id")
    return AgentRequest(upstream, transcript, frozenset(heard), member_spoke_last, turn_id, tuple(lines_at))
