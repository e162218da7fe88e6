"""Memory across languages (issue 31, item 3): a line keeps the language its call was held in, and a query in that
language finds it by other forms of its words, which English stemming leaves apart; English memory ranks as
before."""

from __future__ import annotations

import json

import pytest

from bot.llm.client import LLMClient
from bot.memory.importer import POST_CALL_JOB
from bot.memory.postcall import PostCallProcessor
from bot.memory.service import MemoryService
from bot.store.repository import Store
from standins.factories import make_call, seed_fact
from standins.llm_server import FakeLLM

SPANISH = [
    ("user", "El verano pasado viajé a Lisboa con mi hermana"),
    ("assistant", "¡Qué bonito! ¿Y qué tal el viaje?"),
    ("user", "Mi hermana trabaja en un hospital de Oporto"),
    ("user", "Tengo dos gatos, Lola y Mango"),
]
GERMAN = [
    ("user", "Meine Katzen heißen Mimi und Momo"),
    ("assistant", "Schöne Namen! Und wie geht es deinen Schwestern?"),
    ("user", "Ich arbeite seit zwei Jahren in Hamburg"),
]


async def _remember(store: Store, memory: MemoryService, language: str, lines: list[tuple[str, str]]) -> str:
    call = make_call(user_id=31, state="ended", language=language)
    await store.create_call(call)
    await memory.record_snapshot(call, lines, max_history=None)  # type: ignore[arg-type]
    return call.call_id


async def _found(store: Store, query: str) -> list[str]:
    return [turn.content for turn, _ in await store.rank_turns(31, query, 3)]


async def test_a_spanish_call_s_lines_keep_their_language(store: Store, memory: MemoryService) -> None:
    call_id = await _remember(store, memory, "es", SPANISH)
    assert {turn.language for turn in await store.call_turns(call_id)} == {"es"}


@pytest.mark.parametrize(
    ("query", "line"),
    [
        ("¿Recuerdas cuándo viajamos?", SPANISH[0][1]),  # viajamos / viajé: "viaj" in Spanish
        ("¿Dónde trabajaba mi hermana?", SPANISH[2][1]),  # trabajaba / trabaja: "trabaj"
        ("¿recuerdas mis gatos?", SPANISH[3][1]),
    ],
)
async def test_a_spanish_query_finds_a_spanish_line_by_another_form_of_its_words(
    store: Store, memory: MemoryService, query: str, line: str
) -> None:
    await _remember(store, memory, "es", SPANISH)
    assert line in await _found(store, query)


@pytest.mark.parametrize(
    ("query", "line"),
    [
        ("Was weißt du über die Katze?", GERMAN[0][1]),  # Katze / Katzen: "katz" in German
        ("Wo hast du gearbeitet? Arbeitet man da gut?", GERMAN[2][1]),  # arbeitet / arbeite: "arbeit"
    ],
)
async def test_a_german_query_finds_a_german_line_by_another_form_of_its_words(
    store: Store, memory: MemoryService, query: str, line: str
) -> None:
    await _remember(store, memory, "de", GERMAN)
    assert line in await _found(store, query)


async def test_without_the_line_s_language_english_stemming_alone_misses_it(
    store: Store, memory: MemoryService
) -> None:
    """The same lines stored as English are not found by the inflected queries: what the language adds."""
    await _remember(store, memory, "en", SPANISH + GERMAN)
    assert await _found(store, "¿Recuerdas cuándo viajamos?") == []
    assert await _found(store, "Was weißt du über die Katze?") == []


async def test_the_member_s_index_finds_them_as_the_store_does(store: Store, memory: MemoryService) -> None:
    """The live path ranks from the member's in-memory index: the same lines for the same inflected queries."""
    await _remember(store, memory, "es", SPANISH)
    await _remember(store, memory, "de", GERMAN)
    current = make_call(user_id=31, state="active", language="es")
    await store.create_call(current)
    index = await memory.context.indexes.get(31, current.call_id)
    for query, line in [
        ("¿Dónde trabajaba mi hermana?", SPANISH[2][1]),
        ("Was weißt du über die Katze?", GERMAN[0][1]),
    ]:
        assert [t.content for t, _ in index.rank_turns(query, 3)] == await _found(store, query)
        assert line in await _found(store, query)


async def test_facts_from_a_spanish_call_stay_spanish(
    store: Store, memory: MemoryService, fake_llm: FakeLLM, llm: LLMClient
) -> None:
    """The extraction request says the call was held in Spanish and asks for its facts as said; a Spanish fact
    quoting a Spanish line (accents and all) is stored as it came."""
    call_id = await _remember(store, memory, "es", SPANISH)
    await store.enqueue_job(POST_CALL_JOB, call_id, 0.0)
    fact = {"text": "La hermana del usuario trabaja en un hospital de Oporto.", "evidence": "trabaja en un hospital"}
    said = {"summary": "Habló de su hermana y de sus gatos.", "facts": [{**fact, "replaces": [], "duplicate_of": None}]}
    fake_llm.queue_reply(json.dumps(said))
    assert await PostCallProcessor(store, llm).run_once() is True

    assert [f.text for f in await store.list_facts(31)] == [fact["text"]]
    assert (await store.get_call(call_id)).summary == said["summary"]  # type: ignore[union-attr]
    [request] = fake_llm.requests
    system, user = (message["content"] for message in request["messages"])
    assert "never translate" in system
    assert "It was held in Spanish." in user


async def test_the_member_s_index_finds_a_fact_in_the_language_of_their_lines(
    store: Store, memory: MemoryService
) -> None:
    """Facts carry no language of their own: on the live path they are searched in the languages of the member's
    lines too, so a Spanish fact is found by another form of its words."""
    call_id = await _remember(store, memory, "es", SPANISH)
    await seed_fact(store, 31, "La hermana del usuario trabaja en Oporto", 0.0, call_id=call_id)
    await seed_fact(store, 31, "Al usuario le gusta el café", 0.0, call_id=call_id)
    current = make_call(user_id=31, state="active", language="es")
    await store.create_call(current)
    index = await memory.context.indexes.get(31, current.call_id)
    assert [f.text for f, _ in index.rank_facts("¿Dónde trabajaba?", 3)] == ["La hermana del usuario trabaja en Oporto"]
