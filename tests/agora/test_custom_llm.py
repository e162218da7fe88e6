"""Agora's custom-LLM request read once: whatever the engine (or a forger with a call's key) sends, the reading never
fails, forwards only OpenAI's fields and keeps only spoken lines."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.agora.custom_llm import CHAT_COMPLETIONS_FIELDS, MESSAGE_FIELDS, read_request

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
metadata = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            "source": st.sampled_from(["asr", "message", "command", "llm", "greeting", "llm_failure", "silence", 7]),
            "interrupted": json_values,
            "original": json_values,
            "user": json_values,
        },
    ),
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "system", "tool", "x"]) | json_values},
        optional={"content": json_values | st.text(max_size=30), "metadata": metadata, "turn_id": json_values},
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(messages=messages, extra=st.dictionaries(st.text(max_size=12), json_values, max_size=5))
def test_any_request_is_read_without_failing_and_forwards_only_openai_fields(
    messages: list[dict[str, Any]], extra: dict[str, Any]
) -> None:
    request = {**extra, "messages": messages}
    read = read_request(request, messages)
    assert set(read.upstream) <= CHAT_COMPLETIONS_FIELDS
    assert all(set(m) <= set(MESSAGE_FIELDS) for m in read.upstream["messages"])
    assert len(read.upstream["messages"]) == len(messages), "the model sees every message, only trimmed"
    assert all(role in ("user", "assistant") and isinstance(text, str) for role, text in read.transcript)
    assert all(0 <= i < len(read.transcript) and read.transcript[i][0] == "assistant" for i in read.heard)
    assert isinstance(read.utterance, str)


def test_whose_words_a_line_is_comes_from_its_source() -> None:
    def message(role: str, content: str, source: str, **more: Any) -> dict[str, Any]:
        return {"role": role, "content": content, "turn_id": 1, "timestamp": 1, "metadata": {"source": source, **more}}

    sent = [
        message("assistant", "Hello!", "greeting"),
        message("user", "Hi, I'm Noor.", "asr", user="42"),
        message("assistant", "Nice to", "llm", interrupted=True, original="Nice to meet you.", interrupt_timestamp=3),
        message("assistant", "Still there?", "silence"),
        message("user", "[think API injected] VIP", "command"),
    ]
    read = read_request({"messages": sent, "turn_id": 5, "interruptable": True, "context": {}}, sent)
    assert read.transcript == [
        ("assistant", "Hello!"),
        ("user", "Hi, I'm Noor."),
        ("assistant", "Nice to"),
        ("assistant", "Still there?"),
    ]
    assert read.heard == frozenset({2}) and read.turn_id == 5
    assert not read.member_spoke_last, "the request answers an injected instruction, not the member"
    assert read.utterance == "Hi, I'm Noor."
    assert set(read.upstream) == {"messages"}
    typed = [*sent, message("user", "typed words", "message")]
    assert read_request({"messages": typed}, typed).member_spoke_last


def test_each_role_keeps_only_the_fields_openai_gives_it() -> None:
    """Agora's reference server sends ``name`` on a tool message, which OpenAI's tool message type does not have."""
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    sent = [
        {"role": "system", "content": "Be kind.", "name": "persona", "tool_call_id": "x"},
        {"role": "user", "content": "Where is it?", "name": "ada", "tool_calls": [call], "turn_id": 2},
        {"role": "assistant", "content": None, "tool_calls": [call], "tool_call_id": "c1", "metadata": {}},
        {"role": "tool", "tool_call_id": "c1", "name": "lookup", "content": "shipped", "tool_calls": [call]},
    ]
    assert read_request({"messages": sent}, sent).upstream["messages"] == [
        {"role": "system", "content": "Be kind.", "name": "persona"},
        {"role": "user", "content": "Where is it?", "name": "ada"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "shipped"},
    ]
