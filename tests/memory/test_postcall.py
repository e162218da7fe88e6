"""Post-call processing: one LLM call per conversation, grounded facts, reconciliation, a durable queue."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

from bot.llm.client import LLMClient
from bot.memory.context import MEMORY_HEADER
from bot.memory.extraction import ExtractedFact
from bot.memory.importer import POST_CALL_JOB
from bot.memory.postcall import POST_CHAT_JOB, PostCallProcessor, facts_learned, reconcile
from bot.memory.service import MemoryService
from bot.store.models import CallRecord, ChatRecord, Conversation, FactRecord
from bot.store.sqlite import SqliteStore
from standins.factories import make_call, seed_fact

USER = 42
TUESDAY = datetime(2024, 3, 12, 14, 5, tzinfo=UTC).timestamp()
NOW = TUESDAY + 3600


def processor(store: SqliteStore, llm: LLMClient | None, **kwargs) -> PostCallProcessor:
    return PostCallProcessor(store, llm, clock=lambda: NOW, **kwargs)


def reply(summary: str = "The user talked about their dog.", *facts: dict) -> str:
    return json.dumps({"summary": summary, "facts": list(facts)})


def fact(text: str, evidence: str, replaces: list[int] | None = None, duplicate_of: int | None = None) -> dict:
    return {"text": text, "evidence": evidence, "replaces": replaces or [], "duplicate_of": duplicate_of}


async def ended_call(
    store: SqliteStore,
    memory: MemoryService,
    lines: list[tuple[str, str]],
    *,
    user_id: int = USER,
    started_at: float = TUESDAY,
    private: bool = False,
    queue: bool = True,
) -> CallRecord:
    call = make_call(user_id, state="ended", started_at=started_at, ended_at=started_at + 300, private=private)
    await store.create_call(call)
    await memory.record_snapshot(call, lines, max_history=None, final=True, at=started_at)
    if queue:
        await store.enqueue_job(POST_CALL_JOB, call.call_id, started_at + 300)
    return call


async def run_all(proc: PostCallProcessor) -> int:
    n = 0
    while await proc.run_once():
        n += 1
    return n


DOG_CALL = [
    ("assistant", "Hi! Good to hear from you."),
    ("user", "Hey. My dog is called Biscuit and he turned three."),
    ("assistant", "You should take Biscuit to puppy yoga."),
    ("user", "Ha, maybe."),
]


async def test_facts_and_summary_are_stored_and_reported(store, memory, fake_llm, llm) -> None:
    call = await ended_call(store, memory, DOG_CALL)
    fake_llm.queue_reply(
        reply("Talked about Biscuit.", fact("The user's dog is called Biscuit.", "My dog is called Biscuit"))
    )
    seen: list[tuple[str, str, int]] = []

    async def on_processed(kind: str, ref_id: str, count: int) -> None:
        seen.append((kind, ref_id, count))

    proc = processor(store, llm, on_processed=on_processed)
    assert await proc.facts_learned("call", call.call_id) is None
    assert await proc.run_once() is True
    assert await proc.run_once() is False

    [stored] = await store.list_facts(USER)
    assert stored.text == "The user's dog is called Biscuit."
    assert stored.source_call_id == call.call_id
    assert stored.created_at == call.ended_at
    assert (await store.get_call(call.call_id)).summary == "Talked about Biscuit."
    assert seen == [(POST_CALL_JOB, call.call_id, 1)]
    assert await proc.facts_learned("call", call.call_id) == 1
    assert await facts_learned(store, POST_CALL_JOB, call.call_id) == 1
    assert await store.job_state(POST_CALL_JOB, call.call_id) == "done"
    [request] = fake_llm.requests
    assert request["response_format"] == {"type": "json_object"}


async def test_assistant_words_and_injected_memory_never_become_facts(store, memory, fake_llm, llm) -> None:
    earlier = await ended_call(
        store, memory, [("user", "I collect vintage typewriters.")], started_at=TUESDAY - 86400 * 30, queue=False
    )
    await seed_fact(store, USER, "The user lives in Lisbon.", TUESDAY - 86400 * 30, call_id=earlier.call_id)
    injected = await memory.build_context(USER)
    block = injected[1]["content"]
    assert "typewriters" in block

    await ended_call(store, memory, DOG_CALL)
    fake_llm.queue_reply(
        reply(
            "Talked about Biscuit.",
            fact("The user's dog is called Biscuit.", "my dog is called biscuit"),
            fact("The user wants to take Biscuit to puppy yoga.", "You should take Biscuit to puppy yoga."),
            fact("The user collects vintage typewriters.", "I collect vintage typewriters."),
        )
    )
    await run_all(processor(store, llm))

    texts = {f.text for f in await store.list_facts(USER)}
    assert texts == {"The user lives in Lisbon.", "The user's dog is called Biscuit."}
    [request] = fake_llm.requests
    sent = "\n".join(m["content"] for m in request["messages"])
    assert MEMORY_HEADER not in sent and "<memory>" not in sent
    assert block not in sent
    assert "typewriters" not in sent
    assert injected[0]["content"] not in sent
    assert "[1] The user lives in Lisbon." in sent
    assert "ASSISTANT: You should take Biscuit to puppy yoga." in sent


async def test_contradiction_supersedes_the_old_fact(store, memory, fake_llm, llm) -> None:
    old = await seed_fact(store, USER, "The user lives in San Francisco.", TUESDAY - 86400)
    call = await ended_call(store, memory, [("user", "We moved to Seattle last month.")])
    fake_llm.queue_reply(
        reply("Moved.", fact("The user lives in Seattle.", "We moved to Seattle", replaces=[old.fact_id]))
    )
    await run_all(processor(store, llm))

    [current] = await store.list_facts(USER)
    assert current.text == "The user lives in Seattle."
    previous = await store.get_fact(old.fact_id)
    assert previous.superseded_by == current.fact_id
    assert previous.invalidated_at == call.ended_at
    history = await store.list_facts(USER, include_superseded=True)
    assert {f.fact_id for f in history} == {old.fact_id, current.fact_id}


async def test_duplicates_confirm_instead_of_adding(store, memory, fake_llm, llm) -> None:
    first = await ended_call(
        store, memory, [("user", "My dog is called Biscuit.")], started_at=TUESDAY - 86400, queue=False
    )
    dog = await seed_fact(store, USER, "The user's dog is called Biscuit.", TUESDAY - 86400, call_id=first.call_id)
    tea = await seed_fact(store, USER, "The user likes green tea.", TUESDAY - 86400, call_id=first.call_id)
    call = await ended_call(store, memory, [("user", "Biscuit, my dog, says hi. I still like green tea.")])
    fake_llm.queue_reply(
        reply(
            "Said hi.",
            fact("The user has a dog named Biscuit.", "Biscuit, my dog", duplicate_of=dog.fact_id),
            fact("the user  likes green tea", "I still like green tea"),
        )
    )
    await run_all(processor(store, llm))

    facts = await store.list_facts(USER)
    assert {f.fact_id for f in facts} == {dog.fact_id, tea.fact_id}
    assert {f.mentions for f in facts} == {2}
    assert {f.fact_id for f in await store.facts_from(Conversation("call", call.call_id))} == {dog.fact_id, tea.fact_id}
    assert await facts_learned(store, "call", call.call_id) == 2


async def test_reingesting_what_was_recalled_does_not_grow_the_store(store, memory, fake_llm, llm) -> None:
    dog = await seed_fact(store, USER, "The user's dog is called Biscuit.", TUESDAY - 86400)
    for _ in range(3):
        await ended_call(store, memory, [("user", "Remember, my dog is called Biscuit.")])
        fake_llm.queue_reply(reply("Dog.", fact("The user's dog is called Biscuit.", "my dog is called Biscuit")))
    await run_all(processor(store, llm))
    [only] = await store.list_facts(USER, include_superseded=True)
    assert only.fact_id == dog.fact_id and only.mentions == 4


async def test_ids_of_other_users_or_old_facts_are_ignored(store, memory, fake_llm, llm) -> None:
    theirs = await seed_fact(store, 7, "Someone else lives in Oslo.", 1.0)
    await ended_call(store, memory, [("user", "I live in Rome.")])
    fake_llm.queue_reply(
        reply(
            "Rome.",
            fact("The user lives in Rome.", "I live in Rome", replaces=[theirs.fact_id, 999], duplicate_of=None),
        ),
    )
    await run_all(processor(store, llm))
    assert (await store.get_fact(theirs.fact_id)).current
    assert [f.text for f in await store.list_facts(USER)] == ["The user lives in Rome."]


async def test_invalid_output_is_retried_once_then_nothing_is_written(store, memory, fake_llm, llm) -> None:
    call = await ended_call(store, memory, DOG_CALL)
    fake_llm.queue_reply('{"summary": "The user\'s dog Biscuit", "facts": [{"text": "The user')
    fake_llm.queue_reply("Sorry, I cannot help with that.")
    seen: list[int] = []

    async def on_processed(kind: str, ref_id: str, count: int) -> None:
        seen.append(count)

    assert await processor(store, llm, on_processed=on_processed).run_once()
    assert len(fake_llm.requests) == 2
    assert await store.job_state(POST_CALL_JOB, call.call_id) == "failed"
    assert await store.list_facts(USER, include_superseded=True) == []
    assert (await store.get_call(call.call_id)).summary is None
    assert [t.content for t in await store.call_turns(call.call_id)] == [c for _, c in DOG_CALL]
    assert seen == [0]
    assert await facts_learned(store, "call", call.call_id) == 0
    assert not await processor(store, llm).run_once()


async def test_a_valid_retry_is_used(store, memory, fake_llm, llm) -> None:
    await ended_call(store, memory, DOG_CALL)
    fake_llm.queue_reply("{not json")
    fake_llm.queue_reply(reply("Dog.", fact("The user's dog is called Biscuit.", "My dog is called Biscuit")))
    await run_all(processor(store, llm))
    assert len(fake_llm.requests) == 2
    assert fake_llm.requests[1]["temperature"] > fake_llm.requests[0]["temperature"]
    assert len(await store.list_facts(USER)) == 1


async def test_unreachable_llm_is_retried_later(store, memory, fake_llm, llm) -> None:
    call = await ended_call(store, memory, DOG_CALL)
    now = [NOW]
    proc = PostCallProcessor(store, llm, clock=lambda: now[0], retry_base_seconds=60)
    fake_llm.fail_next(1, 503)
    assert await proc.run_once()
    assert await store.job_state(POST_CALL_JOB, call.call_id) == "pending"
    assert not await proc.run_once()
    now[0] += 61
    fake_llm.queue_reply(reply("Dog."))
    assert await proc.run_once()
    assert await store.job_state(POST_CALL_JOB, call.call_id) == "done"


async def test_queue_resumes_after_a_restart_and_runs_once(tmp_path: Path, fake_llm, llm) -> None:
    path = tmp_path / "restart.db"
    store = SqliteStore(path)
    await store.open()
    memory = MemoryService(store, budget_tokens=1500, persona="p")
    call = await ended_call(store, memory, DOG_CALL)
    crashed = await store.claim_job(NOW, 300)
    assert crashed is not None and crashed.ref_id == call.call_id
    await store.close()

    store = SqliteStore(path)
    await store.open()
    try:
        fake_llm.queue_reply(reply("Dog.", fact("The user's dog is called Biscuit.", "My dog is called Biscuit")))
        early = PostCallProcessor(store, llm, clock=lambda: NOW + 10)
        assert not await early.run_once()
        later = PostCallProcessor(store, llm, clock=lambda: NOW + 301)
        assert await later.run_once()
        assert not await later.run_once()
        assert len(fake_llm.requests) == 1
        assert len(await store.list_facts(USER)) == 1
        assert await store.job_state(POST_CALL_JOB, call.call_id) == "done"
        # The worker that crashed wakes up late: its claim is fenced off, nothing is written twice.
        assert (
            await store.apply_extraction(
                crashed.job_id,
                crashed.attempts,
                USER,
                NOW,
                Conversation("call", call.call_id),
                new_facts=[("The user is a ghost.", [])],
            )
            is None
        )
        assert len(await store.list_facts(USER)) == 1
    finally:
        await store.close()


async def test_without_llm_the_job_is_done_with_no_facts(store, memory) -> None:
    call = await ended_call(store, memory, DOG_CALL)
    seen: list[int] = []

    async def on_processed(kind: str, ref_id: str, count: int) -> None:
        seen.append(count)

    assert await processor(store, None, on_processed=on_processed).run_once()
    assert await store.job_state(POST_CALL_JOB, call.call_id) == "done"
    assert await facts_learned(store, "call", call.call_id) == 0
    assert seen == [0]
    assert len(await store.call_turns(call.call_id)) == len(DOG_CALL)
    assert (await store.get_call(call.call_id)).summary is None


async def test_private_calls_and_paused_users_are_skipped(store, memory, fake_llm, llm) -> None:
    private = await ended_call(store, memory, DOG_CALL, private=True)
    paused = await ended_call(store, memory, DOG_CALL, user_id=43)
    await store.set_memory_enabled(43, False, NOW)
    assert await run_all(processor(store, llm)) == 2
    assert fake_llm.requests == []
    for call in (private, paused):
        assert await store.job_state(POST_CALL_JOB, call.call_id) == "done"
        assert (await store.get_call(call.call_id)).summary is None
    assert await store.count_facts(USER) == 0 and await store.count_facts(43) == 0


async def test_memory_paused_while_the_llm_answers_writes_nothing(store, memory, fake_llm, llm) -> None:
    await ended_call(store, memory, DOG_CALL)

    async def pause_then_answer(body: dict) -> str:
        await store.set_memory_enabled(USER, False, NOW)
        return reply("Dog.", fact("The user's dog is called Biscuit.", "My dog is called Biscuit"))

    fake_llm.set_responder(pause_then_answer)
    await run_all(processor(store, llm))
    assert await store.count_facts(USER) == 0


async def test_call_forgotten_while_the_llm_answers_leaves_no_trace(store, memory, fake_llm, llm) -> None:
    call = await ended_call(store, memory, DOG_CALL)

    async def forget_then_answer(body: dict) -> str:
        await memory.forget_conversation(USER, "call", call.call_id)
        return reply("Dog.", fact("The user's dog is called Biscuit.", "My dog is called Biscuit"))

    fake_llm.set_responder(forget_then_answer)
    await run_all(processor(store, llm))
    assert await store.count_facts(USER, include_superseded=True) == 0
    assert await store.job_state(POST_CALL_JOB, call.call_id) == "done"


async def test_call_without_user_lines_needs_no_llm(store, memory, fake_llm, llm) -> None:
    await ended_call(store, memory, [("assistant", "Hello? Are you there?")])
    await run_all(processor(store, llm))
    assert fake_llm.requests == []


async def test_open_call_waits_until_it_has_ended(store, memory, fake_llm, llm) -> None:
    call = make_call(USER, state="active", started_at=TUESDAY)
    await store.create_call(call)
    await store.enqueue_job(POST_CALL_JOB, call.call_id, TUESDAY)
    assert await processor(store, llm).run_once()
    assert await store.job_state(POST_CALL_JOB, call.call_id) == "pending"
    assert fake_llm.requests == []


async def test_forgetting_a_call_removes_the_facts_that_came_only_from_it(store, memory, fake_llm, llm) -> None:
    first = await ended_call(store, memory, [("user", "My dog is called Biscuit.")], started_at=TUESDAY - 86400)
    fake_llm.queue_reply(reply("Dog.", fact("The user's dog is called Biscuit.", "My dog is called Biscuit")))
    await run_all(processor(store, llm))
    second = await ended_call(store, memory, [("user", "Biscuit is my dog. I play the cello.")])
    fake_llm.queue_reply(
        reply(
            "Cello.",
            fact("The user's dog is called Biscuit.", "Biscuit is my dog"),
            fact("The user plays the cello.", "I play the cello"),
        )
    )
    await run_all(processor(store, llm))
    assert await store.count_facts(USER) == 2

    await memory.forget_conversation(USER, "call", second.call_id)
    assert [f.text for f in await store.list_facts(USER, include_superseded=True)] == [
        "The user's dog is called Biscuit."
    ]
    await memory.forget_conversation(USER, "call", first.call_id)
    assert await store.count_facts(USER, include_superseded=True) == 0


async def test_relative_dates_are_resolved_against_the_call_date(store, memory, fake_llm, llm) -> None:
    await ended_call(store, memory, [("user", "I went to the dentist yesterday.")])
    fake_llm.queue_reply(
        reply("Dentist.", fact("The user went to the dentist on 2024-03-11.", "I went to the dentist yesterday"))
    )
    await run_all(processor(store, llm))
    prompt = fake_llm.requests[0]["messages"][-1]["content"]
    assert "Tuesday 2024-03-12" in prompt
    assert [f.text for f in await store.list_facts(USER)] == ["The user went to the dentist on 2024-03-11."]


async def test_chat_sessions_are_processed_too(store, memory, fake_llm, llm) -> None:
    chat = ChatRecord("chat-1", USER, None, False, TUESDAY, TUESDAY + 60)
    await store.create_chat(chat)
    await store.append_chat_turn(chat.chat_id, USER, "user", "I am learning Portuguese.", TUESDAY + 60)
    await store.end_chat(chat.chat_id, TUESDAY + 60)
    await store.enqueue_job(POST_CHAT_JOB, chat.chat_id, TUESDAY + 60)
    fake_llm.queue_reply(reply("Portuguese.", fact("The user is learning Portuguese.", "I am learning Portuguese")))
    await run_all(processor(store, llm))
    [learned] = await store.list_facts(USER)
    assert learned.source_chat_id == chat.chat_id
    assert (await store.get_chat(chat.chat_id)).summary == "Portuguese."
    assert "text chat" in fake_llm.requests[0]["messages"][-1]["content"]
    assert await facts_learned(store, "chat", chat.chat_id) == 1


async def test_unknown_job_kinds_are_failed_not_looped(store, fake_llm, llm) -> None:
    await store.enqueue_job("something_else", "x", TUESDAY)
    assert await processor(store, llm).run_once()
    assert await store.job_state("something_else", "x") == "failed"


async def test_run_processes_until_stopped(store, memory, fake_llm, llm) -> None:
    calls = [await ended_call(store, memory, DOG_CALL) for _ in range(2)]
    fake_llm.set_responder(lambda body: reply("Dog."))
    stop = asyncio.Event()
    done: list[str] = []

    async def on_processed(kind: str, ref_id: str, count: int) -> None:
        done.append(ref_id)
        if len(done) == 2:
            stop.set()

    await asyncio.wait_for(processor(store, llm, on_processed=on_processed).run(stop, poll_seconds=0.01), 5)
    assert done == [c.call_id for c in calls]


def test_reconcile_plans_confirmations_and_replacements() -> None:
    current = [
        FactRecord(1, USER, "The user lives in Paris.", None, None, 1, 1, 1, 1),
        FactRecord(2, USER, "The user likes jazz.", None, None, 1, 1, 1, 1),
    ]
    plan = reconcile(
        [
            ExtractedFact("The user likes Jazz", "e", duplicate_of=None),
            ExtractedFact("The user lives in Berlin.", "e", replaces=(1, 1, 77)),
            ExtractedFact("The user lives in Berlin.", "e"),
            ExtractedFact("The user moved to Berlin.", "e", replaces=(1,)),
            ExtractedFact("The user's jazz band is The Quiet.", "e", duplicate_of=99),
        ],
        current,
    )
    assert plan.confirmed == [2]
    assert plan.new_facts == [
        ("The user lives in Berlin.", [1]),
        ("The user moved to Berlin.", []),
        ("The user's jazz band is The Quiet.", []),
    ]


async def test_a_fact_forgotten_while_the_llm_answers_is_not_learned_again(store, memory, fake_llm, llm) -> None:
    known = await seed_fact(store, USER, "The user's dog is called Biscuit.", TUESDAY - 86400)
    call = await ended_call(store, memory, DOG_CALL)

    async def forget_then_answer(body: dict) -> str:
        assert await memory.forget_fact(USER, known.fact_id) is not None  # /forget while the job runs
        learned = fact("Biscuit, the user's dog, turned three.", "My dog is called Biscuit and he turned three")
        return reply("Talked about Biscuit.", learned)

    fake_llm.set_responder(forget_then_answer)
    await run_all(processor(store, llm))
    assert await store.count_facts(USER, include_superseded=True) == 0, "the forgotten fact came back"
    assert await store.job_state(POST_CALL_JOB, call.call_id) == "done"
