"""What a member forgot while their call ran stays out of what goes upstream.

Agora's agent sends its recent messages with every request (its short-term memory, which the bot cannot change).
After a forget mid-call (``/forget``, a voice forget, or forget everything), the lines it took are still among
them, so each later request would hand the forgotten words to the model again. The route drops them:

- a forgotten fact's lines keep their place in the call with no text (``Store.forget_fact``): the agent's window
  is placed over the call's lines as a merge places it, and the lines that land on an empty one are forgotten;
- after forget everything (``calls.forgotten``) every line the agent held then is forgotten, but the member's
  newest words.

A forget moves the member's generation, which each request reads with its key check, so the call's lines are read
again only when it moved (and on a call's first request in this process). The forgotten messages are remembered
here by role, text and Agora's ``turn_id`` for the rest of the call: in this process's memory only, like the
agent's own history, and never logged.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from bot.agora.custom_llm import AgentRequest, message_text
from bot.memory.merge import forgotten_positions, utterance
from bot.memory.snapshot import storable
from bot.store.models import CallMemoryState, TurnRecord

CALLS_KEPT = 1000
"""Calls whose forgotten messages a process keeps (the least recently used first go, and are read again)."""


class CallLinesStore(Protocol):
    async def call_turns(self, call_id: str) -> list[TurnRecord]: ...


@dataclass(frozen=True)
class _Known:
    generation: int
    keys: frozenset[Hashable]


def _key(message: Mapping[str, Any]) -> Hashable:
    turn_id = message.get("turn_id")
    return (
        message.get("role"),
        message_text(message.get("content")),
        turn_id if isinstance(turn_id, int | str) else None,
    )


class ForgottenLines:
    def __init__(self, store: CallLinesStore, *, calls_kept: int = CALLS_KEPT) -> None:
        self.store = store
        self._calls: OrderedDict[str, _Known] = OrderedDict()
        self._calls_kept = calls_kept

    async def upstream(
        self, state: CallMemoryState, agent: AgentRequest, sent: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        """The upstream messages of ``agent`` (as read from ``sent``, the agent's messages) without the lines
        forgotten while the call ran."""
        messages: list[dict[str, Any]] = agent.upstream["messages"]
        call_id = state.call.call_id
        known = self._calls.get(call_id)
        if known is None or known.generation != state.generation:
            known = await self._learn(state, agent, sent, known)
        else:
            self._calls.move_to_end(call_id)
        if not known.keys:
            return messages
        return [
            m for m, s in zip(messages, sent, strict=True) if s.get("role") == "system" or _key(s) not in known.keys
        ]

    async def _learn(
        self, state: CallMemoryState, agent: AgentRequest, sent: Sequence[Mapping[str, Any]], known: _Known | None
    ) -> _Known:
        keys = set(known.keys) if known is not None else set()
        lines = list(agent.lines_at)
        if state.forgotten:
            forgotten = lines[:-1] if agent.member_spoke_last else lines
        else:
            stored = await self.store.call_turns(state.call.call_id)
            positions = forgotten_positions([utterance(t) for t in stored], storable(agent.transcript))
            forgotten = [lines[p] for p in positions]
        keys.update(_key(sent[at]) for at in forgotten)
        learned = _Known(state.generation, frozenset(keys))
        self._calls[state.call.call_id] = learned
        self._calls.move_to_end(state.call.call_id)
        while len(self._calls) > self._calls_kept:
            self._calls.popitem(last=False)
        return learned
