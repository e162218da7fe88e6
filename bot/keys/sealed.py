"""How an encrypted member text is stored in a text column, on either backend, index included.

A sealed value is ``"<term hashes> ⟐<ciphertext>"``:

- the term hashes (``bot.keys.terms.hashed_document``: one keyed hash per word, in order, space separated) are what
  the backend's full-text index (SQLite FTS5, PostgreSQL ``tsvector``) picks up, one token per word of the
  plaintext, so document lengths and per-term counts, and so the BM25 ranking, are those of the plain text;
- ``⟐`` (U+27D0) marks the start of the ciphertext;
- the ciphertext (``MemberCipher.encrypt``: version, nonce, AES-256-GCM output) is written one byte per Braille
  pattern character (U+2800 + byte). Braille patterns and ``⟐`` are symbols, which both backends' tokenizers treat
  as separators, so the ciphertext adds nothing to the index.

Columns that are not searched (summaries) carry no hashes: ``"⟐<ciphertext>"``.
"""

from __future__ import annotations

import re

from bot.keys.crypto import DecryptionFailed, MemberCipher
from bot.keys.terms import hashed_document

SEAL = "\u27d0"


def _to_braille(data: bytes) -> str:
    """One Braille pattern per byte: in UTF-16-BE each is the byte 0x28 followed by the data byte."""
    pairs = bytearray(2 * len(data))
    pairs[0::2] = b"\x28" * len(data)
    pairs[1::2] = data
    return pairs.decode("utf-16-be")


def _from_braille(text: str) -> bytes | None:
    pairs = text.encode("utf-16-be", "surrogatepass")
    if pairs[0::2].strip(b"\x28"):
        return None  # a character that is not a Braille pattern: not a sealed value
    return pairs[1::2]


_SEALED = re.compile(r"[0-9a-f ]*" + SEAL + r"[\u2800-\u28ff]+")


def seal(cipher: MemberCipher, column: str, text: str, *, indexed: bool) -> str:
    """``text`` sealed; an empty text stays empty: it has nothing to hide, and a line forgotten while its call was
    open is stored with no text, where the merge finds it (``bot.memory.merge``)."""
    if not text:
        return ""
    body = _to_braille(cipher.encrypt(column, text))
    if indexed:
        terms = hashed_document(cipher, text)
        if terms:
            return f"{terms} {SEAL}{body}"
    return SEAL + body


def is_sealed(value: str) -> bool:
    """True for a value ``seal`` wrote (plain text from before encryption was turned on is not)."""
    return _SEALED.fullmatch(value) is not None


def unseal(cipher: MemberCipher, column: str, value: str) -> str:
    """The plain text; ``DecryptionFailed`` when the value is not this member's and column's (or not sealed)."""
    if not value:
        return ""
    at = value.rfind(SEAL)
    raw = _from_braille(value[at + 1 :]) if at >= 0 else None
    if raw is None:
        raise DecryptionFailed(cipher.user_id, column)
    return cipher.decrypt(column, raw)
