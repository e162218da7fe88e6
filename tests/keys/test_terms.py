"""Search terms computed in Python as FTS5's porter tokenizer computes them, then hashed per member."""

from __future__ import annotations

import sqlite3

import pytest

from bot.keys.crypto import MemberCipher, new_data_key
from bot.keys.terms import hashed_document, index_terms, query_terms
from bot.memory.service import MemoryService
from bot.store.ranking import fts_terms
from bot.store.repository import Store
from tests.factories import make_call

SAMPLES = [
    "I renewed my passport and the renewal cost $130.",
    "Café naïve RÉSUMÉ, Ünïcödé!",
    "foo_bar x2 3.14 don't IS as an it",
    "My sister's dogs were running through the caresses of agreed conditional relational sensibilities",
    "Pick up the prescription at 5:30pm, order #FS-447291, flight UA-2231",
]


def fts5_tokens(text: str) -> list[str]:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5 (c, tokenize='porter unicode61 remove_diacritics 2')")
    db.execute("CREATE VIRTUAL TABLE v USING fts5vocab (t, 'instance')")
    db.execute("INSERT INTO t (rowid, c) VALUES (1, ?)", (text,))
    tokens = [row[0] for row in db.execute("SELECT term FROM v ORDER BY offset")]
    db.close()
    return tokens


@pytest.mark.parametrize("text", SAMPLES)
def test_index_terms_are_the_tokens_fts5s_porter_tokenizer_makes(text: str) -> None:
    assert index_terms(text) == fts5_tokens(text)


def test_query_terms_find_other_forms_of_a_word() -> None:
    assert query_terms("renewing") == ["renew"]
    assert set(query_terms("When was the renewal?")) <= set(index_terms("I renewed my passport; when was the renewal"))
    assert query_terms("a an it is ox") == []  # words of two letters or fewer are not searched for
    assert len(query_terms(" ".join(f"word{i}" for i in range(40)))) == 12


def test_a_hashed_document_holds_no_plain_term() -> None:
    cipher = MemberCipher(1, new_data_key())
    text = "Zebralocker renewal in Chicago"
    document = hashed_document(cipher, text)
    assert len(document.split()) == len(index_terms(text))
    for word in ("zebralock", "zebralocker", "renew", "renewal", "chicago", "Chicago"):
        assert word not in document
    assert cipher.term_hash("renew") in document.split()


def test_plain_and_encrypted_searches_take_the_same_terms_from_a_query() -> None:
    question = "I need to schedule service for my car. Can you tell me what services I have scheduled? Café_bills"
    words = fts_terms(question)
    assert words == ["need", "schedule", "service", "for", "car", "can", "you", "tell", "what", "have", "cafe", "bills"]
    assert [fts5_tokens(w)[0] for w in words] == query_terms(question)  # FTS5 stems each to the hashed term


async def test_a_query_weighs_each_stem_once_on_every_store(store: Store, memory: MemoryService) -> None:
    """Saying "schedule" and "scheduled" in one question counts that stem once, plain or encrypted, so the two
    paths rank alike (the encrypted one hashes stems, which cannot count twice)."""
    call = make_call(user_id=1, state="ended")
    await store.create_call(call)
    lines = ["I scheduled a service for the car", "The car is blue", "Lunch was good", "We talked about the weather"]
    await memory.record_snapshot(call, [("user", line) for line in lines], max_history=32)
    twice = await store.rank_turns(1, "schedule my car, scheduled", 10)
    once = await store.rank_turns(1, "schedule my car", 10)
    assert [t.content for t, _ in twice] == ["I scheduled a service for the car", "The car is blue"]
    assert [(t.content, round(s, 9)) for t, s in twice] == [(t.content, round(s, 9)) for t, s in once]
