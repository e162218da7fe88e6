"""``/turns`` (spec §4.10): the agent's conversation cut into the turns ConvoAI reports, each with how it started,
how it ended and its latencies (the rules are in the package docstring)."""

from __future__ import annotations

from typing import Any

from standins.agora_emulator.agents import EmulatedAgent, Message

_TURN_STARTS = {
    ("assistant", "greeting"): "greeting",
    ("user", "asr"): "voice_input",
    ("assistant", "silence"): "silence_timeout",
}
_SPEECH_MS_PER_CHAR = 60
_LATENCIES_MS = {"voice_input": (("asr_ttlw", 310), ("llm_ttft", 420), ("tts_ttfb", 95)), "other": (("tts_ttfb", 95),)}


def session_turns(agent: EmulatedAgent) -> list[dict[str, Any]]:
    """The agent's ended turns as ``/turns`` lists them (see the package docstring), numbered from 1."""
    spans: list[tuple[str, Message, list[Message]]] = []  # (start type, the starting message, its replies)
    current: list[Message] | None = None
    for message in agent.conversation:
        kind = _TURN_STARTS.get((message.role, message.source))
        if kind is not None:
            current = []
            spans.append((kind, message, current))
        elif message.role == "assistant" and current is not None:
            current.append(message)
        elif message.role == "user":
            current = None  # typed text or a think injection: no listed turn, nor its reply
    turns: list[dict[str, Any]] = []
    greetings = 0
    for index, (kind, first, replies) in enumerate(spans):
        following = spans[index + 1][1] if index + 1 < len(spans) else None
        spoken = replies[-1] if replies else (first if kind != "voice_input" else None)
        if following is None and spoken is None and agent.is_active:
            break  # the member spoke and the reply is still to come
        end = _turn_end(agent, spoken, following)
        start_metadata: dict[str, Any]
        if kind == "greeting":
            greetings += 1
            start_metadata = {"greeting_nth": greetings}
        elif kind == "voice_input":
            start_metadata = {
                "speech_duration_ms": len(first.content) * _SPEECH_MS_PER_CHAR,
                "interrupt_duration_ms": 160,
            }
        else:
            start_metadata = {"action": "speak"}
        segments = _LATENCIES_MS["voice_input" if kind == "voice_input" else "other"]
        turns.append(
            {
                "agent_id": agent.agent_id,
                "channel": agent.channel,
                "turn_id": len(turns) + 1,
                "start": {"start_at": first.timestamp_ms, "type": kind, "metadata": start_metadata},
                "end": end,
                "metrics": {
                    "e2e_latency_ms": sum(latency for _name, latency in segments),
                    "segmented_latency_ms": [{"name": name, "latency": latency} for name, latency in segments],
                },
            }
        )
    return turns


def _turn_end(agent: EmulatedAgent, spoken: Message | None, following: Message | None) -> dict[str, Any]:
    if spoken is None:
        if following is not None:
            return {
                "end_at": following.timestamp_ms,
                "type": "interrupted",
                "metadata": {"caused_by": "start_of_speech"},
            }
        return {"end_at": (agent.stop_ts or 0) * 1000, "type": "interrupted", "metadata": {"caused_by": "api_leave"}}
    if spoken.source == "llm_failure":
        return {
            "end_at": spoken.timestamp_ms,
            "type": "error",
            "metadata": {"reason": "LLM_REQUEST_ERR", "details": "the LLM request failed"},
        }
    if spoken.interrupted:
        at = spoken.interrupt_timestamp_ms or spoken.timestamp_ms
        return {"end_at": at, "type": "interrupted", "metadata": {"caused_by": "start_of_speech"}}
    playback = len(spoken.content) * _SPEECH_MS_PER_CHAR
    end_at = spoken.timestamp_ms + playback
    if following is not None:
        end_at = min(end_at, max(following.timestamp_ms, spoken.timestamp_ms))
    return {"end_at": end_at, "type": "ok", "metadata": {"playback_duration_ms": playback}}
