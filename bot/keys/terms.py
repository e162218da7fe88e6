"""Search terms as the full-text index sees them, computed in Python so the index can hold keyed hashes.

This mirrors SQLite FTS5's ``porter unicode61 remove_diacritics 2`` tokenizer: words are runs of letters and
digits (underscore separates, as in unicode61), lower-cased, diacritics removed (canonical decomposition, no
compatibility folding), then words of 3 to 64 characters stemmed with the Porter algorithm (``snowballstemmer``'s
``porter``). FTS5's porter also carries two of Martin Porter's later departures ("-bli" -> "-ble", "-logi" ->
"-log"), so a few words stem differently ("possibly": "possibli" here, "possibl" there; 21 of the 13,531 texts of
the memory-eval benchmark have such a word); index and query are hashed with this one function, so matching is
consistent. A member's index holds ``MemberCipher.term_hash`` of each term instead of the term itself; a query is
hashed the same way, so the same rows match and the same counts feed BM25.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from functools import lru_cache

import snowballstemmer

from bot.keys.crypto import MemberCipher

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STEMMER = snowballstemmer.stemmer("porter")


def _fold(text: str) -> str:
    decomposed = unicodedata.normalize("NFD", text.lower())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


PORTER_MIN = 3
PORTER_MAX = 64
"""FTS5's porter tokenizer leaves words shorter than 3 or longer than 64 characters as they are."""


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    if not PORTER_MIN <= len(word) <= PORTER_MAX:
        return word
    return str(_STEMMER.stemWord(word))


def index_terms(text: str) -> list[str]:
    """Every token of ``text`` in order (repeats kept, as the index counts them), normalized and stemmed."""
    return [stem(word) for word in _WORD.findall(_fold(text))]


def query_terms(text: str, max_terms: int = 12) -> list[str]:
    """The distinct searchable terms of a query: words longer than two characters, stemmed, first
    ``max_terms``."""
    terms: list[str] = []
    for word in _WORD.findall(_fold(text)):
        if len(word) <= 2:
            continue
        term = stem(word)
        if term not in terms:
            terms.append(term)
    return terms[:max_terms]


def hashed(cipher: MemberCipher, terms: Iterable[str]) -> list[str]:
    """The member's keyed hashes of ``terms``, in order."""
    return [cipher.term_hash(term) for term in terms]


def hashed_document(cipher: MemberCipher, text: str) -> str:
    """What the full-text index stores for ``text``: its terms' keyed hashes, space separated."""
    return " ".join(hashed(cipher, index_terms(text)))
