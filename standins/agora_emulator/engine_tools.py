"""The engine as an MCP client (spec §13.1): the tools of an agent's MCP servers offered to its custom LLM, the tool
calls streamed back assembled from their pieces, and the calls the engine runs before it asks again.

Spec §13.1: "With `advanced_features.enable_tools: true` and `llm.mcp_servers` in the join body, the engine is the
MCP client: it offers the MCP servers' tools to the LLM as `tools` in each chat-completions request [...] and runs
the `tool_calls` the LLM streams back, then asks again with the results as `role: "tool"` messages." A custom LLM
must "relay calls to the engine's tools unchanged, with `finish_reason: "tool_calls"`".

The emulator reaches no MCP server: a test serves a server's tools with :meth:`EngineTools.serve_mcp_tools`, keyed by
the server's ``endpoint``. Choices where the spec is silent (◇): a tool is offered under its own name (how MCP tool
names are formed is not documented), filtered by the server's ``allowed_tools`` when given; the engine runs an
answer's calls only when every call names one of its tools and the answer ended with ``finish_reason:
"tool_calls"`` (otherwise it runs none and speaks the answer's text, if any); it asks again at most
``MAX_TOOL_ROUNDS`` times per utterance; a call whose arguments are not a JSON object gets an error result.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from standins.agora_emulator.agents import EmulatedAgent

MAX_TOOL_ROUNDS = 5
ToolResult = str | Callable[[dict[str, Any]], str]


@dataclass(frozen=True)
class EngineTool:
    """One tool an MCP server offers: what the engine tells the LLM, and what running it returns."""

    name: str
    result: ToolResult
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def as_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": dict(self.parameters)},
        }

    def run(self, arguments: dict[str, Any]) -> str:
        return self.result(arguments) if callable(self.result) else self.result


@dataclass(frozen=True)
class ToolCall:
    """One tool call of a streamed answer, assembled from its ``delta.tool_calls`` pieces."""

    id: str
    name: str
    arguments: str

    def as_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class ToolRun:
    """A tool call the engine ran: which agent's, what it was asked and what the tool returned."""

    agent_id: str
    call: ToolCall
    result: str


class ToolCallPieces:
    """The ``delta.tool_calls`` pieces of one streamed answer, by ``index``: the id and name come once, the
    arguments in pieces (OpenAI's streaming format)."""

    def __init__(self) -> None:
        self._calls: dict[int, dict[str, str]] = {}

    def add(self, pieces: Sequence[Mapping[str, Any]]) -> None:
        for piece in pieces:
            call = self._calls.setdefault(int(piece["index"]), {"id": "", "name": "", "arguments": ""})
            function = piece.get("function") or {}
            call["id"] = piece.get("id") or call["id"]
            call["name"] = function.get("name") or call["name"]
            call["arguments"] += function.get("arguments") or ""

    def calls(self) -> tuple[ToolCall, ...]:
        return tuple(ToolCall(c["id"], c["name"], c["arguments"]) for _, c in sorted(self._calls.items()))


def pieces_problem(pieces: Any) -> str | None:
    """Why a chunk's ``delta.tool_calls`` is not OpenAI's shape, or None."""
    if not isinstance(pieces, list):
        return "a chunk whose delta tool_calls is not a list"
    for piece in pieces:
        if not isinstance(piece, dict) or not isinstance(piece.get("index"), int):
            return "a tool call piece without an integer index"
        function = piece.get("function", {})
        if not isinstance(function, dict) or not isinstance(function.get("arguments", ""), str):
            return "a tool call piece whose function arguments are not a string"
    return None


class EngineTools:
    """The emulator's MCP side: the tools it serves per MCP endpoint and the calls it ran."""

    def _init_engine_tools(self) -> None:
        self.mcp_tools: dict[str, list[EngineTool]] = {}
        """The tools each MCP server offers, by its ``endpoint``."""
        self.tool_runs: list[ToolRun] = []
        """Every tool call the engine ran, in order."""

    def serve_mcp_tools(self, endpoint: str, tools: Sequence[EngineTool]) -> None:
        """The MCP server at ``endpoint`` offers ``tools`` (to agents joined with it in ``llm.mcp_servers``)."""
        self.mcp_tools[endpoint] = list(tools)

    def engine_tools(self, agent: EmulatedAgent) -> dict[str, EngineTool]:
        """The tools the engine offers ``agent``'s LLM, by name: none unless the agent was joined with
        ``advanced_features.enable_tools: true`` and ``llm.mcp_servers``."""
        features = agent.properties.get("advanced_features") or {}
        if features.get("enable_tools") is not True:
            return {}
        offered: dict[str, EngineTool] = {}
        for server in agent.llm.get("mcp_servers") or []:
            allowed = server.get("allowed_tools")
            for tool in self.mcp_tools.get(str(server.get("endpoint")), []):
                if allowed is None or tool.name in allowed:
                    offered.setdefault(tool.name, tool)
        return offered

    def run_tool_calls(self, agent: EmulatedAgent, calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
        """Run ``calls`` (each names one of the agent's engine tools): the assistant message that made them and one
        ``role: "tool"`` message per result, as the engine's next request carries them."""
        tools = self.engine_tools(agent)
        messages: list[dict[str, Any]] = [
            {"role": "assistant", "content": None, "tool_calls": [call.as_openai() for call in calls]}
        ]
        for call in calls:
            try:
                arguments = json.loads(call.arguments or "{}")
            except ValueError:
                arguments = None
            if isinstance(arguments, dict):
                result = tools[call.name].run(arguments)
            else:
                result = json.dumps({"error": "the arguments are not a JSON object"})
            self.tool_runs.append(ToolRun(agent.agent_id, call, result))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        return messages
