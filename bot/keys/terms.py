"""Search terms hashed per member, so the full-text index of an encrypted member holds no word.

The terms are computed as the index computes them (``bot.store.terms``, the one tokeniser: FTS5's porter
tokenizer, mirrored in Python). A member's index holds ``MemberCipher.term_hash`` of each term instead of the term
itself; a query is hashed the same way, so the same rows match and the same counts feed BM25.
"""

from __future__ import annotations

from collections.abc import Iterable

from bot.keys.crypto import MemberCipher
from bot.store.terms import index_terms, query_stems

query_terms = query_stems
"""``bot.store.terms.query_stems``, under the name the encrypting layer imported it by (until it imports it from
there)."""


def hashed(cipher: MemberCipher, terms: Iterable[str]) -> list[str]:
    """The member's keyed hashes of ``terms``, in order."""
    return [cipher.term_hash(term) for term in terms]


def hashed_document(cipher: MemberCipher, text: str) -> str:
    """What the full-text index stores for ``text``: its terms' keyed hashes, space separated."""
    return " ".join(hashed(cipher, index_terms(text)))
