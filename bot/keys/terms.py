"""Search terms hashed per member, so the full-text index of an encrypted member holds no word.

The terms are computed as the index computes them (``bot.store.terms``, the one tokeniser: FTS5's porter
tokenizer, mirrored in Python). A member's index holds ``MemberCipher.term_hash`` of each term instead of the term
itself; a query is hashed the same way, so the same rows match and the same counts feed BM25. A line said in
another language also has its language terms hashed (``hashed_language_terms``), and each query word the hashes of
its stems in other languages (``hashed_query``).
"""

from __future__ import annotations

from collections.abc import Iterable

from bot.keys.crypto import MemberCipher
from bot.store.terms import ALTERNATIVE, index_terms, language_stems, language_terms, query_words


def hashed(cipher: MemberCipher, terms: Iterable[str]) -> list[str]:
    """The member's keyed hashes of ``terms``, in order."""
    return [cipher.term_hash(term) for term in terms]


def hashed_document(cipher: MemberCipher, text: str) -> str:
    """What the full-text index stores for ``text``: its terms' keyed hashes, space separated."""
    return " ".join(hashed(cipher, index_terms(text)))


def hashed_language_terms(cipher: MemberCipher, text: str, language: str) -> str | None:
    """The keyed hashes of ``text``'s terms in ``language`` (``bot.store.terms.language_terms``), space separated;
    None when that language has none."""
    terms = language_terms(text, language)
    return None if terms is None else " ".join(hashed(cipher, terms.split()))


def hashed_query(cipher: MemberCipher, query: str) -> str | None:
    """``query`` as the backend looks it up for a sealed index (``bot.store.terms.query_lookups``): per word, the
    keyed hash of its English term followed by those of its stems in other languages; None without a word."""
    groups = [ALTERNATIVE.join(hashed(cipher, (term, *language_stems(word)))) for word, term in query_words(query)]
    return " ".join(groups) or None
