"""Answers that call the agent's own tools and the bot's memory tools at once.

Agora's engine offers a custom LLM the tools of the agent's MCP servers and runs the calls the LLM streams back,
then asks again with their results (specs/agora-convoai.md §13.1). When the model calls one of those and one of
the memory tools in the same answer, the bot carries out its own calls and relays only the engine's, ending with
``finish_reason: "tool_calls"``, so the engine runs its part. The engine's follow-up request repeats the answer as
the engine saw it: an assistant message with the engine's calls and their results. The model must see its whole
answer there, so the bot puts its own calls back into that message, with their results after the engine's, in that
request and in every later one of the call that still holds it.

Kept in this process only, for the call's life (a bounded number of calls and of answers each): a follow-up that
another bot process answers shows the model the engine's calls alone, still a request every server accepts.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

CALLS_KEPT = 1000
"""Calls whose mixed answers a process keeps (the least recently used are dropped first)."""
ANSWERS_KEPT = 8
"""Mixed answers kept per call: the agent's short-term memory holds only its recent messages."""


@dataclass(frozen=True)
class _Ours:
    their_ids: frozenset[str]
    called: list[dict[str, Any]]
    """Our calls, as the assistant message lists them."""
    results: list[dict[str, Any]]
    """The ``tool`` messages answering them."""
    rounds: int
    """The rounds the answer had before this one."""
    generation: int
    """The member's memory generation then: after a forget (or a pause) the results, which may quote what was
    forgotten, are no longer put back."""


class EngineAnswers:
    def __init__(self, *, calls_kept: int = CALLS_KEPT) -> None:
        self._calls: OrderedDict[str, list[_Ours]] = OrderedDict()
        self._calls_kept = calls_kept

    def holds(self, call_id: str) -> bool:
        return call_id in self._calls

    def keep(
        self,
        call_id: str,
        their_ids: list[str],
        called: list[dict[str, Any]],
        results: list[dict[str, Any]],
        rounds: int,
        generation: int,
    ) -> None:
        """An answer of the call that called the engine's tools (``their_ids``) beside ours (``called``, answered
        by ``results``)."""
        answers = self._calls.setdefault(call_id, [])
        answers.append(_Ours(frozenset(their_ids), called, results, rounds, generation))
        del answers[:-ANSWERS_KEPT]
        self._calls.move_to_end(call_id)
        while len(self._calls) > self._calls_kept:
            self._calls.popitem(last=False)

    def spliced(
        self, call_id: str, messages: list[dict[str, Any]], generation: int
    ) -> tuple[list[dict[str, Any]], int]:
        """``messages`` with our calls put back into each kept answer they hold, and the rounds already had by the
        answer this request continues (0 when it starts a new one: the member spoke since). ``generation``: the
        member's memory generation now; answers kept before it moved are dropped."""
        kept = [ours for ours in self._calls.get(call_id, ()) if ours.generation == generation]
        if not kept:
            self._calls.pop(call_id, None)
            return messages, 0
        self._calls[call_id] = kept
        spliced = list(messages)
        rounds = 0
        for ours in kept:
            at = _answer_at(spliced, ours.their_ids)
            if at is None:
                continue
            end = at + 1
            while end < len(spliced) and spliced[end].get("role") == "tool":
                end += 1
            answer = spliced[at]
            spliced[at] = {**answer, "tool_calls": [*answer["tool_calls"], *ours.called]}
            spliced[end:end] = ours.results
            if end + len(ours.results) == len(spliced):
                rounds = ours.rounds + 1
        return spliced, rounds


def _answer_at(messages: list[dict[str, Any]], their_ids: frozenset[str]) -> int | None:
    """Where the assistant message that made the engine's calls ``their_ids`` is, if still held."""
    for at, message in enumerate(messages):
        calls = message.get("tool_calls")
        if message.get("role") == "assistant" and isinstance(calls, list):
            if any(isinstance(c, dict) and c.get("id") in their_ids for c in calls):
                return at
    return None
