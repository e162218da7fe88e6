"""Live recall: the bot is the voice agent's LLM. Driven the way Agora drives it: the emulator's agent POSTs each
user utterance to the bot's route with the call's key and reads the stream strictly; the fake LLM is upstream."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import cast

import httpx
import pytest

from bot.agora.custom_llm import read_request
from bot.calls.llm_keys import call_id_of
from bot.llm.client import UpstreamStream
from bot.memory.context import MEMORY_HEADER
from bot.memory.live import LiveTurn
from bot.web.llm_route import LLM_ROUTE
from standins.factories import seed_fact, seed_facts
from standins.harness import CallWorld, call_world, eventually, free_port
from standins.llm_server import FakeLLM

ALICE = 1111
BOB = 2222


@pytest.fixture
def llm(fake_llm: FakeLLM) -> FakeLLM:
    """The upstream of the live-recall ``world`` (tests/memory/conftest.py), by this module's name for it."""
    return fake_llm


async def start(world: CallWorld, user: int = ALICE, *, private: bool = False) -> tuple[str, str]:
    return await world.start_member_call(user, private=private)


def memory_message(request: dict) -> str:
    return "\n".join(m["content"] for m in request["messages"] if m["content"].startswith(MEMORY_HEADER))


async def lines(world: CallWorld, call_id: str) -> list[tuple[str, str]]:
    return await world.call_lines(call_id)


async def test_join_points_the_agent_at_the_bot_with_a_per_call_key(world: CallWorld) -> None:
    call_id, agent_id = await start(world)
    agent = world.emu.agent(agent_id)
    llm = agent.request["properties"]["llm"]
    assert llm["url"] == f"{world.settings.web.public_url}{LLM_ROUTE}" == f"{world.web.url}{LLM_ROUTE}"
    assert (llm["vendor"], llm["style"]) == ("custom", "openai")
    assert "model" not in llm["params"]  # the bot picks the upstream model
    presets = agent.request["preset"].split(",")
    assert not any(p.startswith("openai_gpt") for p in presets), "the managed LLM preset is dropped"
    assert any(p.startswith("deepgram") for p in presets) and any(p.startswith("minimax") for p in presets)

    key = llm["api_key"]
    assert call_id_of(key) == call_id and len(key.split("_", 2)[2]) >= 43  # 32 random bytes, url-safe
    call = await world.store.get_call(call_id)
    assert call is not None and call.llm_key_hash == hashlib.sha256(key.encode()).hexdigest()
    raw = b"".join(p.read_bytes() for p in Path(world.settings.memory.database_path).parent.iterdir() if p.is_file())
    assert key.encode() not in raw, "only the key's hash is stored"

    _other_call, other_agent = await start(world, BOB)
    assert world.emu.agent(other_agent).request["properties"]["llm"]["api_key"] != key


async def test_each_turn_is_stored_at_once_and_the_reply_as_sent(world: CallWorld, llm: FakeLLM) -> None:
    call_id, agent_id = await start(world)
    llm.queue_reply("Nice to meet you, Noor! Chemistry is a great subject.")
    turn = await world.emu.user_says(agent_id, "I'm Noor, I teach chemistry.")
    assert turn.outcome == "ok" and turn.reply == "Nice to meet you, Noor! Chemistry is a great subject."
    greeting = world.emu.agent(agent_id).conversation[0].content
    assert await lines(world, call_id) == [
        ("assistant", greeting),
        ("user", "I'm Noor, I teach chemistry."),
        ("assistant", "Nice to meet you, Noor! Chemistry is a great subject."),
    ]
    upstream = llm.last_request
    assert upstream["model"] == "fake-model" and upstream["stream"] is True
    assert "turn_id" not in upstream and "timestamp" not in upstream  # OpenAI rejects unknown fields
    assert [m["role"] for m in upstream["messages"]][-2:] == ["assistant", "user"]
    assert upstream["messages"][0]["content"] == world.settings.memory.persona

    # ConvoAI retries the same turn: the line is not stored twice; a later checkpoint adds nothing either.
    llm.queue_reply("Nice to meet you, Noor! Chemistry is a great subject.")
    again = await world.emu.resend_llm_request(agent_id)
    assert again.outcome == "ok"
    assert await world.calls.checkpoint(call_id)
    assert len(await lines(world, call_id)) == 3
    assert world.emu.count_calls("history") == 1


async def _seed_old_vet_fact(world: CallWorld) -> None:
    """A fact from an old call, then many later calls whose facts push it out of the call-start snapshot."""
    from standins.factories import make_call

    now = time.time()
    old = make_call(ALICE, state="ended", started_at=now - 300 * 86400)
    await world.store.create_call(old)
    await seed_fact(
        world.store,
        ALICE,
        "Their cat's vet is Dr. Okonkwo-Lindqvist in Maple Street",
        old.started_at,
        call_id=old.call_id,
    )
    for n in range(60):
        later = make_call(ALICE, state="ended", started_at=now - (200 - n) * 86400)
        await world.store.create_call(later)
        hobbies = [
            f"In call {n} they mentioned hobby number {k}: collecting stamps of series {n}-{k}" for k in range(4)
        ]
        await seed_facts(world.store, ALICE, hobbies, later.started_at, call_id=later.call_id)


async def test_an_old_fact_the_snapshot_cannot_hold_reaches_the_llm_when_asked_about(
    world: CallWorld, llm: FakeLLM
) -> None:
    await _seed_old_vet_fact(world)
    _call_id, agent_id = await start(world)
    snapshot = "\n".join(m["content"] for m in world.emu.agent(agent_id).system_messages)
    assert "Okonkwo" not in snapshot and "stamps" in snapshot, "the call-start snapshot is full of later facts"

    llm.queue_reply("Dr. Okonkwo-Lindqvist, at Maple Street.")
    await world.emu.user_says(agent_id, "What was the name of the vet I told you about?")
    assert "Okonkwo-Lindqvist" in memory_message(llm.last_request)

    llm.queue_reply("Sounds like a lovely weekend.")
    await world.emu.user_says(agent_id, "I'm planning a hike in the mountains this weekend.")
    memory = memory_message(llm.last_request)
    assert memory and "Okonkwo" not in memory
    assert "hike in the mountains" not in memory, "lines of the running call are already in the agent's history"
    assert sum(m["content"].startswith(MEMORY_HEADER) for m in llm.last_request["messages"]) == 1


async def test_forged_reused_other_call_and_ended_call_keys_are_refused(world: CallWorld, llm: FakeLLM) -> None:
    first, first_agent = await start(world)
    first_key = world.emu.agent(first_agent).request["properties"]["llm"]["api_key"]
    await world.calls.hang_up(ALICE)
    call_id, agent_id = await start(world)
    key = world.emu.agent(agent_id).request["properties"]["llm"]["api_key"]
    secret = key.split("_", 2)[2]
    body = {"messages": [{"role": "user", "content": "hello"}], "stream": True, "turn_id": 1, "timestamp": 1}
    forged = [
        None,
        "sk-not-ours",
        f"mcl_{call_id}_{'A' * 43}",  # the right call, a made-up secret
        first_key,  # an ended call's key, reused
        f"mcl_{first}_{secret}",  # this call's secret presented for another call
        f"mcl_{call_id}_{first_key.split('_', 2)[2]}",  # another call's secret presented for this call
    ]
    async with httpx.AsyncClient() as http:
        for bad in forged:
            headers = {"Authorization": f"Bearer {bad}"} if bad is not None else {"Authorization": f"Basic {secret}"}
            response = await http.post(f"{world.web.url}{LLM_ROUTE}", json=body, headers=headers)
            assert response.status_code == 401, bad
            error = response.json()["error"]
            assert error["type"] == "invalid_request_error" and error["code"] == "invalid_api_key"
    assert llm.requests == [] and await lines(world, call_id) == []
    assert world.emu.agent(agent_id).llm_turns == []

    await world.calls.hang_up(ALICE)
    async with httpx.AsyncClient() as http:
        response = await http.post(f"{world.web.url}{LLM_ROUTE}", json=body, headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 401, "a key is valid only while its call is active"
    assert llm.requests == []


async def test_a_private_call_is_answered_but_stores_and_reads_nothing(world: CallWorld, llm: FakeLLM) -> None:
    await seed_fact(world.store, ALICE, "Their sister is called Amaranth", time.time() - 86400)
    call_id, agent_id = await start(world, private=True)
    llm.queue_reply("Of course, happy to help.")
    turn = await world.emu.user_says(agent_id, "Can you remind me what my sister is called?")
    assert turn.outcome == "ok" and turn.reply == "Of course, happy to help."
    assert memory_message(llm.last_request) == "" and "Amaranth" not in json.dumps(llm.last_request)
    assert await lines(world, call_id) == []
    assert await world.store.count_turns(ALICE) == 0


async def test_pausing_memory_mid_call_stops_reading_and_storing_at_once(world: CallWorld, llm: FakeLLM) -> None:
    await seed_fact(world.store, ALICE, "Their sister is called Amaranth", time.time() - 86400)
    call_id, agent_id = await start(world)
    llm.queue_reply("Hello!")
    await world.emu.user_says(agent_id, "Hi, tell me about my sister.")
    assert "Amaranth" in memory_message(llm.last_request)
    stored = await lines(world, call_id)
    await world.store.set_memory_enabled(ALICE, False, time.time())
    llm.queue_reply("Sure.")
    turn = await world.emu.user_says(agent_id, "My new phone number ends in 4471.")
    assert turn.outcome == "ok"
    assert memory_message(llm.last_request) == ""
    assert await lines(world, call_id) == stored


async def test_the_agent_interrupting_a_reply_stores_what_was_sent(world: CallWorld, llm: FakeLLM) -> None:
    call_id, agent_id = await start(world)
    full = "Let me tell you a long story about the history of chemistry, starting with alchemy in Egypt and beyond."
    llm.stream_chunk_size = 4
    llm.stream_delay = 0.01
    llm.queue_reply(full)
    turn = await world.emu.user_says(agent_id, "Tell me a story.", interrupt_after=3)
    assert turn.outcome == "interrupted" and turn.reply == full[:12]

    async def reply_stored() -> bool:
        stored = await lines(world, call_id)
        return stored[-1][0] == "assistant"

    await eventually(reply_stored, within=5)
    await world.live.wait_idle()  # type: ignore[union-attr]
    sent = (await lines(world, call_id))[-1][1]
    assert sent.startswith(turn.reply) and len(sent) < len(full), "stored as sent, not as the model wrote it"
    assert llm.streams_finished == 0 or len(sent) == len(full)


async def test_chunks_pass_through_untouched_tool_calls_and_unknown_fields_included(
    world: CallWorld, llm: FakeLLM
) -> None:
    call_id, agent_id = await start(world)
    key = world.emu.agent(agent_id).request["properties"]["llm"]["api_key"]
    chunks = [
        {"id": "c1", "object": "chat.completion.chunk", "x_vendor": {"k": [1, 2]}, "choices": [
            {"index": 0, "delta": {"role": "assistant", "tool_calls": [
                {"index": 0, "id": "t1", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\""}}
            ]}, "finish_reason": None}
        ]},
        {"id": "c1", "object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": {"content": "Let me check."}, "finish_reason": "tool_calls", "logprobs": None}
        ]},
    ]  # fmt: skip
    llm.queue_chunks(chunks)
    body = {"messages": [{"role": "user", "content": "look it up"}], "stream": True, "turn_id": 7, "timestamp": 1}
    async with httpx.AsyncClient() as http:
        response = await http.post(f"{world.web.url}{LLM_ROUTE}", json=body, headers={"Authorization": f"Bearer {key}"})
    expected = b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    assert response.content == expected
    assert (await lines(world, call_id))[-1] == ("assistant", "Let me check.")


class _ArrivedUpstream:
    """An upstream response whose body arrives in the pieces given (``LiveTurn`` reads only these two members)."""

    content_type = "text/event-stream"

    async def aclose(self) -> None:
        return None


async def test_the_events_of_one_read_are_relayed_in_one_piece_and_done_only_after_the_reply_is_stored(
    world: CallWorld,
) -> None:
    call_id, _ = await start(world)
    call = await world.store.get_call(call_id)
    assert call is not None and world.live is not None
    generation = await world.store.memory_generation(ALICE)

    def event(text: str) -> bytes:
        return f"data: {json.dumps({'choices': [{'index': 0, 'delta': {'content': text}}]})}\n\n".encode()

    one, two, three, done = event("The vet "), event("is Dr. "), event("Okafor."), b"data: [DONE]\n\n"

    async def arriving() -> AsyncGenerator[bytes]:
        yield two[7:] + three + done

    chunks = arriving()
    request = read_request({"turn_id": 9}, [{"role": "user", "content": "Who is my vet?"}])
    turn = LiveTurn(
        world.live, call, request, True, generation, cast(UpstreamStream, _ArrivedUpstream()), chunks, one + two[:7]
    )
    relayed = []
    async for piece in turn.events():
        if piece == done:
            assert (await lines(world, call_id))[-1] == ("assistant", "The vet is Dr. Okafor.")
        relayed.append(piece)
    assert relayed == [one, two + three, done], "what arrived together goes out together; nothing is held back"


async def test_the_reply_starts_without_waiting_for_the_line_and_is_stored_after_it(
    world: CallWorld, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent waits for the database neither before the upstream is asked nor before the reply's first bytes:
    with a database slower than the upstream, the reply is already flowing while the line is being written. The
    reply is stored after the line it answers all the same, so the call's lines stay in order."""
    call_id, _ = await start(world)
    assert world.live is not None
    record = world.memory.record_live_turn
    written: list[str] = []

    async def slow_record(call: object, window: list[tuple[str, str]], **kwargs: object) -> bool:
        if window[-1][0] == "user":
            await asyncio.sleep(0.3)
        stored = await record(call, window, **kwargs)  # type: ignore[arg-type]
        written.append(window[-1][0])
        return stored

    monkeypatch.setattr(world.memory, "record_live_turn", slow_record)
    llm.queue_reply("Your vet is Dr. Okafor.")
    state = await world.store.call_memory_state(call_id)
    assert state is not None
    body = {"messages": [{"role": "user", "content": "Who is my vet?"}], "stream": True, "turn_id": 7, "timestamp": 1}
    turn = await world.live.start_turn(state, body)
    events = turn.events()
    first = await anext(events)
    assert b"data: " in first and written == [], "the first bytes of the reply came before the line was written"
    relayed = first + b"".join([piece async for piece in events])
    assert b"Okafor" in relayed and relayed.endswith(b"data: [DONE]\n\n")
    assert written == ["user", "assistant"]
    assert (await lines(world, call_id))[-2:] == [("user", "Who is my vet?"), ("assistant", "Your vet is Dr. Okafor.")]


async def test_a_failing_memory_build_still_stores_the_line(
    world: CallWorld, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The line's write starts once the memory is built; when the build fails, it starts all the same, and the
    agent gets an error in OpenAI's shape (so it says its failure message)."""
    call_id, agent_id = await start(world)
    assert world.live is not None

    async def broken_build(*args: object, **kwargs: object) -> list[dict[str, str]]:
        raise RuntimeError("the index is unreadable")

    monkeypatch.setattr(world.memory.context, "build", broken_build)
    turn = await world.emu.user_says(agent_id, "Who is my vet?")
    await world.live.wait_idle()
    assert turn.outcome == "failed" and turn.status == 500
    stored = await lines(world, call_id)
    assert stored[-1] == ("user", "Who is my vet?") and stored.count(("user", "Who is my vet?")) == 1
    assert llm.requests == []


async def test_bodies_over_one_mib_and_malformed_json_are_refused(world: CallWorld, llm: FakeLLM) -> None:
    call_id, agent_id = await start(world)
    key = world.emu.agent(agent_id).request["properties"]["llm"]["api_key"]
    auth = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient() as http:
        big = json.dumps({"messages": [{"role": "user", "content": "x" * (1024 * 1024)}]})
        too_large = await http.post(f"{world.web.url}{LLM_ROUTE}", content=big, headers=auth)
        malformed = await http.post(f"{world.web.url}{LLM_ROUTE}", content=b"{not json", headers=auth)
        no_messages = await http.post(f"{world.web.url}{LLM_ROUTE}", json={"stream": True}, headers=auth)
        too_deep = await http.post(f"{world.web.url}{LLM_ROUTE}", content=b"[" * 100_000, headers=auth)
        not_an_object = await http.post(f"{world.web.url}{LLM_ROUTE}", content=b"[1, 2]", headers=auth)
    assert too_large.status_code == 413 and "error" in too_large.json()
    assert malformed.status_code == 400 and malformed.json()["error"]["type"] == "invalid_request_error"
    assert too_deep.status_code == 400 and too_deep.json()["error"]["type"] == "invalid_request_error"
    assert not_an_object.status_code == 400 and not_an_object.json()["error"]["type"] == "invalid_request_error"
    assert no_messages.status_code == 400
    assert llm.requests == [] and await lines(world, call_id) == []


async def test_odd_but_valid_and_invalid_messages_get_the_right_answer(world: CallWorld, llm: FakeLLM) -> None:
    """OpenAI's content-part arrays are read as text; a lone surrogate is refused before anything happens; what
    the upstream refuses as invalid is a 400 for the agent, not "unavailable"."""
    call_id, agent_id = await start(world)
    key = world.emu.agent(agent_id).request["properties"]["llm"]["api_key"]
    auth = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    url = f"{world.web.url}{LLM_ROUTE}"
    parts = [{"type": "text", "text": "My cat is"}, {"type": "text", "text": "called Miso."}]
    async with httpx.AsyncClient() as http:
        llm.queue_reply("A lovely name.")
        ok = await http.post(url, json={"messages": [{"role": "user", "content": parts}], "stream": True}, headers=auth)
        assert ok.status_code == 200 and ok.text.endswith("data: [DONE]\n\n")
        surrogate = b'{"messages": [{"role": "user", "content": "hi \\ud800"}], "stream": true}'
        lone = await http.post(url, content=surrogate, headers=auth)
        bad_role = await http.post(
            url, json={"messages": [{"role": "wizard", "content": "abracadabra"}], "stream": True}, headers=auth
        )
    assert lone.status_code == 400 and "Unicode" in lone.json()["error"]["message"]
    assert bad_role.status_code == 400 and bad_role.json()["error"]["code"] == "upstream_refused"
    assert len(llm.requests) == 2, "the lone surrogate never reached the upstream"
    assert await lines(world, call_id) == [("user", "My cat is\ncalled Miso."), ("assistant", "A lovely name.")]


async def test_upstream_failing_once_is_retried_and_twice_is_a_prompt_error(world: CallWorld, llm: FakeLLM) -> None:
    call_id, agent_id = await start(world)
    llm.fail_next(1, 503)
    llm.queue_reply("Back on track.")
    turn = await world.emu.user_says(agent_id, "Are you there?")
    assert turn.outcome == "ok" and turn.reply == "Back on track." and len(llm.requests) == 2

    llm.fail_next(2, 503)
    before = len(llm.requests)
    turn = await world.emu.user_says(agent_id, "Hello again?")
    assert turn.outcome == "failed" and turn.status == 502 and len(llm.requests) - before == 2, "retried once only"
    assert world.emu.agent(agent_id).conversation[-1].source == "llm_failure"
    assert ("user", "Hello again?") in await lines(world, call_id), "the member's line is kept anyway"


async def test_a_slow_upstream_gets_a_prompt_timeout_error(world: CallWorld, llm: FakeLLM) -> None:
    _call_id, agent_id = await start(world)
    llm.latency = 3.0  # longer than llm.timeout_seconds (1 s)
    began = time.monotonic()
    turn = await world.emu.user_says(agent_id, "Are you slow today?")
    assert turn.outcome == "failed" and turn.status == 504
    assert time.monotonic() - began < 2.0, "answered at the timeout, not when the upstream finally answers"
    body = json.loads(turn.error.split(": ", 1)[1])  # type: ignore[union-attr]
    assert body["error"]["code"] == "upstream_timeout"
    llm.latency = 0.0
    llm.queue_reply("Not anymore.")
    assert (await world.emu.user_says(agent_id, "And now?")).outcome == "ok", "the bot stays healthy"


async def test_an_upstream_that_is_down_or_drops_mid_stream_never_leaves_the_agent_hanging(
    tmp_path: Path, llm: FakeLLM
) -> None:
    down = f"http://127.0.0.1:{free_port()}/v1"
    async with call_world(tmp_path, llm_base_url=down, llm={"timeout_seconds": 2.0}) as world:
        call_id, agent_id = await start(world)
        began = time.monotonic()
        turn = await world.emu.user_says(agent_id, "Anyone home?")
        assert turn.outcome == "failed" and turn.status == 502 and time.monotonic() - began < 2.0
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"{world.web.url}/healthz")).status_code == 200

    async with call_world(tmp_path / "b", llm_base_url=llm.base_url, llm={"timeout_seconds": 2.0}) as world:
        call_id, agent_id = await start(world)
        llm.stream_chunk_size = 5
        llm.break_stream_after = 2
        llm.queue_reply("First part, second part, and the rest never arrives.")
        turn = await world.emu.user_says(agent_id, "Tell me something.")
        assert turn.outcome == "failed" and "error" in (turn.error or ""), "an error event, then a clean end"
        assert turn.reply == "First part"
        await world.live.wait_idle()  # type: ignore[union-attr]
        assert (await lines(world, call_id))[-1] == ("user", "Tell me something."), "the broken reply is not kept"
        llm.break_stream_after = None
        llm.queue_reply("All good now.")
        assert (await world.emu.user_says(agent_id, "Again?")).outcome == "ok"
        failure = world.emu.agent(agent_id).llm["failure_message"]
        assert (await lines(world, call_id))[-4:] == [
            ("user", "Tell me something."),
            ("assistant", failure),
            ("user", "Again?"),
            ("assistant", "All good now."),
        ], "the transcript is the agent's: its failure message in place of the broken reply"


async def test_with_live_recall_off_the_join_is_as_before(tmp_path: Path, llm: FakeLLM) -> None:
    async with call_world(tmp_path, llm={"base_url": llm.base_url}, memory={"live_recall": False}) as world:
        assert world.live is None
        await world.store.set_consent(ALICE, True, world.clock())
        started = await world.calls.start(user_id=ALICE, guild_id=1)
        agent = world.emu.agent_by_label("call_id", started.call_id)
        assert "url" not in agent.request["properties"]["llm"] and "openai_gpt_4o_mini" in agent.request["preset"]
        call = await world.store.get_call(started.call_id)
        assert call is not None and call.llm_key_hash is None


async def test_concurrent_turns_of_two_calls_stay_apart(world: CallWorld, llm: FakeLLM) -> None:
    a_call, a_agent = await start(world, ALICE)
    b_call, b_agent = await start(world, BOB)
    llm.set_responder(lambda body: "echo: " + body["messages"][-1]["content"])
    await asyncio.gather(world.emu.user_says(a_agent, "alpha one"), world.emu.user_says(b_agent, "bravo one"))
    assert ("user", "alpha one") in await lines(world, a_call) and ("assistant", "echo: alpha one") in await lines(
        world, a_call
    )
    assert ("user", "bravo one") in await lines(world, b_call) and not any(
        "alpha" in c for _, c in await lines(world, b_call)
    )


async def test_no_request_or_reply_text_is_logged(
    world: CallWorld, llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)  # the bot's level (bot.client.run_bot); aiosqlite's DEBUG lines carry SQL values
    caplog.set_level(logging.DEBUG, logger="bot")
    _call_id, agent_id = await start(world)
    llm.queue_reply("Reply marker zebra-quartz-77.")
    await world.emu.user_says(agent_id, "Utterance marker plum-orbit-42.")
    llm.fail_next(2, 503)
    await world.emu.user_says(agent_id, "Failing marker kiwi-delta-19.")
    llm.break_stream_after = 1
    llm.queue_reply("Broken marker lemon-sigma-55 and more text to stream.")
    await world.emu.user_says(agent_id, "Another marker fig-gamma-31.")
    await world.live.wait_idle()  # type: ignore[union-attr]
    assert caplog.records, "the route does log (status, call id), just never the words"
    for marker in ("zebra-quartz", "plum-orbit", "kiwi-delta", "lemon-sigma", "fig-gamma"):
        assert marker not in caplog.text


async def test_an_unexpected_failure_is_an_openai_shaped_500_and_the_bot_stays_up(
    world: CallWorld, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    _call_id, agent_id = await start(world)

    async def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("a bug")

    monkeypatch.setattr(world.live, "start_turn", broken)
    turn = await world.emu.user_says(agent_id, "Hello?")
    assert turn.outcome == "failed" and turn.status == 500
    assert json.loads((turn.error or "").split(": ", 1)[1])["error"]["type"] == "server_error"
    monkeypatch.undo()
    llm.queue_reply("Fine again.")
    assert (await world.emu.user_says(agent_id, "Hello again?")).outcome == "ok"


async def test_live_writes_a_checkpoint_and_webhook_103_store_each_line_once_in_order(
    world: CallWorld, llm: FakeLLM
) -> None:
    call_id, agent_id = await start(world)
    for n in range(4):
        llm.queue_reply(f"Answer number {n}.")
        assert (await world.emu.user_says(agent_id, f"Question number {n}?")).outcome == "ok"
        if n == 1:
            assert await world.calls.checkpoint(call_id)
    world.emu.say(agent_id, "user", "Okay, bye now.")  # said as the call ended: only the history carries it
    await world.calls.hang_up(ALICE)
    await world.emu.wait_webhooks_idle()
    assert any(n["eventType"] == 103 for n in world.emu.delivered), "webhook 103 was delivered and merged"
    greeting = world.emu.agent(agent_id).conversation[0].content
    expected = [("assistant", greeting)]
    for n in range(4):
        expected += [("user", f"Question number {n}?"), ("assistant", f"Answer number {n}.")]
    assert await lines(world, call_id) == [*expected, ("user", "Okay, bye now.")]


async def test_live_join_keeps_the_asr_and_tts_presets_and_the_admins_params_but_not_their_model(
    tmp_path: Path, llm: FakeLLM
) -> None:
    agora = {
        "preset": "deepgram_nova_3,openai_gpt_5_mini,minimax_speech_2_6_turbo",
        "llm_params": {"model": "gpt-5-mini", "temperature": 1},
    }
    async with call_world(tmp_path, llm_base_url=llm.base_url, agora=agora) as world:
        _call_id, agent_id = await start(world)
        request = world.emu.agent(agent_id).request
    assert request["preset"] == "deepgram_nova_3,minimax_speech_2_6_turbo"
    assert request["properties"]["llm"]["params"] == {"temperature": 1}, "the bot's route picks the model"
    assert request["properties"]["tts"]["vendor"] == "minimax"


async def test_forgetting_everything_mid_reply_wins_over_the_turns_in_flight(world: CallWorld, llm: FakeLLM) -> None:
    call_id, agent_id = await start(world)
    llm.queue_reply("First answer.")
    await world.emu.user_says(agent_id, "My passport number is X1234567.")
    llm.stream_chunk_size = 4
    llm.stream_delay = 0.05
    llm.queue_reply("I will remember that your flight leaves on Friday morning from gate twelve.")
    turn = asyncio.create_task(world.emu.user_says(agent_id, "My flight leaves on Friday."))
    await eventually(lambda: llm.streams_started >= 2, within=5)
    await world.memory.forget_everything(ALICE)
    assert (await turn).outcome == "ok", "the agent still gets its answer"
    await world.live.wait_idle()  # type: ignore[union-attr]
    assert await lines(world, call_id) == [], "neither the line nor the reply of the turn in flight came back"
    assert await world.store.count_turns(ALICE) == 0


async def test_pausing_memory_mid_reply_keeps_the_reply_in_flight_out(world: CallWorld, llm: FakeLLM) -> None:
    call_id, agent_id = await start(world)
    llm.stream_chunk_size = 4
    llm.stream_delay = 0.05
    llm.queue_reply("I will remember that your flight leaves on Friday morning from gate twelve.")
    turn = asyncio.create_task(world.emu.user_says(agent_id, "My flight leaves on Friday."))
    await eventually(lambda: llm.streams_started >= 1, within=5)

    async def line_stored() -> bool:
        return (await lines(world, call_id))[-1:] == [("user", "My flight leaves on Friday.")]

    await eventually(line_stored, within=5)  # stored as it arrived, before the first bytes of the reply reach the agent
    stored = await lines(world, call_id)
    await world.store.set_memory_enabled(ALICE, False, time.time())
    assert (await turn).outcome == "ok", "the agent still gets its answer"
    await world.live.wait_idle()  # type: ignore[union-attr]
    assert await lines(world, call_id) == stored, "the pause fences out the reply that was streaming"


async def test_with_dense_retrieval_a_line_sharing_no_word_reaches_the_llm(tmp_path: Path, llm: FakeLLM) -> None:
    from standins.factories import make_call
    from tests.memory.test_dense import FILLER, PURCHASE

    llm.concepts.update({"car": "vehicle", "automobile": "vehicle", "purchase": "buy", "bought": "buy"})
    settings = {"timeout_seconds": 1.0, "embedding_model": "fake-embed"}
    async with call_world(tmp_path, llm_base_url=llm.base_url, llm=settings) as world:
        assert world.embedder is not None
        old = make_call(ALICE, state="ended", started_at=time.time() - 7 * 86400)
        await world.store.create_call(old)
        await world.memory.record_snapshot(old, [("user", PURCHASE), *FILLER], max_history=None, final=True)
        assert (await world.embedder.embed_member(ALICE))[0] == 1 + len(FILLER)
        _call_id, agent_id = await start(world)
        snapshot = "\n".join(m["content"] for m in world.emu.agent(agent_id).system_messages)
        assert "automobile" not in snapshot, "the call-start memory is full of later lines"

        llm.queue_reply("A red one, last spring.")
        await world.emu.user_says(agent_id, "Which car did I purchase?")
        assert PURCHASE in memory_message(llm.last_request)
        assert llm.embedding_requests[-1]["input"] == ["Which car did I purchase?"]
