"""A scripted answer that calls the request's tools, streamed as OpenAI streams ``delta.tool_calls``."""

from __future__ import annotations

import json
import time
from typing import Any

from standins.llm_server.errors import FakeLLMRequestError


def tool_call_chunks(
    body: dict[str, Any],
    calls: list[tuple[str, dict[str, Any] | str]],
    say: str,
    number: int,
    *,
    obey_tool_choice: bool = True,
) -> list[dict[str, Any]]:
    """``calls``: each tool's name and arguments (an object, or the arguments' text as the model wrote it).
    ``obey_tool_choice=False``: a model that calls tools though the request says ``tool_choice: "none"``."""
    offered = {t.get("function", {}).get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
    for name, _ in calls:
        if name not in offered or (obey_tool_choice and body.get("tool_choice") == "none"):
            raise FakeLLMRequestError(500, f"FakeLLM: scripted a call of {name!r}, which this request does not offer")

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-fake-{number}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }

    chunks = [chunk({"role": "assistant", "content": say or None})]
    for index, (name, arguments) in enumerate(calls):
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        head = {"index": index, "id": f"call_{number}_{index}", "type": "function"}
        chunks.append(chunk({"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]}))
        for start in range(0, len(text), 7):
            piece = {"index": index, "function": {"arguments": text[start : start + 7]}}
            chunks.append(chunk({"tool_calls": [piece]}))
    chunks.append(chunk({}, "tool_calls"))
    return chunks
