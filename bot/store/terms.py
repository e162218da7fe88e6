"""The one tokeniser of memory search: what a line, a fact or a query is made of for ranking.

Every searcher takes its words and terms from here: the backends' full-text ranking (``bot.store.ranking``, FTS5
and PostgreSQL), the encrypted index's keyed term hashes (``bot.keys.terms``), the in-memory index of a member in a
call (``bot.memory.index``) and the memory block's builder (``bot.memory.context``). One name per meaning:

- ``words``: the words of a text as the index sees them (runs of letters and digits, folded);
- ``stem``: a word's term;
- ``index_terms`` / ``line_terms``: a document's terms (every token, or the distinct ones and the count);
- ``query_words`` / ``search_words`` / ``query_stems``: the searchable words of a query with their terms, the
  words alone (the backends stem them), the terms alone (the encrypted and in-memory indexes);
- ``content_query``: a message's content words (stop words dropped), the query the memory block ranks with;
- ``language_terms`` / ``language_stems``: a line's terms in the language it was said in, and a query word's in
  each language memory may hold (below).

The words and terms mirror SQLite FTS5's ``porter unicode61 remove_diacritics 2`` tokenizer: words are runs of
letters and digits (underscore separates, as in unicode61), lower-cased, diacritics removed (canonical
decomposition, no compatibility folding), then words of 3 to 64 characters stemmed with the Porter algorithm
(``snowballstemmer``'s ``porter``). FTS5's porter also carries two of Martin Porter's later departures ("-bli" ->
"-ble", "-logi" -> "-log"), so a few words stem differently ("possibly": "possibli" here, "possibl" there; 21 of
the 13,531 texts of the memory-eval benchmark have such a word); the encrypted index and its queries use this one
function, so their matching is consistent.

Lines in other languages. Every line is indexed with those English terms; a line said in another language that
Snowball stems (``STEMMERS``) is also found by its words stemmed in that language (``language_terms``: "trabajaba"
and "trabajo" are both "trabaj" in Spanish, "Katzen" and "Katze" both "katz" in German, which Porter leaves
apart). A query word is looked up by its English term and by its stem in each such language (``language_stems``,
distinct stems only): in every language Snowball stems on the backends, which do not know which languages a
member's lines are in, and in the languages its lines are in for a member's in-memory index. The word matches a
line once whichever of its stems the line holds. Languages Snowball does not stem (Chinese, Japanese, Korean,
Thai, Vietnamese) have no language terms: the semantic index finds their lines.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable

import snowballstemmer

from bot.store.specifics import sealed

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STEMMER = snowballstemmer.stemmer("porter")
ENGLISH = "en"
STEMMERS = {
    "es": "spanish",
    "de": "german",
    "fr": "french",
    "pt": "portuguese",
    "it": "italian",
    "nl": "dutch",
    "ru": "russian",
    "tr": "turkish",
    "id": "indonesian",
    "hi": "hindi",
}
"""Snowball's stemmer for each language of ``bot.calls.language.LANGUAGES`` it has one for, English aside."""
_LANGUAGE_STEMMERS = {code: snowballstemmer.stemmer(name) for code, name in STEMMERS.items()}

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


@functools.lru_cache(maxsize=65536)
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


@functools.lru_cache(maxsize=65536)
def language_stem(word: str, language: str) -> str:
    """The term of one word (as ``words`` gives it) in ``language``, a key of ``STEMMERS``."""
    if not PORTER_MIN <= len(word) <= PORTER_MAX or word.isdigit():
        return word
    return str(_LANGUAGE_STEMMERS[language].stemWord(word))


def language_terms(text: str, language: str) -> str | None:
    """The distinct terms of ``text`` stemmed in ``language`` (space separated), what the word index finds a line
    said in that language by besides its English terms; None for English or a language Snowball does not stem."""
    if language not in _LANGUAGE_STEMMERS:
        return None
    return " ".join(dict.fromkeys(language_stem(word, language) for word in words(text))) or None


def stored_language_terms(given: str | None, content: str, language: str) -> str | None:
    """What a backend stores as a line's language terms: ``given`` when the writer computed them (the encrypting
    layer gives their keyed hashes, ``bot.keys.terms.hashed_language_terms``), else ``language_terms`` of its text,
    unless it is sealed (then None)."""
    if given is not None:
        return given
    return None if sealed(content) else language_terms(content, language)


def language_stems(word: str, languages: Iterable[str] = STEMMERS) -> tuple[str, ...]:
    """The distinct stems of a query word (as ``words`` gives it) in ``languages`` (those Snowball stems)."""
    return tuple(dict.fromkeys(language_stem(word, language) for language in languages if language in STEMMERS))


ALTERNATIVE = "|"
"""Separates a hashed query word's English term hash from its stems' hashes in other languages
(``bot.keys.terms.hashed_query``)."""


def query_lookups(query: str, *, hashed: bool = False) -> list[tuple[str, tuple[str, ...]]]:
    """What a backend looks each query word up by: the word (which the backend stems in English) and its stems in
    other languages (``language_stems``). A ``hashed`` query (member encryption) is already the keyed hashes of
    the words' English terms, each followed by its stems' hashes (``ALTERNATIVE``-separated)."""
    if not hashed:
        return [(word, language_stems(word)) for word in search_words(query)]
    found = []
    for group in query.split()[:MAX_QUERY_TERMS]:
        english, *stems = group.split(ALTERNATIVE)
        if english.isalnum() and all(stem.isalnum() for stem in stems):
            found.append((english, tuple(stems)))
    return found


def content_query(message: str) -> str:
    """The words of a message that can select memories (stop words and words of two letters or fewer dropped),
    as one query."""
    return " ".join(w for w in words(message) if w not in STOP_WORDS and len(w) > 2)
