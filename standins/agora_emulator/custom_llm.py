"""The agent's side of a custom LLM (``llm.url``): a user utterance becomes a chat-completions request built from the
short-term memory as ConvoAI builds it (spec §4.11), and the streamed answer is read as a strict client would."""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Literal

import aiohttp

from standins.agora_emulator.agents import LLMTurn, Message
from standins.agora_emulator.engine_tools import (
    MAX_TOOL_ROUNDS,
    EngineTool,
    EngineTools,
    ToolCallPieces,
    pieces_problem,
)


class CustomLLMClient(EngineTools):
    """What the emulator's agents send to their custom LLM, and how they take its answer."""

    def _init_custom_llm(self) -> None:
        self._init_engine_tools()
        self._llm_session: aiohttp.ClientSession | None = None
        self.llm_timeout = 15.0
        self.llm_context: dict[str, Any] | None = None
        """Sent as the top-level ``context`` of custom-LLM requests when set (DOCS-CLLM's request model)."""

    async def _close_llm_session(self) -> None:
        if self._llm_session is not None:
            await self._llm_session.close()
            self._llm_session = None

    async def user_says(
        self,
        agent_id: str,
        text: str,
        *,
        interrupt_after: int | None = None,
        heard: str | None = None,
        source: Literal["asr", "message"] = "asr",
    ) -> LLMTurn:
        """The user says ``text`` to an agent with a custom LLM (``source="message"``: sends it as text): see the
        module docstring. With ``interrupt_after``, ``heard`` is what was spoken of the reply before the user cut
        in (default: every delta received but the last, which was still queued for speech)."""
        agent = self._active_agent(agent_id)
        url = agent.llm.get("url")
        if not url:
            raise ValueError(f"agent {agent_id} has no llm.url: its LLM is an Agora preset")
        message = self._append(agent, "user", text, source)
        message.user = agent.remote_rtc_uids[0] if agent.remote_rtc_uids else None
        custom = agent.llm.get("vendor") == "custom"
        body: dict[str, Any] = {
            **agent.llm_params,
            "messages": [*agent.system_messages, *(m.as_llm_message(custom=custom) for m in agent.window())],
            "stream": True,
        }
        if custom:
            body.update(
                turn_id=message.turn_id,
                timestamp=message.timestamp_ms,
                interruptable=True,
                model=str(agent.llm_params.get("model", "")),
            )
            if self.llm_context is not None:
                body["context"] = copy.deepcopy(self.llm_context)
        engine_tools = self.engine_tools(agent)
        if engine_tools:
            body["tools"] = [*(body.get("tools") or []), *(tool.as_openai() for tool in engine_tools.values())]
        headers = {"Content-Type": "application/json", **dict(agent.llm.get("headers") or {})}
        if agent.llm.get("api_key"):
            headers["Authorization"] = f"Bearer {agent.llm['api_key']}"
        turn = await self.post_llm_request(url, body, headers, interrupt_after=interrupt_after)
        agent.llm_turns.append(turn)
        for rounds in range(MAX_TOOL_ROUNDS + 1):
            if not (engine_tools and runs_engine_calls(turn, engine_tools)):
                break
            if rounds == MAX_TOOL_ROUNDS:
                turn = replace(turn, outcome="failed", error=f"still calling tools after {MAX_TOOL_ROUNDS} rounds")
                break
            body = {**body, "messages": [*body["messages"], *self.run_tool_calls(agent, turn.tool_calls)]}
            turn = await self.post_llm_request(url, body, headers, interrupt_after=interrupt_after)
            agent.llm_turns.append(turn)
        if turn.outcome == "failed":
            self._append(agent, "assistant", str(agent.llm.get("failure_message") or ""), "llm_failure")
        elif turn.outcome == "interrupted":
            spoken = heard if heard is not None else "".join(turn.deltas[:-1])
            reply = self._append(agent, "assistant", turn.reply, "llm")
            self._cut(reply, spoken)
        elif turn.kind != "tool_calls":  # an answer of tool calls alone has nothing to speak
            self._append(agent, "assistant", turn.reply, "llm")
        return turn

    def silence_reminder(self, agent_id: str, text: str) -> Message:
        """The user stayed silent and the agent spoke a reminder (``parameters.silence_config``): an assistant
        message with source ``silence``."""
        return self._append(self._active_agent(agent_id), "assistant", text, "silence")

    async def resend_llm_request(self, agent_id: str) -> LLMTurn:
        """Send the agent's latest LLM request again unchanged (ConvoAI retrying a turn); history is untouched."""
        agent = self.agent(agent_id)
        if not agent.llm_turns:
            raise ValueError(f"agent {agent_id} has sent no LLM request yet")
        last = agent.llm_turns[-1]
        return await self.post_llm_request(str(agent.llm["url"]), last.request, last.headers)

    async def post_llm_request(
        self, url: str, body: dict[str, Any], headers: dict[str, str], *, interrupt_after: int | None = None
    ) -> LLMTurn:
        """POST one chat-completions request and read the SSE answer as a strict client would."""
        if self._llm_session is None:
            self._llm_session = aiohttp.ClientSession()
        started = time.monotonic()
        status: int | None = None
        parts: list[str] = []
        pieces = ToolCallPieces()
        finish_reason: str | None = None

        def ended(outcome: Literal["ok", "interrupted", "failed"], error: str | None = None) -> LLMTurn:
            seconds = time.monotonic() - started
            text = "".join(parts)
            return LLMTurn(
                body, headers, outcome, status, text, error, seconds, tuple(parts), pieces.calls(), finish_reason
            )

        try:
            async with asyncio.timeout(self.llm_timeout):
                async with self._llm_session.post(url, json=body, headers=headers) as response:
                    status = response.status
                    if status != 200:
                        return ended("failed", f"HTTP {status}: {(await response.text())[:300]}")
                    kind = response.headers.get("Content-Type", "")
                    if not kind.startswith("text/event-stream"):
                        return ended("failed", f"not an event stream: {kind!r}")
                    deltas = 0
                    data_lines: list[str] = []
                    async for raw_line in response.content:
                        line = raw_line.decode("utf-8").rstrip("\r\n")
                        if line.startswith(":"):
                            continue
                        if line:
                            if not line.startswith("data:"):
                                return ended("failed", f"unexpected SSE line {line[:80]!r}")
                            data_lines.append(line[5:].lstrip(" "))
                            continue
                        if not data_lines:
                            continue
                        data, data_lines = "\n".join(data_lines), []
                        if data == "[DONE]":
                            return ended("ok")
                        problem = chunk_problem(data)
                        if problem is not None:
                            return ended("failed", problem)
                        choices = json.loads(data)["choices"]
                        if choices and choices[0].get("delta", {}).get("tool_calls"):
                            pieces.add(choices[0]["delta"]["tool_calls"])
                        if choices and choices[0].get("finish_reason"):
                            finish_reason = choices[0]["finish_reason"]
                        delta = choices[0].get("delta", {}).get("content") if choices else None
                        if delta:
                            parts.append(delta)
                            deltas += 1
                            if interrupt_after is not None and deltas >= interrupt_after:
                                response.close()  # the user spoke over the agent: stop listening at once
                                return ended("interrupted")
                    return ended("failed", "the stream ended without data: [DONE]")
        except TimeoutError:
            return ended("failed", f"no complete answer within {self.llm_timeout:g} s")
        except aiohttp.ClientError as exc:
            return ended("failed", f"{type(exc).__name__}: {exc}")


def chunk_problem(data: str) -> str | None:
    """Why one streamed chunk is not a valid chat.completion.chunk, or None (strict-client check)."""
    try:
        chunk = json.loads(data)
    except ValueError:
        return f"a chunk that is not JSON: {data[:80]!r}"
    if not isinstance(chunk, dict):
        return "a chunk that is not a JSON object"
    if "error" in chunk:
        return f"the LLM reported an error: {str(chunk['error'])[:200]}"
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return "a chunk without a choices list"
    for choice in choices:
        if not isinstance(choice, dict) or not isinstance(choice.get("delta", {}), dict):
            return "a chunk with a malformed choice"
        content = choice.get("delta", {}).get("content")
        if content is not None and not isinstance(content, str):
            return "a chunk whose delta content is not a string"
        tool_calls = choice.get("delta", {}).get("tool_calls")
        if tool_calls is not None and (problem := pieces_problem(tool_calls)) is not None:
            return problem
    return None


def runs_engine_calls(turn: LLMTurn, engine_tools: Mapping[str, EngineTool]) -> bool:
    """Whether the engine runs the answer's tool calls: it ended asking for them (``finish_reason:
    "tool_calls"``) and every one names a tool the engine offered (spec §13.1 (b))."""
    return (
        turn.outcome == "ok"
        and bool(turn.tool_calls)
        and turn.finish_reason == "tool_calls"
        and all(call.name in engine_tools for call in turn.tool_calls)
    )
