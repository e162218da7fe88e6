"""The memory tools the voice agent's model is offered in live recall: remember, correct and forget.

The bot is the agent's LLM, so it adds these OpenAI tool definitions to the upstream request (beside any tools the
agent sent), takes the model's calls of them out of the stream the agent hears, carries them out on the member's
memory (``bot.memory.own_words``: only the member of the call, whatever the words say), and asks the model again
with the results, relaying its spoken answer. Tools are offered only while the call's memory is on: not on a
private call, not while memory is paused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from bot.memory.own_words import Act, OwnWords
from bot.store.models import Conversation

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


def offered(agent_tools: object) -> list[Any]:
    """The agent's own tools, then ours (an agent tool of the same name keeps its name: ours is left out)."""
    theirs = list(agent_tools) if isinstance(agent_tools, list) else []
    taken = {t.get("function", {}).get("name") for t in theirs if isinstance(t, dict)}
    return [*theirs, *(t for t in MEMORY_TOOLS if t["function"]["name"] not in taken)]


@dataclass
class _Call:
    id: str
    name: str
    arguments: str = ""


@dataclass
class ToolCalls:
    """The model's calls of the memory tools in one streamed answer, gathered from its chunks."""

    calls: dict[int, _Call] = field(default_factory=dict)

    @property
    def pending(self) -> bool:
        return bool(self.calls)

    def take(self, chunk: dict[str, Any]) -> bool:
        """Gather what ``chunk`` holds of our tools' calls; True when the chunk is only that (or the end of a
        turn that called them) and must not reach the agent."""
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return False
        choice = choices[0]
        delta = choice.get("delta")
        parts = delta.get("tool_calls") if isinstance(delta, dict) else None
        ours = False
        if isinstance(parts, list) and parts:
            ours = True
            for part in parts:
                index = part.get("index") if isinstance(part, dict) else None
                function = part.get("function") if isinstance(part, dict) else None
                function = function if isinstance(function, dict) else {}
                name = function.get("name")
                if isinstance(index, int) and index not in self.calls and name in NAMES:
                    self.calls[index] = _Call(str(part.get("id") or f"call_{index}"), str(name))
                call = self.calls.get(index) if isinstance(index, int) else None
                if call is None:
                    ours = False
                    continue
                arguments = function.get("arguments")
                if isinstance(arguments, str):
                    call.arguments += arguments
            if isinstance(delta, dict) and delta.get("content"):
                ours = False
        if choice.get("finish_reason") == "tool_calls" and self.calls:
            return True
        return ours

    def assistant_message(self, said: str) -> dict[str, Any]:
        """The model's turn that called the tools, as the follow-up request must repeat it."""
        return {
            "role": "assistant",
            "content": said or None,
            "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments or "{}"}}
                for _, c in sorted(self.calls.items())
            ],
        }


MAX_ROUNDS = 2
"""How many times one answer asks the model again after it called the memory tools; the last time it may not."""


@dataclass
class ToolTurn:
    """One answer to a member whose model is offered the memory tools: the request as sent (its ``messages`` grow
    by each round of calls and their results), the calls of the round being streamed, and who they act for."""

    own_words: OwnWords
    user_id: int
    convo: Conversation
    generation: int
    request: dict[str, Any]
    calls: ToolCalls = field(default_factory=ToolCalls)
    rounds: int = 0

    async def ask_again(self, said: str) -> dict[str, Any]:
        """Carry out the calls the model just made (``said``: its text before them), for this member only, and
        return the request that asks it again with their results; after the last round it may call no more."""
        called = self.calls.assistant_message(said)
        results = await carry_out(self.calls, self.own_words, self.user_id, self.convo, self.generation)
        self.rounds += 1
        self.request["messages"] = [*self.request["messages"], called, *results]
        if self.rounds >= MAX_ROUNDS:
            self.request["tool_choice"] = "none"
        return self.request


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
    try:
        arguments = json.loads(call.arguments or "{}")
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        return Act("empty")
    text = {key: value for key, value in arguments.items() if isinstance(value, str)}
    if call.name == REMEMBER:
        return await own_words.remember(user_id, text.get("fact", ""), convo=convo, generation=generation)
    if call.name == CORRECT:
        return await own_words.correct(
            user_id, text.get("wrong", ""), text.get("right", ""), convo=convo, generation=generation
        )
    return await own_words.forget(user_id, text.get("fact", ""))


INSTRUCTIONS = {
    "remembered": "Saved. Tell the user briefly that you will remember it.",
    "corrected": "Saved. Tell the user briefly that you have corrected it.",
    "forgotten": "Forgotten for good. Tell the user briefly that it is forgotten.",
    "unclear": "Nothing was changed: several remembered facts could be meant. Ask the user which one.",
    "not_found": "Nothing like that is remembered. Tell the user so; nothing was changed.",
    "refused": "Memory is off for this conversation, so nothing was saved. Tell the user.",
    "empty": "Nothing was given to save or change. Ask the user what they meant.",
    "too_many": "Not done: too many changes at once. Ask the user to say them one at a time.",
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
