"""The one tokeniser of memory search: what a line, a fact or a query is made of for ranking.

Every searcher takes its words and terms from here: the backends' full-text ranking (``bot.store.ranking``, FTS5
and PostgreSQL), the encrypted index's keyed term hashes (``bot.keys.terms``), the in-memory index of a member in a
call (``bot.memory.index``) and the memory block's builder (``bot.memory.context``). One name per meaning:

- ``words``: the words of a text as the index sees them (runs of letters and digits, folded);
- ``stem``: a word's term;
- ``index_terms`` / ``line_terms``: a document's terms (every token, or the distinct ones and the count);
- ``query_words`` / ``search_words`` / ``query_stems``: the searchable words of a query with their terms, the
  words alone (the backends stem them), the terms alone (the encrypted and in-memory indexes);
- ``content_query``: a message's content words (stop words dropped), the query the memory block ranks with.

The words and terms mirror SQLite FTS5's ``porter unicode61 remove_diacritics 2`` tokenizer: words are runs of
letters and digits (underscore separates, as in unicode61), lower-cased, diacritics removed (canonical
decomposition, no compatibility folding), then words of 3 to 64 characters stemmed with the Porter algorithm
(``snowballstemmer``'s ``porter``). FTS5's porter also carries two of Martin Porter's later departures ("-bli" ->
"-ble", "-logi" -> "-log"), so a few words stem differently ("possibly": "possibli" here, "possibl" there; 21 of
the 13,531 texts of the memory-eval benchmark have such a word); the encrypted index and its queries use this one
function, so their matching is consistent.
"""

from __future__ import annotations

import re
import unicodedata

import snowballstemmer

from bot.store.memo import memo

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STEMMER = snowballstemmer.stemmer("porter")

PORTER_MIN = 3
PORTER_MAX = 64
"""FTS5's porter tokenizer leaves words shorter than 3 or longer than 64 characters as they are."""
MAX_QUERY_TERMS = 12
"""A query is searched for by its first this many distinct terms."""

_STOP_WORD_TEXT = """
the and for you your are can what which with have has had this that there their them they was were will would
could should about from into just like need want know tell please my mine me our out how when where who why does
did doing done been being any all some more most very also not but get got its it's i'm okay yes yeah sure
thanks thank hello hi hey
"""
STOP_WORDS = frozenset(_STOP_WORD_TEXT.split())
"""Words of a message that select no memory (``content_query``)."""


def _fold(text: str) -> str:
    decomposed = unicodedata.normalize("NFD", text.lower())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def words(text: str) -> list[str]:
    """The words of ``text`` in order, lower-cased, diacritics removed: what the index's tokenizer splits."""
    return _WORD.findall(text.lower() if text.isascii() else _fold(text))


@memo(maxsize=65536)
def stem(word: str) -> str:
    """The term of one word (as ``words`` gives it)."""
    if not PORTER_MIN <= len(word) <= PORTER_MAX:
        return word
    return str(_STEMMER.stemWord(word))


def index_terms(text: str) -> list[str]:
    """Every token of ``text`` in order (repeats kept, as the index counts them), normalized and stemmed."""
    return [stem(word) for word in words(text)]


def line_terms(text: str) -> tuple[tuple[str, ...], int]:
    """The distinct terms of ``text`` (a tuple: not tracked by the garbage collector, unlike a set) and its length
    in terms (what FTS5 counts)."""
    terms = [word if word.isdigit() else stem(word) for word in words(text)]  # numbers do not stem
    return tuple(dict.fromkeys(terms)), len(terms)


def token_count(text: str) -> int:
    """The length of ``text`` in terms (BM25's document length)."""
    return len(words(text))


def query_words(text: str, max_terms: int = MAX_QUERY_TERMS) -> list[tuple[str, str]]:
    """The searchable words of a query with their terms: words longer than two characters, one per term (the first
    word of each), the first ``max_terms`` terms. Every search path takes its terms from here, so they weigh a
    query alike: the plain one hands the words to the backend's own stemmer (FTS5's porter, PostgreSQL's
    Snowball), the encrypted one hashes the terms, the in-memory index looks the terms up."""
    found: list[tuple[str, str]] = []
    seen: set[str] = set()
    for word in words(text):
        if len(word) <= 2:
            continue
        term = stem(word)
        if term not in seen:
            seen.add(term)
            found.append((word, term))
            if len(found) == max_terms:
                break
    return found


def search_words(text: str, max_terms: int = MAX_QUERY_TERMS) -> list[str]:
    """The words of ``query_words``, for a backend that stems them itself. Words are runs of letters and digits,
    which hold no quote, so no user text reaches a query language."""
    return [word for word, _ in query_words(text, max_terms)]


def query_stems(text: str, max_terms: int = MAX_QUERY_TERMS) -> list[str]:
    """The terms of ``query_words``."""
    return [term for _, term in query_words(text, max_terms)]


def content_query(message: str) -> str:
    """The words of a message that can select memories (stop words and words of two letters or fewer dropped),
    as one query."""
    return " ".join(w for w in words(message) if w not in STOP_WORDS and len(w) > 2)
