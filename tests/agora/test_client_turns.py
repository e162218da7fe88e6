"""`ConvoAIClient.turns`: how many turns a session had, and how many the member started by speaking."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from bot.agora import AgoraNotFound, AgoraUnavailable, ConvoAIClient, TurnCounts
from standins.agora_emulator import AgoraEmulator
from tests.agora.conftest import RecordedSleeps
from tests.agora.test_client import mock_client, start_agent


async def stopped_agent_with(client: ConvoAIClient, emulator: AgoraEmulator, answered: int) -> str:
    """An agent that greeted, heard ``answered`` answered voice inputs and one typed message, then idled out."""
    agent_id = await start_agent(client, emulator)
    emulator.user_joined(agent_id)
    emulator.script(agent_id, [(role, f"{role} {i}") for i in range(answered) for role in ("user", "assistant")])
    emulator.say(agent_id, "user", "typed, not spoken", source="message")
    emulator.say(agent_id, "assistant", "Got it.")
    emulator.user_left(agent_id)
    emulator.advance(31)
    return agent_id


async def test_turns_counts_the_members_voice_inputs_of_a_stopped_agent(
    convoai_client: ConvoAIClient, agora_emulator: AgoraEmulator
) -> None:
    agent_id = await stopped_agent_with(convoai_client, agora_emulator, answered=4)
    counts = await convoai_client.turns(agent_id)
    assert counts == TurnCounts(agent_id=agent_id, total=5, voice_inputs=4, complete=True)
    assert agora_emulator.count_calls("turns") == 1


async def test_turns_asks_for_the_largest_page_and_follows_pages_only_when_there_are_more(
    convoai_client: ConvoAIClient, agora_emulator: AgoraEmulator
) -> None:
    agent_id = await stopped_agent_with(convoai_client, agora_emulator, answered=450)
    counts = await convoai_client.turns(agent_id)
    assert (counts.total, counts.voice_inputs, counts.complete) == (451, 450, True)
    asked = [r.path for r in agora_emulator.requests if r.path.endswith("/turns")]
    assert len(asked) == 3


async def test_turns_reads_page_index_and_page_size_as_documented() -> None:
    seen: list[dict[str, list[str]]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        query = parse_qs(urlsplit(str(request.url)).query)
        seen.append(query)
        page = int(query["page_index"][0])
        voice = {"start": {"type": "voice_input"}, "end": {"type": "ok"}}
        ignored = {"start": {"type": "voice_input"}, "end": {"type": "ignored", "metadata": {"caused_by": "semantic"}}}
        body = {
            "agent_id": "A1",
            "total_turn_count": 4,
            "pagination": {"page_index": page, "total_pages": 2, "is_last_page": page == 2},
            "turns": [voice, {"start": {"type": "greeting"}}] if page == 1 else [ignored, voice],
        }
        return httpx.Response(200, content=json.dumps(body))

    async with mock_client(handler) as client:
        counts = await client.turns("A1")
    assert seen == [
        {"page_index": ["1"], "page_size": ["200"]},
        {"page_index": ["2"], "page_size": ["200"]},
    ]
    assert counts == TurnCounts(agent_id="A1", total=4, voice_inputs=2, complete=True)


async def test_turns_of_an_unknown_agent_is_not_found(convoai_client: ConvoAIClient) -> None:
    with pytest.raises(AgoraNotFound):
        await convoai_client.turns("NOSUCHAGENT")


async def test_turns_retries_503_like_every_get_then_gives_up(
    convoai_client: ConvoAIClient, agora_emulator: AgoraEmulator, recorded_sleeps: RecordedSleeps
) -> None:
    agent_id = await stopped_agent_with(convoai_client, agora_emulator, answered=1)
    agora_emulator.fail_next(2, 503, operation="turns")
    assert (await convoai_client.turns(agent_id)).voice_inputs == 1
    assert len(recorded_sleeps.delays) == 2
    agora_emulator.fail_next(10, 503, operation="turns")
    with pytest.raises(AgoraUnavailable):
        await convoai_client.turns(agent_id)
