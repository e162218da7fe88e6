"""The memory tools the voice agent's model is offered in live recall: remember, correct and forget.

The bot is the agent's LLM, so it adds these OpenAI tool definitions to the upstream request (beside any tools the
agent sent), takes the model's calls of them out of the stream the agent hears, carries them out on the member's
memory (``bot.memory.own_words``: only the member of the call, whatever the words say), and asks the model again
with the results, relaying its spoken answer. Tools are offered only while the call's memory is on: not on a
private call, not while memory is paused.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from bot.memory.own_words import Act, OwnWords
from bot.store.models import Conversation

log = logging.getLogger(__name__)

REMEMBER, CORRECT, FORGET = "remember", "correct", "forget"
MAX_CALLS = 4
"""Calls carried out per answer of the model: a member asks for one or two things at a time; more is a model
looping or words steering it, and the rest are answered as not done."""


FACT_FOR_THE_USER = (
    "One short statement written to the user, as it will be shown to them: in the second person and in the language "
    "you are speaking with them (for example 'Your daughter's birthday is 4 May.', 'Tu hija cumple años el 4 de "
    "mayo.')."
)
"""How a remembered fact is written, as extraction writes them (``bot.memory.extraction``)."""


def _tool(name: str, description: str, properties: dict[str, str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {key: {"type": "string", "description": text} for key, text in properties.items()},
                "required": list(properties),
                "additionalProperties": False,
            },
        },
    }


MEMORY_TOOLS = [
    _tool(
        REMEMBER,
        "Save something the user explicitly asks you to remember about them (for example 'remember that my "
        "daughter's birthday is 4 May'). Only for what the user asks you to remember.",
        {"fact": FACT_FOR_THE_USER},
    ),
    _tool(
        CORRECT,
        "The user says something you remember about them is wrong or has changed (for example 'that's wrong, I "
        "moved to Leeds').",
        {
            "wrong": "The remembered fact that is wrong, as it appears in your notes.",
            "right": f"The correct fact. {FACT_FOR_THE_USER}",
        },
    ),
    _tool(
        FORGET,
        "Forget one remembered fact the user clearly names (for example 'forget what I told you about my ex'). If "
        "it is not clear which fact they mean, ask them instead of calling this.",
        {"fact": "The remembered fact to forget, as it appears in your notes."},
    ),
]
NAMES = frozenset({REMEMBER, CORRECT, FORGET})


def offered(agent_tools: object) -> tuple[list[Any], frozenset[str]]:
    """The agent's own tools, then ours (an agent tool of the same name keeps its name: ours is left out), and the
    names of ours that were added: the calls the bot claims. Every other call is the agent's (Agora's engine runs
    the tools of its MCP servers) and reaches it as the model streamed it."""
    theirs = list(agent_tools) if isinstance(agent_tools, list) else []
    taken = {t.get("function", {}).get("name") for t in theirs if isinstance(t, dict)}
    added = [t for t in MEMORY_TOOLS if t["function"]["name"] not in taken]
    return [*theirs, *added], frozenset(t["function"]["name"] for t in added)


@dataclass
class _Call:
    id: str
    name: str
    arguments: str = ""


RELAY: Final = "relay"
DROP: Final = "drop"
Taken = Literal["relay", "drop"] | dict[str, Any]
"""What becomes of one streamed chunk: relayed as it came, dropped (only our calls), or relayed as this chunk (the
agent's part of it)."""


@dataclass
class ToolCalls:
    """The model's tool calls in one streamed answer, gathered from its chunks: the calls of the tools the bot
    added (``ours``), carried out here, and the agent's (``theirs``), relayed to it unchanged but for their
    ``index``, which counts only the agent's calls."""

    ours: frozenset[str] = NAMES
    calls: dict[int, _Call] = field(default_factory=dict)
    theirs: dict[int, int] = field(default_factory=dict)
    """The model's index of each of the agent's calls, and the index it is relayed with."""
    their_ids: list[str] = field(default_factory=list)
    last_round: bool = False
    """The calls of this answer will not be carried out (the bound of rounds is reached): an answer of only
    those ends as one that stopped."""

    @property
    def pending(self) -> bool:
        return bool(self.calls)

    def take(self, chunk: dict[str, Any]) -> Taken:
        """Gather what ``chunk`` holds of the model's calls; what to relay of it (see ``Taken``)."""
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return RELAY
        choice = choices[0]
        delta = choice.get("delta")
        parts = delta.get("tool_calls") if isinstance(delta, dict) else None
        kept: list[Any] | None = None
        if isinstance(delta, dict) and isinstance(parts, list) and parts:
            kept = self._gather(parts)
        finish = choice.get("finish_reason")
        relayed_finish = finish
        if finish == "tool_calls" and self.calls and not self.theirs:
            relayed_finish = "stop" if self.last_round else None
        if kept is None and relayed_finish == finish:
            return RELAY
        rest = {k: v for k, v in (delta if isinstance(delta, dict) else {}).items() if k != "tool_calls"}
        if kept:
            rest["tool_calls"] = kept
        if relayed_finish is None and not any(v for k, v in rest.items() if k != "role"):
            return DROP
        return {**chunk, "choices": [{**choice, "delta": rest, "finish_reason": relayed_finish}, *choices[1:]]}

    def _gather(self, parts: list[Any]) -> list[Any] | None:
        """The agent's parts of one chunk's ``tool_calls``, or None when they are all the agent's as they came."""
        kept: list[Any] = []
        changed = False
        for part in parts:
            index = part.get("index") if isinstance(part, dict) else None
            function = part.get("function") if isinstance(part, dict) else None
            function = function if isinstance(function, dict) else {}
            if isinstance(index, int) and index not in self.calls and index not in self.theirs:
                name = function.get("name")
                if name in self.ours:
                    self.calls[index] = _Call(str(part.get("id") or f"call_{index}"), str(name))
                elif isinstance(name, str):
                    self.theirs[index] = len(self.theirs)
                    self.their_ids.append(str(part.get("id")))
            call = self.calls.get(index) if isinstance(index, int) else None
            if call is not None:
                arguments = function.get("arguments")
                if isinstance(arguments, str):
                    call.arguments += arguments
                changed = True
                continue
            relayed = self.theirs.get(index) if isinstance(index, int) else None
            if relayed is not None and relayed != index:
                part = {**part, "index": relayed}
                changed = True
            kept.append(part)
        return kept if changed else None

    def called(self) -> list[dict[str, Any]]:
        """Our calls as the assistant message that made them lists them."""
        return [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments or "{}"}}
            for _, c in sorted(self.calls.items())
        ]

    def assistant_message(self, said: str) -> dict[str, Any]:
        """The model's turn that called the tools, as the follow-up request must repeat it."""
        return {"role": "assistant", "content": said or None, "tool_calls": self.called()}


MAX_ROUNDS = 2
"""How many times one answer asks the model again after it called the memory tools; the last time it may not."""


@dataclass
class ToolTurn:
    """One answer to a member whose model is offered the memory tools: the request as sent (its ``messages`` grow
    by each round of calls and their results), the calls of the round being streamed, and who they act for.
    ``rounds``: the rounds this answer already had (an answer the agent's engine continues after running its own
    tools goes on counting from where it was)."""

    own_words: OwnWords
    user_id: int
    convo: Conversation
    generation: int
    request: dict[str, Any]
    calls: ToolCalls = field(default_factory=ToolCalls)
    rounds: int = 0

    def __post_init__(self) -> None:
        self.calls.last_round = self.rounds >= MAX_ROUNDS

    @property
    def asks_again(self) -> bool:
        """The model called only our tools and may still be asked again with their results. Past the last round
        its calls are never carried out, whatever it was told (``drop``)."""
        return self.calls.pending and not self.calls.theirs and self.rounds < MAX_ROUNDS

    def drop(self) -> None:
        """The calls of this round are not carried out: the bound of rounds is reached."""
        self.calls.calls.clear()

    async def ask_again(self, said: str) -> dict[str, Any]:
        """Carry out the calls the model just made (``said``: its text before them), for this member only, and
        return the request that asks it again with their results; after the last round it may call no more."""
        called = self.calls.assistant_message(said)
        results = await self.carry_out()
        self.rounds += 1
        self.calls.last_round = self.rounds >= MAX_ROUNDS
        self.request["messages"] = [*self.request["messages"], called, *results]
        if self.calls.last_round:
            self.request["tool_choice"] = "none"
        return self.request

    async def carry_out(self) -> list[dict[str, Any]]:
        """The calls of this round carried out for the member (when it is not past the last one); the ``tool``
        messages that answer them, in order."""
        if self.calls.last_round:
            self.drop()
            return []
        return await carry_out(self.calls, self.own_words, self.user_id, self.convo, self.generation)


async def carry_out(
    calls: ToolCalls, own_words: OwnWords, user_id: int, convo: Conversation, generation: int
) -> list[dict[str, Any]]:
    """Each call carried out for the call's member; the ``tool`` messages that answer them, in order."""
    results = []
    for done, (_, call) in enumerate(sorted(calls.calls.items())):
        act = await _run(call, own_words, user_id, convo, generation) if done < MAX_CALLS else Act("too_many")
        results.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(_said(act))})
    calls.calls.clear()
    return results


async def _run(call: _Call, own_words: OwnWords, user_id: int, convo: Conversation, generation: int) -> Act:
    """One call carried out: arguments that are not an object of texts any store can hold are a tool error the
    model can answer from (``unreadable``), and so is a failure of the memory itself (``failed``, logged)."""
    try:
        arguments = json.loads(call.arguments or "{}")
    except ValueError:
        arguments = None
    except RecursionError:  # nested deeper than the parser goes
        return Act("unreadable")
    if not isinstance(arguments, dict):
        return Act("empty")
    text = {key: value for key, value in arguments.items() if isinstance(value, str)}
    if not all(_storable(value) for value in text.values()):
        return Act("unreadable")
    try:
        if call.name == REMEMBER:
            return await own_words.remember(user_id, text.get("fact", ""), convo=convo, generation=generation)
        if call.name == CORRECT:
            return await own_words.correct(
                user_id, text.get("wrong", ""), text.get("right", ""), convo=convo, generation=generation
            )
        return await own_words.forget(user_id, text.get("fact", ""))
    except Exception:
        log.exception("the memory tool %s failed for a member; the model is told nothing was changed", call.name)
        return Act("failed")


def _storable(text: str) -> bool:
    """Text every store holds: UTF-8 (no lone surrogate, which JSON can spell as "\\ud800") without NUL, which
    PostgreSQL's text refuses."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


INSTRUCTIONS = {
    "remembered": "Saved. Tell the user briefly that you will remember it.",
    "corrected": "Saved. Tell the user briefly that you have corrected it.",
    "forgotten": "Forgotten for good. Tell the user briefly that it is forgotten.",
    "unclear": "Nothing was changed: several remembered facts could be meant. Ask the user which one.",
    "not_found": "Nothing like that is remembered. Tell the user so; nothing was changed.",
    "refused": "Memory is off for this conversation, so nothing was saved. Tell the user.",
    "empty": "Nothing was given to save or change. Ask the user what they meant.",
    "too_many": "Not done: too many changes at once. Ask the user to say them one at a time.",
    "unreadable": "Nothing was changed: the request could not be read. Ask the user to say it again.",
    "failed": "Nothing was changed: memory could not be reached just now. Tell the user to try again later.",
}


def _said(act: Act) -> dict[str, Any]:
    result: dict[str, Any] = {"status": act.outcome, "instruction": INSTRUCTIONS[act.outcome]}
    if act.fact is not None:
        result["fact"] = act.fact
    if act.replaced is not None:
        result["replaced"] = act.replaced
    if act.close:
        result["candidates"] = act.close
    return result
