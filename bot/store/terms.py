"""Search terms as the full-text index sees them, computed in Python: for the encrypted index (bot.keys.terms
hashes them) and for picking a query's words on both search paths alike.

This mirrors SQLite FTS5's ``porter unicode61 remove_diacritics 2`` tokenizer: words are runs of letters and
digits (underscore separates, as in unicode61), lower-cased, diacritics removed (canonical decomposition, no
compatibility folding), then words of 3 to 64 characters stemmed with the Porter algorithm (``snowballstemmer``'s
``porter``). FTS5's porter also carries two of Martin Porter's later departures ("-bli" -> "-ble", "-logi" ->
"-log"), so a few words stem differently ("possibly": "possibli" here, "possibl" there; 21 of the 13,531 texts of
the memory-eval benchmark have such a word); the encrypted index and its queries use this one function, so their
matching is consistent.
"""

from __future__ import annotations

import re
import unicodedata

import snowballstemmer

from bot.store.memo import memo

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STEMMER = snowballstemmer.stemmer("porter")


def _fold(text: str) -> str:
    decomposed = unicodedata.normalize("NFD", text.lower())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


PORTER_MIN = 3
PORTER_MAX = 64
"""FTS5's porter tokenizer leaves words shorter than 3 or longer than 64 characters as they are."""


@memo(maxsize=65536)
def stem(word: str) -> str:
    if not PORTER_MIN <= len(word) <= PORTER_MAX:
        return word
    return str(_STEMMER.stemWord(word))


def index_terms(text: str) -> list[str]:
    """Every token of ``text`` in order (repeats kept, as the index counts them), normalized and stemmed."""
    return [stem(word) for word in _WORD.findall(_fold(text))]


def query_words(text: str, max_terms: int = 12) -> list[tuple[str, str]]:
    """The searchable words of a query with their stems: words longer than two characters (normalized as the
    index does), one per stem (the first word of each), the first ``max_terms`` stems. Both search paths take
    their terms from here, so they weigh a query alike: the plain one hands the words to the backend's own
    stemmer (FTS5's porter, PostgreSQL's Snowball), the encrypted one hashes the stems."""
    words: list[tuple[str, str]] = []
    seen: set[str] = set()
    for word in _WORD.findall(_fold(text)):
        if len(word) <= 2:
            continue
        term = stem(word)
        if term not in seen:
            seen.add(term)
            words.append((word, term))
            if len(words) == max_terms:
                break
    return words


def query_terms(text: str, max_terms: int = 12) -> list[str]:
    """The distinct searchable terms of a query (``query_words``' stems)."""
    return [term for _, term in query_words(text, max_terms)]
