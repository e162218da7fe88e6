"""How a remembered fact reads to the member it is about: in the second person.

Facts are written to the member they are about, in the second person and the conversation's language ("Your dog is
called Biscuit.", "Tu perro se llama Biscuit."): by extraction (``bot.memory.extraction``) and by the remember and
correct tools (``bot.memory.tools``), and the agent's memory message says so (``bot.memory.block``). Facts stored
before were notes about "the user" in the third person; shown to that person (``/memory``, the call card, the call
page), "The user is learning Portuguese" reads like a note about a stranger, so such a fact is shown as "You are
learning Portuguese". Only unambiguous references are turned: "the user" anywhere, and "they"/"their" only as a
fact's first word (further in, they may be about someone else); a fact written to the member has neither and is
shown as it is. Facts the member told in their own words are shown as they said them.
"""

from __future__ import annotations

import re

_BE_HAVE = {"is": "are", "was": "were", "has": "have", "does": "do", "isn't": "aren't", "wasn't": "weren't"}
_ADVERBS = frozenset({"also", "still", "often", "usually", "always", "never", "now", "really", "mostly", "just"})
_SUBJECT = re.compile(r"^(?:The user|They)\b(?!')", re.IGNORECASE)
_POSSESSIVE_START = re.compile(r"^(?:The user's|Their)\b", re.IGNORECASE)
_USERS = re.compile(r"\bthe user's\b", re.IGNORECASE)
_USER = re.compile(r"\bthe user\b", re.IGNORECASE)


def _base_form(verb: str) -> str:
    """The verb a third-person-singular form comes from: "lives" -> "live", "teaches" -> "teach"."""
    lower = verb.lower()
    if lower in _BE_HAVE:
        return _BE_HAVE[lower]
    if lower.endswith("ies") and len(lower) > 4:
        return verb[:-3] + "y"
    if lower.endswith(("ches", "shes", "sses", "xes", "zes", "oes")):
        return verb[:-2]
    if lower.endswith("s") and not lower.endswith("ss"):
        return verb[:-1]
    return verb


def second_person(fact: str) -> str:
    """``fact`` about "the user" as said to them: "The user lives in Leeds" -> "You live in Leeds"."""
    text = fact.strip()
    possessive = _POSSESSIVE_START.match(text)
    if possessive:
        text = "Your" + text[possessive.end() :]
    else:
        subject = _SUBJECT.match(text)
        if subject:
            was_they = subject.group(0).lower() == "they"
            rest = text[subject.end() :].lstrip()
            words = rest.split(" ")
            at = 0
            while at < len(words) - 1 and words[at].lower() in _ADVERBS:
                at += 1
            if words and not was_they:
                words[at] = _base_form(words[at])
            text = "You " + " ".join(words)
    text = _USERS.sub("your", text)
    return _USER.sub("you", text)


def for_member(text: str, *, told: bool) -> str:
    """How a fact reads to the member it is about: as they said it when they told it, else in the second person."""
    return text if told else second_person(text)
