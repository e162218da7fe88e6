"""The one tokeniser of memory search (bot.store.terms): the words and terms FTS5's porter tokenizer makes,
computed in Python, and the query words every search path takes from them."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.store.terms import content_query, index_terms, line_terms, query_stems, search_words, token_count

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
    assert token_count(text) == len(fts5_tokens(text))


@given(st.text(max_size=80))
def test_line_terms_are_the_distinct_index_terms_and_their_count(text: str) -> None:
    terms = index_terms(text)
    assert line_terms(text) == (tuple(dict.fromkeys(terms)), len(terms))


def test_query_stems_find_other_forms_of_a_word() -> None:
    assert query_stems("renewing") == ["renew"]
    assert set(query_stems("When was the renewal?")) <= set(index_terms("I renewed my passport; when was the renewal"))
    assert query_stems("a an it is ox") == []  # words of two letters or fewer are not searched for
    assert len(query_stems(" ".join(f"word{i}" for i in range(40)))) == 12


def test_plain_and_encrypted_searches_take_the_same_terms_from_a_query() -> None:
    question = "I need to schedule service for my car. Can you tell me what services I have scheduled? Café_bills"
    words = search_words(question)
    assert words == ["need", "schedule", "service", "for", "car", "can", "you", "tell", "what", "have", "cafe", "bills"]
    assert [fts5_tokens(w)[0] for w in words] == query_stems(question)  # FTS5 stems each to the hashed term


def test_a_message_s_content_query_drops_stop_words_and_short_words() -> None:
    assert content_query("Hey, what did I tell you about my sister's Café?") == "sister cafe"
    assert content_query("ok so it is") == ""
