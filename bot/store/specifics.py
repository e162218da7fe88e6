"""How much a conversation line carries that a later conversation may need, stored with the line.

A call start ranks the member's latest lines by this count (``bot.memory.context``). It is computed when a line is
written, from its plain text, and kept in ``turns.specifics``, so ranking reads a small integer per line instead of
every line's text: with member encryption, only the lines that go into the memory block are decrypted. The count
reveals no text (a number from 0 to 11: how many numbers, names, dates and decisions, each kind capped, and
whether the line holds an identifier).
"""

from __future__ import annotations

import functools
import re

SPECIFICS_PAGE = 5000
"""Lines read at a time when older lines get their specifics counted (``count_specifics``)."""
_NUMBER = re.compile(r"\d")
_IDENTIFIER_CHARS = 5
"""A word with a digit and at least this many characters, punctuation around it aside, is an identifier:
"FS-447291", "7789-4456-901", "$9,124", "DL208", but not "2024", "3:00" or "$35"."""
_AROUND = ".,;:!?'\"()[]"
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+")
_DATE = re.compile(
    r"\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+\d|\b(?:mon|tues|wednes|thurs|fri|satur|sun)day\b"
    r"|\b(?:today|tomorrow|yesterday|next week|next month)\b",
    re.IGNORECASE,
)
_DECISION = re.compile(
    r"\b(?:decid|prefer|chose|choos|switch|chang|cancel|instead|actually|keep|go with|want|would like|"
    r"book|schedul|confirm|allerg|love|hate|favou?rite|always|never|my name|call me)\w*",
    re.IGNORECASE,
)
_SEALED = re.compile("[0-9a-f ]*\u27d0")
"""The start of a value sealed by member encryption (``bot.keys.sealed``), as migration 9 recognises it."""


@functools.lru_cache(maxsize=1 << 16)
def specifics(text: str) -> int:
    """Numbers, names, dates, decisions and preferences in ``text``: counted, each kind capped, so one long line
    does not win on length alone; a line holding an identifier (a confirmation code, an account number, an amount
    with thousands) counts one more, since nothing else in a conversation can bring it back.

    Measured (bench/memory_quality.py, memory-eval at 1,500 tokens): call start 0.945 -> 0.970, query-aware
    0.932 -> 0.950; LoCoMo dev (bench/locomo.py) unchanged, its conversations hold few such words."""
    numbers = min(3, sum(1 for w in text.split() if _NUMBER.search(w)))
    identifiers = 1 if holds_identifier(text) else 0
    names = min(3, len(_NAME.findall(text)))
    dates = min(2, len(_DATE.findall(text)))
    decisions = min(2, len(_DECISION.findall(text)))
    return numbers + identifiers + names + dates + decisions


@functools.lru_cache(maxsize=1 << 16)
def holds_identifier(text: str) -> bool:
    """Whether ``text`` holds a word with a digit and at least ``_IDENTIFIER_CHARS`` characters, punctuation around
    it aside."""
    return any(_NUMBER.search(w) and len(w.strip(_AROUND)) >= _IDENTIFIER_CHARS for w in text.split())


def sealed(content: str) -> bool:
    """Whether ``content`` was sealed by member encryption (``bot.keys.sealed``)."""
    return _SEALED.match(content) is not None


def stored_specifics(given: int | None, content: str) -> int | None:
    """What a backend stores for a line written with ``content``: ``given`` when the writer computed it (the
    encrypting layer does, from the plain text), else the count of ``content`` unless it is sealed (then None:
    it is computed from the plain text when read, and filled in by the encrypting layer's ``open``)."""
    if given is not None:
        return given
    return None if sealed(content) else specifics(content)
