"""What OpenAI's Chat Completions API refuses, refused the same way: unknown fields, malformed messages (per role),
tool answers without their call, numbers out of range, response formats."""

from __future__ import annotations

from typing import Any

from standins.llm_server.errors import FakeLLMRequestError

VALID_ROLES = frozenset({"system", "user", "assistant", "tool"})
RESPONSE_FORMAT_TYPES = frozenset({"text", "json_object", "json_schema"})


KNOWN_CHAT_FIELDS = frozenset(
    {
        "model", "messages", "temperature", "top_p", "max_tokens", "max_completion_tokens", "stream",
        "stream_options", "response_format", "tools", "tool_choice", "parallel_tool_calls", "n", "stop",
        "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "seed", "user",
        "metadata", "store", "modalities", "audio", "prediction", "reasoning_effort", "service_tier",
    }
)  # fmt: skip


MESSAGE_FIELDS = {
    "system": frozenset({"role", "content", "name"}),
    "developer": frozenset({"role", "content", "name"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset({"role", "content", "name", "tool_calls", "function_call", "refusal", "audio"}),
    "tool": frozenset({"role", "content", "tool_call_id"}),
}
"""The fields of each message type of OpenAI's Chat Completions request (``ChatCompletionMessageParam``)."""


def validate_chat(body: dict[str, Any], *, reject_response_format: bool, tolerate_message_extras: bool = False) -> None:
    for name in body:
        if name not in KNOWN_CHAT_FIELDS:
            # What OpenAI answers for a field it does not know (e.g. ConvoAI's turn_id passed on as is).
            raise FakeLLMRequestError(400, f"Unrecognized request argument supplied: {name}", param=name)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise FakeLLMRequestError(400, "you must provide a model parameter", param="model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise FakeLLMRequestError(400, "'messages' must be a non-empty array of message objects", param="messages")
    for index, message in enumerate(messages):
        _validate_message(index, message, tolerate_extras=tolerate_message_extras)
    _validate_tool_answers(messages)
    _validate_number(body, "temperature", 0.0, 2.0)
    _validate_number(body, "top_p", 0.0, 1.0)
    max_tokens = body.get("max_tokens")
    if max_tokens is not None and (type(max_tokens) is not int or max_tokens < 1):
        raise FakeLLMRequestError(
            400, f"Invalid 'max_tokens': expected an integer >= 1, got {max_tokens!r}", param="max_tokens"
        )
    if "stream" in body and not isinstance(body["stream"], bool):
        raise FakeLLMRequestError(400, "Invalid 'stream': expected a boolean", param="stream")
    if "response_format" in body:
        _validate_response_format(body, reject_response_format)


def _validate_message(index: int, message: Any, *, tolerate_extras: bool = False) -> None:
    if not isinstance(message, dict):
        raise FakeLLMRequestError(400, f"Invalid 'messages[{index}]': expected an object", param=f"messages[{index}]")
    role = message.get("role")
    if role not in VALID_ROLES:
        raise FakeLLMRequestError(
            400,
            f"Invalid value for 'messages[{index}].role': {role!r}. Supported values are: "
            "'system', 'user', 'assistant' and 'tool'.",
            param=f"messages[{index}].role",
        )
    extras = sorted(set(message) - MESSAGE_FIELDS[role])
    if extras and not tolerate_extras:
        # What OpenAI's schema validation answers for a field a message type does not have (e.g. ConvoAI's
        # turn_id, timestamp or metadata passed on as is).
        raise FakeLLMRequestError(
            400,
            f"Additional properties are not allowed ({extras[0]!r} was unexpected) - 'messages.{index}'",
            param=f"messages.[{index}]",
        )
    content = message.get("content")
    if isinstance(content, list) and content and all(_is_text_part(part) for part in content):
        return  # OpenAI's content-part array (text parts)
    if content is None and role == "assistant" and message.get("tool_calls"):
        return
    if not isinstance(content, str):
        raise FakeLLMRequestError(
            400,
            f"Invalid type for 'messages[{index}].content': expected a string, "
            f"got {type(message.get('content')).__name__}",
            param=f"messages[{index}].content",
        )


def _validate_tool_answers(messages: list[dict[str, Any]]) -> None:
    """As OpenAI does: a ``tool`` message answers a call of the assistant message just before the run of tool
    messages it is in, and every such call is answered."""
    open_calls: set[str] = set()
    for index, message in enumerate(messages):
        if message["role"] == "tool":
            if message.get("tool_call_id") not in open_calls:
                raise FakeLLMRequestError(
                    400,
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with "
                    "'tool_calls'.",
                    param=f"messages.[{index}].role",
                )
            open_calls.discard(message["tool_call_id"])
            continue
        if open_calls:
            raise FakeLLMRequestError(
                400,
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                f"'tool_call_id'. The following tool_call_ids did not have response messages: {sorted(open_calls)}",
                param="messages",
            )
        calls = message.get("tool_calls") if message["role"] == "assistant" else None
        open_calls = {c.get("id") for c in calls if isinstance(c, dict)} if isinstance(calls, list) else set()
    if open_calls:
        raise FakeLLMRequestError(
            400,
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            f"'tool_call_id'. The following tool_call_ids did not have response messages: {sorted(open_calls)}",
            param="messages",
        )


def _is_text_part(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)


def _validate_number(body: dict[str, Any], name: str, low: float, high: float) -> None:
    if name not in body:
        return
    value = body[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise FakeLLMRequestError(
            400, f"Invalid '{name}': {value!r} is not a number between {low:g} and {high:g}", param=name
        )


def _validate_response_format(body: dict[str, Any], reject: bool) -> None:
    if reject:
        raise FakeLLMRequestError(
            400, "Unrecognized request argument supplied: response_format", param="response_format"
        )
    response_format = body["response_format"]
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind not in RESPONSE_FORMAT_TYPES:
        raise FakeLLMRequestError(400, f"Invalid 'response_format.type': {kind!r}", param="response_format.type")
    # The real API refuses JSON mode unless the prompt itself mentions JSON.
    if kind == "json_object" and not any("json" in m["content"].lower() for m in body["messages"]):
        raise FakeLLMRequestError(
            400,
            "'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'.",
            param="messages",
        )
